/*
 * record_writer.h: the two-pass byte writer the C record encoders share
 * (_recordencode.c for the client and batch.py, _columnencode.c for the
 * JSON produce path), so both write Kafka's varints and record fields the
 * same way.
 *
 * A first pass with `start` NULL only counts bytes (`pos`); the caller then
 * allocates exactly that many and a second pass writes them, checking every
 * write against the room left: input that changed between the passes is a
 * RuntimeError, never a write past the end.
 */
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* A varint or varlong takes at most ten bytes (ceil(64 / 7)). */
#define VARINT_BYTES_MAX 10

typedef struct {
    char *start; /* NULL in the sizing pass */
    Py_ssize_t pos;
    Py_ssize_t size;
} writer;

static inline uint64_t
zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline Py_ssize_t
varint_size(int64_t v)
{
    uint64_t z = zigzag(v);
    Py_ssize_t n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static int
room_lost(void)
{
    PyErr_SetString(PyExc_RuntimeError, "the input changed while it was being encoded");
    return -1;
}

static int
put_varint(writer *w, int64_t v)
{
    if (w->start == NULL) {
        w->pos += varint_size(v);
        return 0;
    }
    if (w->size - w->pos < VARINT_BYTES_MAX && w->size - w->pos < varint_size(v)) {
        return room_lost();
    }
    uint64_t z = zigzag(v);
    unsigned char *p = (unsigned char *)w->start + w->pos;
    while (z >= 0x80) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    w->pos = (char *)p - w->start;
    return 0;
}

static int
put_bytes(writer *w, const void *data, Py_ssize_t len)
{
    if (w->start != NULL) {
        if (w->size - w->pos < len) {
            return room_lost();
        }
        memcpy(w->start + w->pos, data, (size_t)len);
    }
    w->pos += len;
    return 0;
}


/*
 * _recordencode: encode the records section of a Kafka RecordBatch v2 in
 * one call, the producer-side twin of _recordscan.
 *
 * This is the C twin of the pure-Python encoder in lograft/protocol/batch.py
 * (_encode_record); both must give the same bytes for the same records (the
 * unit tests compare them with hypothesis). Each record is
 *
 *     length varint | attributes int8 (0) | timestampDelta varlong |
 *     offsetDelta varint | keyLength varint (-1 = null) | key |
 *     valueLength varint (-1 = null) | value | headerCount varint |
 *     headerCount x (headerKeyLength varint, headerKey (UTF-8,
 *     surrogateescape), headerValueLength varint (-1 = null), headerValue)
 *
 * Two passes over the records: the first sizes every record (and checks
 * every field's type), the second writes into one bytes object of exactly
 * that size. The records are Python objects the caller owns; an attribute
 * may run Python code between the passes, so the second pass checks every
 * write against the room left and fails (RuntimeError) rather than write
 * past the end if the records changed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "record_writer.h"

/* Length varint then the bytes of `obj` (bytes-like), or -1 for None.
 * Lengths are Kafka int32s: a longer field is a ValueError. */
static int
put_nullable(writer *w, PyObject *obj, const char *what)
{
    if (obj == Py_None) {
        return put_varint(w, -1);
    }
    if (PyBytes_CheckExact(obj)) {
        /* the common case, without the buffer protocol's cost */
        Py_ssize_t len = PyBytes_GET_SIZE(obj);
        if (len > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "a record's %s of %zd bytes exceeds the int32 length",
                         what, len);
            return -1;
        }
        if (put_varint(w, len) < 0) {
            return -1;
        }
        return put_bytes(w, PyBytes_AS_STRING(obj), len);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a record's %s must be bytes-like or None, not %.100s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    int rc = -1;
    if (view.len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "a record's %s of %zd bytes exceeds the int32 length",
                     what, view.len);
    }
    else if (put_varint(w, view.len) == 0 && put_bytes(w, view.buf, view.len) == 0) {
        rc = 0;
    }
    PyBuffer_Release(&view);
    return rc;
}

/* One header (key str, value bytes-like or None). */
static int
put_header(writer *w, PyObject *pair)
{
    PyObject *fast = PySequence_Fast(pair, "a header must be a (key, value) pair");
    if (fast == NULL) {
        return -1;
    }
    int rc = -1;
    PyObject *encoded = NULL;
    if (PySequence_Fast_GET_SIZE(fast) != 2) {
        PyErr_SetString(PyExc_ValueError, "a header must be a (key, value) pair");
        goto done;
    }
    PyObject *key = PySequence_Fast_GET_ITEM(fast, 0);
    PyObject *value = PySequence_Fast_GET_ITEM(fast, 1);
    if (!PyUnicode_Check(key)) {
        PyErr_Format(PyExc_TypeError, "a header key must be str, not %.100s",
                     Py_TYPE(key)->tp_name);
        goto done;
    }
    const char *kdata;
    Py_ssize_t klen;
    if (PyUnicode_IS_ASCII(key)) {
        kdata = (const char *)PyUnicode_DATA(key);
        klen = PyUnicode_GET_LENGTH(key);
    }
    else {
        /* header_key_bytes in batch.py: surrogate escapes give back the
         * original bytes of a key that was not valid UTF-8. */
        encoded = PyUnicode_AsEncodedString(key, "utf-8", "surrogateescape");
        if (encoded == NULL) {
            goto done;
        }
        kdata = PyBytes_AS_STRING(encoded);
        klen = PyBytes_GET_SIZE(encoded);
    }
    if (klen > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a header key exceeds the int32 length");
        goto done;
    }
    if (put_varint(w, klen) < 0 || put_bytes(w, kdata, klen) < 0) {
        goto done;
    }
    rc = put_nullable(w, value, "header value");
done:
    Py_XDECREF(encoded);
    Py_DECREF(fast);
    return rc;
}

/* The record's body (everything after its length varint). */
static int
put_body(writer *w, int64_t ts_delta, int64_t offset_delta, PyObject *key, PyObject *value,
         PyObject *headers)
{
    if (put_bytes(w, "\0", 1) < 0 || put_varint(w, ts_delta) < 0 ||
        put_varint(w, offset_delta) < 0 || put_nullable(w, key, "key") < 0 ||
        put_nullable(w, value, "value") < 0) {
        return -1;
    }
    if (headers == Py_None) {
        return put_varint(w, 0);
    }
    PyObject *fast = PySequence_Fast(headers, "a record's headers must be a sequence");
    if (fast == NULL) {
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    int rc = put_varint(w, n);
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        rc = put_header(w, PySequence_Fast_GET_ITEM(fast, i));
    }
    Py_DECREF(fast);
    return rc;
}

/* The four fields of one record, new references. */
typedef struct {
    PyObject *key;
    PyObject *value;
    PyObject *headers;
    PyObject *timestamp;
} fields;

static PyObject *s_key, *s_value, *s_headers, *s_timestamp;

static void
fields_clear(fields *f)
{
    Py_CLEAR(f->key);
    Py_CLEAR(f->value);
    Py_CLEAR(f->headers);
    Py_CLEAR(f->timestamp);
}

static int
fields_get(PyObject *record, fields *f)
{
    f->key = PyObject_GetAttr(record, s_key);
    f->value = f->key ? PyObject_GetAttr(record, s_value) : NULL;
    f->headers = f->value ? PyObject_GetAttr(record, s_headers) : NULL;
    f->timestamp = f->headers ? PyObject_GetAttr(record, s_timestamp) : NULL;
    if (f->timestamp == NULL) {
        fields_clear(f);
        return -1;
    }
    return 0;
}

/* timestamp - base as int64, or a ValueError where Python's encode_varint
 * would raise one (the difference outside int64). */
static int
ts_delta_of(PyObject *timestamp, int64_t default_ts, int64_t base_ts, int64_t *ts, int64_t *delta)
{
    if (timestamp == Py_None) {
        *ts = default_ts;
    }
    else {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(timestamp, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (overflow) {
            PyErr_SetString(PyExc_ValueError, "varint out of int64 range: a timestamp");
            return -1;
        }
        *ts = (int64_t)v;
    }
    if ((base_ts < 0 && *ts > INT64_MAX + base_ts) || (base_ts > 0 && *ts < INT64_MIN + base_ts)) {
        PyErr_SetString(PyExc_ValueError, "varint out of int64 range: a timestamp delta");
        return -1;
    }
    *delta = *ts - base_ts;
    return 0;
}

static int
delta_at(PyObject *deltas_fast, Py_ssize_t i, int64_t *out)
{
    if (deltas_fast == NULL) {
        *out = i;
        return 0;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(PySequence_Fast_GET_ITEM(deltas_fast, i), &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "varint out of int64 range: an offset delta");
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* One pass: with w->start NULL it sizes, else it writes. Also finds the
 * base (first) and largest timestamp. */
static int
encode_pass(writer *w, PyObject *records_fast, PyObject *deltas_fast, int64_t default_ts,
            int64_t *base_ts, int64_t *max_ts)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records_fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        fields f;
        if (fields_get(PySequence_Fast_GET_ITEM(records_fast, i), &f) < 0) {
            return -1;
        }
        int64_t ts, ts_delta, offset_delta;
        if (i == 0) {
            /* the base is the first record's timestamp: delta 0 */
            if (ts_delta_of(f.timestamp, default_ts, 0, &ts, &ts_delta) < 0) {
                goto fail;
            }
            *base_ts = ts;
            *max_ts = ts;
        }
        if (ts_delta_of(f.timestamp, default_ts, *base_ts, &ts, &ts_delta) < 0 ||
            delta_at(deltas_fast, i, &offset_delta) < 0) {
            goto fail;
        }
        if (ts > *max_ts) {
            *max_ts = ts;
        }
        writer sizer = {NULL, 0, 0};
        if (put_body(&sizer, ts_delta, offset_delta, f.key, f.value, f.headers) < 0) {
            goto fail;
        }
        if (sizer.pos > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a record exceeds the int32 length");
            goto fail;
        }
        if (put_varint(w, sizer.pos) < 0) {
            goto fail;
        }
        if (w->start == NULL) {
            if (sizer.pos > PY_SSIZE_T_MAX - w->pos) {
                PyErr_NoMemory();
                goto fail;
            }
            w->pos += sizer.pos;
        }
        else {
            Py_ssize_t before = w->pos;
            if (put_body(w, ts_delta, offset_delta, f.key, f.value, f.headers) < 0) {
                goto fail;
            }
            if (w->pos - before != sizer.pos) {
                room_lost();
                goto fail;
            }
        }
        fields_clear(&f);
        continue;
    fail:
        fields_clear(&f);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, default_timestamp, offset_deltas, /) -> (body, base_ts, max_ts)\n\n"
"The records section (uncompressed) of a RecordBatch v2 holding `records`\n"
"(objects with key, value, headers and timestamp attributes, as\n"
"batch.RecordInput), a timestamp of None standing for `default_timestamp`;\n"
"offset deltas 0..n-1 unless `offset_deltas` (one per record) is given.\n"
"Returns the bytes, the first record's timestamp and the largest one.");

static PyObject *
recordencode_encode_records(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *records, *deltas;
    long long default_ts;
    if (!PyArg_ParseTuple(args, "OLO:encode_records", &records, &default_ts, &deltas)) {
        return NULL;
    }
    PyObject *records_fast = PySequence_Fast(records, "records must be a sequence");
    if (records_fast == NULL) {
        return NULL;
    }
    PyObject *deltas_fast = NULL;
    PyObject *body = NULL;
    PyObject *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records_fast);
    if (deltas != Py_None) {
        deltas_fast = PySequence_Fast(deltas, "offset_deltas must be a sequence");
        if (deltas_fast == NULL) {
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(deltas_fast) != n) {
            PyErr_SetString(PyExc_ValueError, "offset_deltas must have one entry per record");
            goto done;
        }
    }
    int64_t base_ts = default_ts, max_ts = default_ts;
    writer sizer = {NULL, 0, 0};
    if (encode_pass(&sizer, records_fast, deltas_fast, default_ts, &base_ts, &max_ts) < 0) {
        goto done;
    }
    body = PyBytes_FromStringAndSize(NULL, sizer.pos);
    if (body == NULL) {
        goto done;
    }
    writer w = {PyBytes_AS_STRING(body), 0, sizer.pos};
    if (encode_pass(&w, records_fast, deltas_fast, default_ts, &base_ts, &max_ts) < 0) {
        goto done;
    }
    if (w.pos != w.size) {
        room_lost();
        goto done;
    }
    result = Py_BuildValue("(OLL)", body, (long long)base_ts, (long long)max_ts);
done:
    Py_XDECREF(body);
    Py_XDECREF(deltas_fast);
    Py_DECREF(records_fast);
    return result;
}


/* ------------------------------------------------------------------------
 * OpenBatch: the records section of one producer batch, built record by
 * record as records are sent (the caller's thread, under the producer's
 * lock), so that a send costs one C call and no Python object per record.
 *
 * Each append writes the record exactly as encode_records does (offset
 * delta = its index, timestamp delta against the first record's
 * timestamp), so records() is byte for byte what encode_records gives for
 * the same records; the batch header (producer id, epoch and base sequence
 * are known only when the batch is drained) is written at seal time by
 * batch.py around these bytes. Each record's timestamp is kept (8 bytes) for
 * the RecordMetadata its future reports.
 *
 * Room: a record enters when the section stays within `limit_bytes`, or when
 * the batch is empty (a record larger than a batch gets a batch of its own),
 * and while count < `limit_records` (0: no such limit). A record whose own
 * encoding exceeds `record_max` never enters (append answers -2: the caller
 * raises RecordTooLargeError). `full` says the next record of the size of the
 * last one would not fit: the batch can be sent without lingering.
 * ---------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    int64_t *ts;
    Py_ssize_t count;
    Py_ssize_t ts_cap;
    Py_ssize_t last_size;
    Py_ssize_t limit_bytes;
    Py_ssize_t limit_records;
    Py_ssize_t record_max;
    int64_t base_ts;
    int64_t max_ts;
    /* the index the last append_many's first record got (its callers run
     * under one lock; single appends, which need none, do not touch it) */
    Py_ssize_t run_start;
    int closed;
} OpenBatch;

static int64_t
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000 + (int64_t)(t.tv_nsec / 1000000);
}

static int
ob_grow(OpenBatch *self, Py_ssize_t need)
{
    if (self->cap - self->len >= need) {
        return 0;
    }
    Py_ssize_t cap = self->cap ? self->cap : 4096;
    while (cap - self->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *buf = PyMem_Realloc(self->buf, (size_t)cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->buf = buf;
    self->cap = cap;
    return 0;
}

static int
ob_grow_ts(OpenBatch *self)
{
    if (self->count < self->ts_cap) {
        return 0;
    }
    Py_ssize_t cap = self->ts_cap ? self->ts_cap * 2 : 256;
    int64_t *ts = PyMem_Realloc(self->ts, (size_t)cap * sizeof(int64_t));
    if (ts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->ts = ts;
    self->ts_cap = cap;
    return 0;
}

/* Append one record; its index, -1 when it does not fit (or the batch is
 * closed), -2 when it is larger than record_max; -3 with an exception set. */
static Py_ssize_t
ob_append_one(OpenBatch *self, PyObject *value, PyObject *key, PyObject *headers,
              PyObject *timestamp, int64_t now)
{
    /* The timestamp first: converting a non-int may run Python code (its
     * __index__), which may switch threads; from the state checks below to
     * the end nothing does, so a batch closed by another thread is seen. */
    int64_t ts, ts_delta;
    if (timestamp == Py_None) {
        ts = now;
    }
    else if (ts_delta_of(timestamp, 0, 0, &ts, &ts_delta) < 0) {
        return -3;
    }
    if (self->closed) {
        return -1;
    }
    if (self->limit_records > 0 && self->count >= self->limit_records) {
        return -1;
    }
    int64_t base = self->count ? self->base_ts : ts;
    if ((base < 0 && ts > INT64_MAX + base) || (base > 0 && ts < INT64_MIN + base)) {
        PyErr_SetString(PyExc_ValueError, "varint out of int64 range: a timestamp delta");
        return -3;
    }
    ts_delta = ts - base;
    writer sizer = {NULL, 0, 0};
    if (put_body(&sizer, ts_delta, self->count, key, value, headers) < 0) {
        return -3;
    }
    if (sizer.pos > INT32_MAX) {
        return -2;
    }
    Py_ssize_t total = varint_size(sizer.pos) + sizer.pos;
    if (total > self->record_max) {
        return -2;
    }
    if (self->count > 0 && total > self->limit_bytes - self->len) {
        return -1;
    }
    if (ob_grow(self, total) < 0 || ob_grow_ts(self) < 0) {
        return -3;
    }
    writer w = {self->buf, self->len, self->len + total};
    if (put_varint(&w, sizer.pos) < 0 ||
        put_body(&w, ts_delta, self->count, key, value, headers) < 0) {
        return -3;
    }
    if (w.pos != self->len + total) {
        room_lost();
        return -3;
    }
    self->len = w.pos;
    self->last_size = total;
    if (self->count == 0) {
        self->base_ts = ts;
        self->max_ts = ts;
    }
    else if (ts > self->max_ts) {
        self->max_ts = ts;
    }
    self->ts[self->count] = ts;
    return self->count++;
}

static int
OpenBatch_init(OpenBatch *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"limit_bytes", "limit_records", "record_max", NULL};
    Py_ssize_t limit_bytes, limit_records, record_max;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nnn:OpenBatch", kwlist, &limit_bytes,
                                     &limit_records, &record_max)) {
        return -1;
    }
    if (limit_bytes < 0 || limit_records < 0 || record_max < 0) {
        PyErr_SetString(PyExc_ValueError, "OpenBatch limits must be >= 0");
        return -1;
    }
    if (self->buf != NULL || self->ts != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "an OpenBatch is initialised once");
        return -1;
    }
    self->limit_bytes = limit_bytes;
    self->limit_records = limit_records;
    self->record_max = record_max;
    return 0;
}

static void
OpenBatch_dealloc(OpenBatch *self)
{
    PyMem_Free(self->buf);
    PyMem_Free(self->ts);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
OpenBatch_append(OpenBatch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "append(value, key=None, headers=None, timestamp=None)");
        return NULL;
    }
    PyObject *key = nargs > 1 ? args[1] : Py_None;
    PyObject *headers = nargs > 2 ? args[2] : Py_None;
    PyObject *timestamp = nargs > 3 ? args[3] : Py_None;
    Py_ssize_t i = ob_append_one(self, args[0], key, headers, timestamp,
                                 timestamp == Py_None ? now_ms() : 0);
    if (i == -3) {
        return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyObject *
OpenBatch_append_many(OpenBatch *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append_many(values, keys, timestamps, start)");
        return NULL;
    }
    PyObject *values = args[0], *keys = args[1], *stamps = args[2];
    Py_ssize_t start = PyLong_AsSsize_t(args[3]);
    if (start == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *vf = PySequence_Fast(values, "values must be a sequence");
    if (vf == NULL) {
        return NULL;
    }
    PyObject *kf = NULL, *tf = NULL, *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(vf);
    if (keys != Py_None) {
        kf = PySequence_Fast(keys, "keys must be a sequence");
        if (kf == NULL) {
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(kf) != n) {
            PyErr_SetString(PyExc_ValueError, "keys must have one entry per value");
            goto done;
        }
    }
    if (stamps != Py_None) {
        tf = PySequence_Fast(stamps, "timestamps must be a sequence");
        if (tf == NULL) {
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(tf) != n) {
            PyErr_SetString(PyExc_ValueError, "timestamps must have one entry per value");
            goto done;
        }
    }
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        goto done;
    }
    int64_t now = now_ms();
    self->run_start = self->count;
    Py_ssize_t i = start;
    for (; i < n; i++) {
        Py_ssize_t got = ob_append_one(
            self, PySequence_Fast_GET_ITEM(vf, i), kf ? PySequence_Fast_GET_ITEM(kf, i) : Py_None,
            Py_None, tf ? PySequence_Fast_GET_ITEM(tf, i) : Py_None, now);
        if (got == -3) {
            goto done;
        }
        if (got < 0) {
            break;
        }
    }
    result = PyLong_FromSsize_t(i - start);
done:
    Py_XDECREF(tf);
    Py_XDECREF(kf);
    Py_DECREF(vf);
    return result;
}

static PyObject *
OpenBatch_records(OpenBatch *self, PyObject *Py_UNUSED(ignored))
{
    return PyBytes_FromStringAndSize(self->buf ? self->buf : "", self->len);
}

static PyObject *
OpenBatch_close(OpenBatch *self, PyObject *Py_UNUSED(ignored))
{
    self->closed = 1;
    Py_RETURN_NONE;
}

static PyObject *
OpenBatch_release(OpenBatch *self, PyObject *Py_UNUSED(ignored))
{
    self->closed = 1;
    PyMem_Free(self->buf);
    self->buf = NULL;
    self->cap = 0;
    self->len = 0;
    Py_RETURN_NONE;
}

static PyObject *
OpenBatch_timestamp(OpenBatch *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (i < 0 || i >= self->count) {
        PyErr_SetString(PyExc_IndexError, "no record at that index");
        return NULL;
    }
    return PyLong_FromLongLong(self->ts[i]);
}

static PyObject *
OpenBatch_get_full(OpenBatch *self, void *Py_UNUSED(closure))
{
    int full = (self->limit_records > 0 && self->count >= self->limit_records) ||
               (self->count > 0 && self->limit_bytes - self->len < self->last_size);
    return PyBool_FromLong(full);
}

static PyObject *
OpenBatch_get_count(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->count);
}

static PyObject *
OpenBatch_get_size(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->len);
}

static PyObject *
OpenBatch_get_base_ts(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->base_ts);
}

static PyObject *
OpenBatch_get_max_ts(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->max_ts);
}

static PyObject *
OpenBatch_get_run_start(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->run_start);
}

static PyObject *
OpenBatch_get_closed(OpenBatch *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->closed);
}

static PyMethodDef OpenBatch_methods[] = {
    {"append", (PyCFunction)(void (*)(void))OpenBatch_append, METH_FASTCALL,
     "append(value, key=None, headers=None, timestamp=None, /) -> index, -1 (no room) or -2 "
     "(larger than record_max); a timestamp of None is now (ms)."},
    {"append_many", (PyCFunction)(void (*)(void))OpenBatch_append_many, METH_FASTCALL,
     "append_many(values, keys, timestamps, start, /) -> how many of values[start:] entered "
     "(in order, until one does not fit); keys and timestamps None or one per value."},
    {"records", (PyCFunction)OpenBatch_records, METH_NOARGS,
     "The records section so far (uncompressed), as bytes."},
    {"close", (PyCFunction)OpenBatch_close, METH_NOARGS, "Refuse further appends."},
    {"release", (PyCFunction)OpenBatch_release, METH_NOARGS,
     "Close and free the records (the timestamps stay)."},
    {"timestamp", (PyCFunction)OpenBatch_timestamp, METH_O, "Record i's timestamp, ms."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef OpenBatch_getset[] = {
    {"full", (getter)OpenBatch_get_full, NULL, "The next record like the last would not fit.",
     NULL},
    {"count", (getter)OpenBatch_get_count, NULL, "Records appended.", NULL},
    {"size", (getter)OpenBatch_get_size, NULL, "Bytes of the records section.", NULL},
    {"base_timestamp", (getter)OpenBatch_get_base_ts, NULL, "The first record's timestamp.",
     NULL},
    {"max_timestamp", (getter)OpenBatch_get_max_ts, NULL, "The largest timestamp.", NULL},
    {"closed", (getter)OpenBatch_get_closed, NULL, "Appends are refused.", NULL},
    {"run_start", (getter)OpenBatch_get_run_start, NULL,
     "The index the last append_many's first record got (or would have).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject OpenBatchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lograft.protocol._recordencode.OpenBatch",
    .tp_basicsize = sizeof(OpenBatch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "OpenBatch(limit_bytes, limit_records, record_max): a batch's records section, "
              "built one record per append.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OpenBatch_init,
    .tp_dealloc = (destructor)OpenBatch_dealloc,
    .tp_methods = OpenBatch_methods,
    .tp_getset = OpenBatch_getset,
};

/* Kafka's Utils.murmur2 (the Java client's, seed 0x9747b28c), as a signed
 * 32-bit int; partitioner.py has the pure-Python twin. */
static PyObject *
recordencode_murmur2(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    const unsigned char *data = view.buf;
    Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t blocks = length / 4;
    for (Py_ssize_t i = 0; i < blocks; i++) {
        const unsigned char *p = data + i * 4;
        uint32_t k = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
                     ((uint32_t)p[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t tail = length & ~(Py_ssize_t)3;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[tail + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[tail + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[tail];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

static PyMethodDef recordencode_methods[] = {
    {"encode_records", recordencode_encode_records, METH_VARARGS, encode_records_doc},
    {"murmur2", recordencode_murmur2, METH_O,
     "murmur2(data, /) -> Kafka's Utils.murmur2 of the bytes, a signed 32-bit int."},
    {NULL, NULL, 0, NULL},
};

/* Bumped whenever encode_records', OpenBatch's or murmur2's arguments or answers change: batch.py
 * ignores a module built from an older source. */
#define RECORDENCODE_ABI 2

static int
recordencode_exec(PyObject *module)
{
    if (s_key == NULL) {
        s_key = PyUnicode_InternFromString("key");
        s_value = PyUnicode_InternFromString("value");
        s_headers = PyUnicode_InternFromString("headers");
        s_timestamp = PyUnicode_InternFromString("timestamp");
        if (!s_key || !s_value || !s_headers || !s_timestamp) {
            return -1;
        }
    }
    if (PyType_Ready(&OpenBatchType) < 0) {
        return -1;
    }
    Py_INCREF(&OpenBatchType);
    if (PyModule_AddObject(module, "OpenBatch", (PyObject *)&OpenBatchType) < 0) {
        Py_DECREF(&OpenBatchType);
        return -1;
    }
    return PyModule_AddIntConstant(module, "ABI", RECORDENCODE_ABI);
}

static PyModuleDef_Slot recordencode_slots[] = {
    {Py_mod_exec, recordencode_exec},
    {0, NULL},
};

static struct PyModuleDef recordencode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "lograft.protocol._recordencode",
    .m_doc = "One-call encoding of RecordBatch v2 records sections.",
    .m_size = 0,
    .m_methods = recordencode_methods,
    .m_slots = recordencode_slots,
};

PyMODINIT_FUNC
PyInit__recordencode(void)
{
    return PyModuleDef_Init(&recordencode_module);
}

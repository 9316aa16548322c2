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

/* A varint or varlong takes at most ten bytes (ceil(64 / 7)). */
#define VARINT_BYTES_MAX 10

/* Where the second pass writes; in the first pass `start` is NULL and only
 * `pos` (the byte count) moves. */
typedef struct {
    char *start;
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
    PyErr_SetString(PyExc_RuntimeError, "records changed while they were being encoded");
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

/* Length varint then the bytes of `obj` (bytes-like), or -1 for None.
 * Lengths are Kafka int32s: a longer field is a ValueError. */
static int
put_nullable(writer *w, PyObject *obj, const char *what)
{
    if (obj == Py_None) {
        return put_varint(w, -1);
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

static PyMethodDef recordencode_methods[] = {
    {"encode_records", recordencode_encode_records, METH_VARARGS, encode_records_doc},
    {NULL, NULL, 0, NULL},
};

/* Bumped whenever encode_records' arguments or answer change: batch.py
 * ignores a module built from an older source. */
#define RECORDENCODE_ABI 1

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

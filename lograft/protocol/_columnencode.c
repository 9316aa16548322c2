/*
 * _columnencode: encode a RecordBatch v2 (header and records) from
 * columns (a list of values, optionally a list of keys and a list of
 * timestamps), for records without headers.
 *
 * The JSON produce path (api/produce_columns.py) decodes a plain body into
 * such columns; encoding them here needs no Python object per record (a
 * batch.RecordInput each, for _recordencode.encode_records). A value or key
 * that is a str is written as its UTF-8 bytes (what str.encode() gives);
 * bytes as they are; None as null. Each record is
 *
 *     length varint | attributes int8 (0) | timestampDelta varlong |
 *     offsetDelta varint (i) | keyLength varint (-1 = null) | key |
 *     valueLength varint (-1 = null) | value | headerCount varint (0)
 *
 * the same bytes batch.encode_records gives for RecordInput(value, key, (),
 * timestamp) (the unit tests compare them). Two passes: the first sizes
 * every record and checks every item's type, the second writes into one
 * bytes object of exactly that size, after room for the batch header, which
 * is then written in front, with its CRC. The columns are lists this module
 * reads without calling Python code, so nothing changes between the passes;
 * the second still checks every write against the room left.
 *
 * Also the two steps before: `attribute_columns` turns the decoded records
 * (objects) into columns in one pass, and `texts_only` says whether a column
 * holds only str and None (what a `string` or `base64` column may hold).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <stdint.h>
#include <string.h>

#include "record_writer.h"

/* The bytes of a str (UTF-8), bytes, or NULL data for None. A str's UTF-8
 * form is cached in the str (for ASCII it is the str's own storage), so
 * the second pass finds it without encoding again. */
static int
item_bytes(PyObject *obj, const char *what, const char **data, Py_ssize_t *len)
{
    if (obj == Py_None) {
        *data = NULL;
        *len = -1;
        return 0;
    }
    if (PyUnicode_CheckExact(obj)) {
        *data = PyUnicode_AsUTF8AndSize(obj, len);
        return *data == NULL ? -1 : 0;
    }
    if (PyBytes_CheckExact(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "a record's %s must be str, bytes or None, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

static int
put_nullable(writer *w, PyObject *obj, const char *what)
{
    const char *data;
    Py_ssize_t len;
    if (item_bytes(obj, what, &data, &len) < 0) {
        return -1;
    }
    if (len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "a record's %s of %zd bytes exceeds the int32 length",
                     what, len);
        return -1;
    }
    if (put_varint(w, len) < 0) {
        return -1;
    }
    return data == NULL ? 0 : put_bytes(w, data, len);
}

/* A timestamp: the default for None, else an int within int64. */
static int
timestamp_at(PyObject *timestamps, Py_ssize_t i, int64_t default_ts, int64_t *out)
{
    PyObject *t = timestamps == Py_None ? Py_None : PyList_GET_ITEM(timestamps, i);
    if (t == Py_None) {
        *out = default_ts;
        return 0;
    }
    if (!PyLong_CheckExact(t)) {
        PyErr_Format(PyExc_TypeError, "a record's timestamp must be int or None, not %.100s",
                     Py_TYPE(t)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(t, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow) {
        PyErr_SetString(PyExc_ValueError, "varint out of int64 range: a timestamp");
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

static int
put_record(writer *w, Py_ssize_t i, int64_t ts_delta, PyObject *key, PyObject *value)
{
    return (put_bytes(w, "\0", 1) < 0 || put_varint(w, ts_delta) < 0 ||
            put_varint(w, (int64_t)i) < 0 || put_nullable(w, key, "key") < 0 ||
            put_nullable(w, value, "value") < 0 || put_varint(w, 0) < 0)
               ? -1
               : 0;
}

/* One pass over the columns: sizes (w->start NULL) or writes. */
static int
encode_pass(writer *w, PyObject *values, PyObject *keys, PyObject *timestamps, int64_t default_ts,
            int64_t *base_ts, int64_t *min_ts, int64_t *max_ts)
{
    Py_ssize_t n = PyList_GET_SIZE(values);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t ts;
        if (timestamp_at(timestamps, i, default_ts, &ts) < 0) {
            return -1;
        }
        if (i == 0) {
            *base_ts = ts;
            *min_ts = ts;
            *max_ts = ts;
        }
        if ((*base_ts < 0 && ts > INT64_MAX + *base_ts) ||
            (*base_ts > 0 && ts < INT64_MIN + *base_ts)) {
            PyErr_SetString(PyExc_ValueError, "varint out of int64 range: a timestamp delta");
            return -1;
        }
        if (ts > *max_ts) {
            *max_ts = ts;
        }
        if (ts < *min_ts) {
            *min_ts = ts;
        }
        PyObject *key = keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i);
        PyObject *value = PyList_GET_ITEM(values, i);
        writer sizer = {NULL, 0, 0};
        if (put_record(&sizer, i, ts - *base_ts, key, value) < 0) {
            return -1;
        }
        if (sizer.pos > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a record exceeds the int32 length");
            return -1;
        }
        if (put_varint(w, sizer.pos) < 0) {
            return -1;
        }
        if (w->start == NULL) {
            if (sizer.pos > PY_SSIZE_T_MAX - w->pos) {
                PyErr_NoMemory();
                return -1;
            }
            w->pos += sizer.pos;
        }
        else {
            Py_ssize_t before = w->pos;
            if (put_record(w, i, ts - *base_ts, key, value) < 0) {
                return -1;
            }
            if (w->pos - before != sizer.pos) {
                return room_lost();
            }
        }
    }
    return 0;
}

static int
same_length(PyObject *column, Py_ssize_t n, const char *name)
{
    if (column == Py_None) {
        return 0;
    }
    if (!PyList_CheckExact(column)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list or None", name);
        return -1;
    }
    if (PyList_GET_SIZE(column) != n) {
        PyErr_Format(PyExc_ValueError, "%s must have one entry per value", name);
        return -1;
    }
    return 0;
}

/* The RecordBatch v2 header (batch.HEADER, ">qiibIhiqqqhii"): where each
 * field this module writes starts, and its size. */
#define BATCH_HEADER_SIZE 61
#define BATCH_LOG_OVERHEAD 12
#define BATCH_LENGTH_POS 8
#define BATCH_LEADER_EPOCH_POS 12
#define BATCH_MAGIC_POS 16
#define BATCH_CRC_POS 17
#define BATCH_CRC_START 21 /* the CRC covers attributes to the end */
#define BATCH_LAST_OFFSET_DELTA_POS 23
#define BATCH_BASE_TIMESTAMP_POS 27
#define BATCH_MAX_TIMESTAMP_POS 35
#define BATCH_PRODUCER_ID_POS 43
#define BATCH_PRODUCER_EPOCH_POS 51
#define BATCH_BASE_SEQUENCE_POS 53
#define BATCH_RECORDS_COUNT_POS 57
#define BATCH_MAGIC 2

static void
put_be(unsigned char *p, uint64_t v, int size)
{
    for (int i = size - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

/* The CRC-32C of the batch's covered bytes, by `crc_fn` (crc32c.crc32c: the
 * hardware-assisted one the rest of the protocol uses) on a view of them. */
static int
batch_crc(PyObject *crc_fn, PyObject *batch, Py_ssize_t size, uint32_t *crc)
{
    PyObject *whole = PyMemoryView_FromObject(batch);
    if (whole == NULL) {
        return -1;
    }
    PyObject *covered = PySequence_GetSlice(whole, BATCH_CRC_START, size);
    Py_DECREF(whole);
    if (covered == NULL) {
        return -1;
    }
    PyObject *got = PyObject_CallOneArg(crc_fn, covered);
    Py_DECREF(covered);
    if (got == NULL) {
        return -1;
    }
    unsigned long value = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    if (value == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    if (value > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "the CRC function answered more than 32 bits");
        return -1;
    }
    *crc = (uint32_t)value;
    return 0;
}

static void
put_header(unsigned char *h, Py_ssize_t size, Py_ssize_t n, int64_t base_ts, int64_t max_ts)
{
    memset(h, 0, BATCH_HEADER_SIZE); /* baseOffset 0 (the leader sets it), attributes 0 */
    put_be(h + BATCH_LENGTH_POS, (uint64_t)(size - BATCH_LOG_OVERHEAD), 4);
    put_be(h + BATCH_LEADER_EPOCH_POS, (uint64_t)-1, 4);
    h[BATCH_MAGIC_POS] = BATCH_MAGIC;
    put_be(h + BATCH_LAST_OFFSET_DELTA_POS, (uint64_t)(n - 1), 4);
    put_be(h + BATCH_BASE_TIMESTAMP_POS, (uint64_t)base_ts, 8);
    put_be(h + BATCH_MAX_TIMESTAMP_POS, (uint64_t)max_ts, 8);
    put_be(h + BATCH_PRODUCER_ID_POS, (uint64_t)-1, 8);
    put_be(h + BATCH_PRODUCER_EPOCH_POS, (uint64_t)-1, 2);
    put_be(h + BATCH_BASE_SEQUENCE_POS, (uint64_t)-1, 4);
    put_be(h + BATCH_RECORDS_COUNT_POS, (uint64_t)n, 4);
}

static Py_ssize_t
null_count(PyObject *keys, Py_ssize_t n)
{
    if (keys == Py_None) {
        return n;
    }
    Py_ssize_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        nulls += PyList_GET_ITEM(keys, i) == Py_None;
    }
    return nulls;
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(values, keys, timestamps, default_timestamp, crc32c, /)\n"
"    -> (batch, ts_delta_min, ts_delta_max, null_keys)\n\n"
"A whole RecordBatch v2 (uncompressed, CreateTime, no producer id, base\n"
"offset 0, partition leader epoch -1) holding one record per item of\n"
"`values` (a list of str, bytes or None), without headers, with offset\n"
"deltas 0..n-1: what plain_batch.build_plain_batch returns, in one bytes\n"
"object (the header written in front of the records, not joined to them:\n"
"a second copy of a 512 KiB batch cost more than encoding it). `keys` is a\n"
"list of the same length (str, bytes or None) or None for no keys;\n"
"`timestamps` a list of int or None (None: the default) or None for the\n"
"default everywhere. A str is written as UTF-8. `crc32c(view)` computes the\n"
"CRC. Also what a record scan of the batch would report: the smallest and\n"
"largest timestamp delta and the count of null keys.");

static PyObject *
columnencode_encode_batch(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *values, *keys, *timestamps, *crc_fn;
    long long default_ts;
    if (!PyArg_ParseTuple(args, "O!OOLO:encode_batch", &PyList_Type, &values, &keys, &timestamps,
                          &default_ts, &crc_fn)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        return NULL;
    }
    if (same_length(keys, n, "keys") < 0 || same_length(timestamps, n, "timestamps") < 0) {
        return NULL;
    }
    int64_t base_ts = default_ts, min_ts = default_ts, max_ts = default_ts;
    writer sizer = {NULL, BATCH_HEADER_SIZE, 0};
    if (encode_pass(&sizer, values, keys, timestamps, default_ts, &base_ts, &min_ts, &max_ts) <
        0) {
        return NULL;
    }
    if (sizer.pos - BATCH_LOG_OVERHEAD > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a batch exceeds the int32 batchLength");
        return NULL;
    }
    PyObject *batch = PyBytes_FromStringAndSize(NULL, sizer.pos);
    if (batch == NULL) {
        return NULL;
    }
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(batch);
    writer w = {(char *)start, BATCH_HEADER_SIZE, sizer.pos};
    uint32_t crc;
    if (encode_pass(&w, values, keys, timestamps, default_ts, &base_ts, &min_ts, &max_ts) < 0 ||
        (w.pos != w.size && room_lost() < 0)) {
        Py_DECREF(batch);
        return NULL;
    }
    put_header(start, w.size, n, base_ts, max_ts);
    /* No one else holds `batch` yet: the CRC is written into it in place. */
    if (batch_crc(crc_fn, batch, w.size, &crc) < 0) {
        Py_DECREF(batch);
        return NULL;
    }
    put_be(start + BATCH_CRC_POS, crc, 4);
    PyObject *result = Py_BuildValue("(OLLn)", batch, (long long)(min_ts - base_ts),
                                     (long long)(max_ts - base_ts), null_count(keys, n));
    Py_DECREF(batch);
    return result;
}

PyDoc_STRVAR(attribute_columns_doc,
"attribute_columns(objects, names, /) -> tuple of (list | None)\n\n"
"One column per name of `names` (a tuple of str): the list of that\n"
"attribute of every object of `objects` (a list), in order, or None when\n"
"every one of them is None. What [getattr(o, name) for o in objects] per\n"
"name gives (the first failing getattr raises), in one pass, without a\n"
"Python frame per object: the JSON produce path turns a body's decoded\n"
"records into columns with it.");

/* At most this many names get slot offsets; more are read with getattr. */
#define SLOT_NAMES_MAX 16

/* Where each of `names` lives in an object of exactly type `tp` when a
 * plain slot holds it: its offset, or -1 (read with getattr). A slot is read
 * directly only when the type's getattr is the generic one and the name
 * finds a member descriptor of an object slot on the type: the generic
 * getattr reads exactly that slot first (a data descriptor wins over any
 * instance dict), so the value is the same, without the lookup per read
 * (msgspec Structs, the decoded records, are such types: a third of the
 * call's time at 500 records). */
static void
slot_offsets(PyTypeObject *tp, PyObject *names, Py_ssize_t *offsets)
{
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    for (Py_ssize_t j = 0; j < k; j++) {
        offsets[j] = -1;
        if (tp->tp_getattro != PyObject_GenericGetAttr) {
            continue;
        }
        PyObject *descr = _PyType_Lookup(tp, PyTuple_GET_ITEM(names, j)); /* borrowed */
        if (descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX) {
                offsets[j] = member->offset;
            }
        }
    }
}

/* Slots, not lists, while filling: a column of all None is dropped at the end. */
static PyObject *
columnencode_attribute_columns(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *objects, *names;
    if (!PyArg_ParseTuple(args, "O!O!:attribute_columns", &PyList_Type, &objects, &PyTuple_Type,
                          &names)) {
        return NULL;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    for (Py_ssize_t j = 0; j < k; j++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(names, j))) {
            PyErr_SetString(PyExc_TypeError, "attribute names must be str");
            return NULL;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(objects);
    PyObject *columns = PyTuple_New(k);
    if (columns == NULL) {
        return NULL;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *column = PyList_New(n);
        if (column == NULL) {
            Py_DECREF(columns);
            return NULL;
        }
        PyTuple_SET_ITEM(columns, j, column);
    }
    /* getattr may run Python code (a property) that changes `objects`:
     * hold a reference to each object while reading it, and read the list's
     * current size each time round. A column's items start as NULL, which
     * PyList's dealloc skips, so an early exit frees what was filled. */
    /* Objects of exactly the first one's type read their slots directly
     * (slot_offsets); until any getattr runs, which may run Python code
     * that changes the type: from then on every read is a getattr. */
    Py_ssize_t offsets[SLOT_NAMES_MAX];
    PyTypeObject *direct = NULL;
    if (n > 0 && k <= SLOT_NAMES_MAX) {
        direct = Py_TYPE(PyList_GET_ITEM(objects, 0));
        slot_offsets(direct, names, offsets);
    }
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(objects); i++) {
        PyObject *obj = PyList_GET_ITEM(objects, i);
        Py_INCREF(obj);
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *value = NULL;
            if (direct != NULL && Py_TYPE(obj) == direct && offsets[j] >= 0) {
                value = *(PyObject **)((char *)obj + offsets[j]);
                Py_XINCREF(value);
            }
            if (value == NULL) { /* another type, no slot, or an unset slot (raises) */
                direct = NULL;
                value = PyObject_GetAttr(obj, PyTuple_GET_ITEM(names, j));
                if (value == NULL) {
                    Py_DECREF(obj);
                    Py_DECREF(columns);
                    return NULL;
                }
            }
            PyList_SET_ITEM(PyTuple_GET_ITEM(columns, j), i, value);
        }
        Py_DECREF(obj);
    }
    if (PyList_GET_SIZE(objects) != n) {
        Py_DECREF(columns);
        PyErr_SetString(PyExc_RuntimeError, "the list changed size while its columns were read");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *column = PyTuple_GET_ITEM(columns, j);
        int any = 0;
        for (Py_ssize_t i = 0; i < n && !any; i++) {
            any = PyList_GET_ITEM(column, i) != Py_None;
        }
        if (!any) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(columns, j, Py_None);
            Py_DECREF(column);
        }
    }
    return columns;
}

PyDoc_STRVAR(texts_only_doc,
"texts_only(column, /) -> bool\n\n"
"Whether every item of `column` (a list) is exactly a str or None: what a\n"
"`string` or `base64` column of a JSON produce may hold.");

static PyObject *
columnencode_texts_only(PyObject *self, PyObject *column)
{
    (void)self;
    if (!PyList_CheckExact(column)) {
        PyErr_SetString(PyExc_TypeError, "texts_only takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(column);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(column, i);
        if (item != Py_None && !PyUnicode_CheckExact(item)) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef columnencode_methods[] = {
    {"encode_batch", columnencode_encode_batch, METH_VARARGS, encode_batch_doc},
    {"attribute_columns", columnencode_attribute_columns, METH_VARARGS, attribute_columns_doc},
    {"texts_only", columnencode_texts_only, METH_O, texts_only_doc},
    {NULL, NULL, 0, NULL},
};

/* Bumped whenever the module's functions, their arguments or answers change:
 * plain_batch.py ignores a module built from an older source. */
#define COLUMNENCODE_ABI 3

static int
columnencode_exec(PyObject *module)
{
    return PyModule_AddIntConstant(module, "ABI", COLUMNENCODE_ABI);
}

static PyModuleDef_Slot columnencode_slots[] = {
    {Py_mod_exec, columnencode_exec},
    {0, NULL},
};

static struct PyModuleDef columnencode_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "lograft.protocol._columnencode",
    .m_doc = "One-call encoding of a RecordBatch v2 records section from columns.",
    .m_size = 0,
    .m_methods = columnencode_methods,
    .m_slots = columnencode_slots,
};

PyMODINIT_FUNC
PyInit__columnencode(void)
{
    return PyModuleDef_Init(&columnencode_module);
}

/*
 * _recordscan: walk the records section of a Kafka RecordBatch v2 without
 * building any object, and report the first thing wrong with it; when
 * nothing is, report the range of its timestampDeltas and how many records
 * have a null key (the leader judges those against the batch header and the
 * topic's rules).
 *
 * This is the C twin of lograft/storage/record_scan.py's pure-Python
 * fallback; both must accept exactly the same inputs and report the same
 * reason, record index, byte position and message (the unit tests compare
 * them). The Python module documents the rules; in short, each record is
 *
 *     length varint | attributes int8 | timestampDelta varlong |
 *     offsetDelta varint | keyLength varint | key | valueLength varint |
 *     value | headerCount varint | headerCount x (headerKeyLength varint,
 *     headerKey, headerValueLength varint, headerValue)
 *
 * and the fields must exactly fill `length`, the records must exactly fill
 * the section, and there must be recordsCount of them.
 *
 * The input is untrusted (it comes off the network from a producer or a
 * peer): every read is preceded by a check of the position against a limit
 * that never exceeds the buffer's length, and lengths are compared against
 * the bytes left rather than added to positions first, so nothing overflows.
 *
 * The scan itself runs without the GIL: the buffer is held through the
 * buffer protocol (a bytearray cannot be resized meanwhile) and the scan
 * touches no Python object. The message is formatted after the GIL is back.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* A varint or varlong takes at most ten bytes (ceil(64 / 7)). */
#define VARINT_BYTES_MAX 10

/* Below this many bytes, dropping and retaking the GIL costs more than the
 * scan it would let other threads overlap with. */
#define RELEASE_GIL_BYTES_MIN 4096

typedef enum {
    SCAN_OK = 0,
    /* InvalidRecordError: the records are well formed but break a rule. */
    SCAN_LAST_OFFSET_DELTA,
    SCAN_RECORDS_COUNT,
    SCAN_OFFSET_DELTA_NOT_CONTIGUOUS,
    SCAN_OFFSET_DELTA_NOT_INCREASING,
    SCAN_OFFSET_DELTA_PAST_LAST,
    /* CorruptRecordError: the bytes do not parse. */
    SCAN_MISSING_RECORD,
    SCAN_VARINT_TRUNCATED,
    SCAN_VARINT_TOO_LONG,
    SCAN_VARINT_OVERFLOW,
    SCAN_RECORD_LENGTH,
    SCAN_FIELD_OVERRUN,
    SCAN_NEGATIVE_LENGTH,
    SCAN_HEADER_COUNT,
    SCAN_HEADER_KEY_LENGTH,
    SCAN_RECORD_SLACK,
    SCAN_TRAILING_BYTES,
} reason_t;

/* Reason names as the Python side knows them (record_scan.REASONS). */
static const char *const REASON_NAMES[] = {
    [SCAN_OK] = "ok",
    [SCAN_LAST_OFFSET_DELTA] = "last_offset_delta",
    [SCAN_RECORDS_COUNT] = "records_count",
    [SCAN_OFFSET_DELTA_NOT_CONTIGUOUS] = "offset_delta_not_contiguous",
    [SCAN_OFFSET_DELTA_NOT_INCREASING] = "offset_delta_not_increasing",
    [SCAN_OFFSET_DELTA_PAST_LAST] = "offset_delta_past_last",
    [SCAN_MISSING_RECORD] = "missing_record",
    [SCAN_VARINT_TRUNCATED] = "varint_truncated",
    [SCAN_VARINT_TOO_LONG] = "varint_too_long",
    [SCAN_VARINT_OVERFLOW] = "varint_overflow",
    [SCAN_RECORD_LENGTH] = "record_length",
    [SCAN_FIELD_OVERRUN] = "field_overrun",
    [SCAN_NEGATIVE_LENGTH] = "negative_length",
    [SCAN_HEADER_COUNT] = "header_count",
    [SCAN_HEADER_KEY_LENGTH] = "header_key_length",
    [SCAN_RECORD_SLACK] = "record_slack",
    [SCAN_TRAILING_BYTES] = "trailing_bytes",
};

/* What went wrong, filled in by the GIL-free scan and formatted later. */
typedef struct {
    reason_t reason;
    int64_t record;     /* index of the record at fault, -1 for the batch */
    Py_ssize_t pos;     /* byte in the records section where it was seen */
    const char *field;  /* Kafka's name of the field, when there is one */
    int in_record;      /* a varint ran past the record, not the section */
    int64_t a, b;       /* reason-specific numbers, see format_error */
} scan_error;

/*
 * Decode one zigzag varint from d[*pp] with every read below `limit`.
 * On success stores the zigzag-decoded value and whether the raw value
 * needed more than 64 bits (the tenth byte may only carry bit 63).
 */
static inline reason_t
read_varint(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t limit, int64_t *value, int *overflow)
{
    Py_ssize_t p = *pp;
    uint64_t raw = 0;
    int ovf = 0;
    int shift = 0;
    int i;

    if (p < limit && d[p] < 0x80) {
        /* Most varints in a record are one byte: lengths < 64, deltas, -1. */
        raw = d[p];
        *pp = p + 1;
        *value = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
        *overflow = 0;
        return SCAN_OK;
    }
    for (i = 0;; i++) {
        uint8_t byte;
        if (p >= limit) {
            return SCAN_VARINT_TRUNCATED;
        }
        byte = d[p++];
        if (shift == 63) {
            /* Bits 1..6 of the tenth byte would land beyond bit 63. */
            if (byte & 0x7E) {
                ovf = 1;
            }
            raw |= (uint64_t)(byte & 0x01) << 63;
        }
        else {
            raw |= (uint64_t)(byte & 0x7F) << shift;
        }
        if (!(byte & 0x80)) {
            break;
        }
        shift += 7;
        if (i + 1 >= VARINT_BYTES_MAX) {
            return SCAN_VARINT_TOO_LONG;
        }
    }
    *pp = p;
    *value = (int64_t)((raw >> 1) ^ (~(raw & 1) + 1));
    *overflow = ovf;
    return SCAN_OK;
}

/* Helpers that fill `e` and leave the scan; only used inside scan_core. */
#define FAIL_VARINT(r, fld, at, inrec) \
    do {                               \
        e->reason = (r);               \
        e->field = (fld);              \
        e->pos = (at);                 \
        e->in_record = (inrec);        \
        return (r);                    \
    } while (0)

/* Read a varint inside the record; more than 64 bits is corrupt (no int64
 * encodes that, and the reader's decode_varint refuses it too). */
#define READ_IN_RECORD(var, fld)                                    \
    do {                                                            \
        Py_ssize_t at_ = p;                                         \
        int ovf_;                                                   \
        reason_t r_ = read_varint(d, &p, rec_end, &(var), &ovf_);   \
        if (r_ != SCAN_OK) {                                           \
            FAIL_VARINT(r_, fld, at_, 1);                           \
        }                                                           \
        if (ovf_) {                                                 \
            FAIL_VARINT(SCAN_VARINT_OVERFLOW, fld, at_, 1);            \
        }                                                           \
        field_pos = at_;                                            \
    } while (0)

/* Skip `len` bytes of a nullable field (-1 = null) inside the record. */
#define SKIP_NULLABLE(len, lenfld, fld)                             \
    do {                                                            \
        if ((len) < -1) {                                           \
            e->reason = SCAN_NEGATIVE_LENGTH;                          \
            e->field = (lenfld);                                    \
            e->pos = field_pos;                                     \
            e->a = (len);                                           \
            return SCAN_NEGATIVE_LENGTH;                               \
        }                                                           \
        if ((len) >= 0) {                                           \
            if ((len) > (int64_t)(rec_end - p)) {                   \
                e->reason = SCAN_FIELD_OVERRUN;                        \
                e->field = (fld);                                   \
                e->pos = p;                                         \
                e->a = (len);                                       \
                e->b = (int64_t)(rec_end - p);                      \
                return SCAN_FIELD_OVERRUN;                             \
            }                                                       \
            p += (Py_ssize_t)(len);                                 \
        }                                                           \
    } while (0)

/* What a scan that succeeded learned on the way (record_scan.RecordsSummary). */
typedef struct {
    int64_t ts_delta_min;  /* smallest and largest timestampDelta */
    int64_t ts_delta_max;
    int64_t null_keys;     /* records whose key is null */
} scan_summary;

static reason_t
scan_core(const uint8_t *d, Py_ssize_t n, int64_t count, int64_t last, int contiguous,
          scan_error *e, scan_summary *s)
{
    Py_ssize_t p = 0;
    int64_t prev = -1;
    int64_t i;

    s->ts_delta_min = INT64_MAX;
    s->ts_delta_max = INT64_MIN;
    s->null_keys = 0;

    e->record = -1;
    if (contiguous && last != count - 1) {
        e->reason = SCAN_LAST_OFFSET_DELTA;
        e->a = last;
        e->b = count;
        return e->reason;
    }
    if (count <= 0) {
        e->reason = SCAN_RECORDS_COUNT;
        e->a = count;
        return e->reason;
    }
    for (i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, key_len, val_len, n_headers, h;
        int ovf;
        Py_ssize_t rec_end, off_pos, field_pos, at;
        reason_t r;

        e->record = i;
        if (p >= n) {
            e->reason = SCAN_MISSING_RECORD;
            e->pos = p;
            e->a = count;
            return e->reason;
        }
        at = p;
        r = read_varint(d, &p, n, &length, &ovf);
        if (r != SCAN_OK) {
            FAIL_VARINT(r, "length", at, 0);
        }
        if (ovf) {
            FAIL_VARINT(SCAN_VARINT_OVERFLOW, "length", at, 0);
        }
        if (length < 1 || length > (int64_t)(n - p)) {
            e->reason = SCAN_RECORD_LENGTH;
            e->pos = at;
            e->a = length;
            e->b = (int64_t)(n - p);
            return e->reason;
        }
        rec_end = p + (Py_ssize_t)length;

        p += 1; /* attributes: unused in v2, any value is accepted (as Kafka) */

        /* The timestamp is not judged here: its range is reported, and the
         * caller, who knows baseTimestamp and the bounds, judges it. */
        READ_IN_RECORD(ts_delta, "timestampDelta");
        READ_IN_RECORD(off_delta, "offsetDelta");
        off_pos = field_pos;

        READ_IN_RECORD(key_len, "keyLength");
        SKIP_NULLABLE(key_len, "keyLength", "key");
        READ_IN_RECORD(val_len, "valueLength");
        SKIP_NULLABLE(val_len, "valueLength", "value");
        READ_IN_RECORD(n_headers, "headerCount");
        if (n_headers < 0) {
            e->reason = SCAN_HEADER_COUNT;
            e->pos = field_pos;
            e->a = n_headers;
            return e->reason;
        }
        /* Each header takes at least two bytes, so a huge count runs into
         * rec_end long before it runs out. */
        for (h = 0; h < n_headers; h++) {
            int64_t hk_len, hv_len;
            READ_IN_RECORD(hk_len, "headerKeyLength");
            if (hk_len < 0) {
                e->reason = SCAN_HEADER_KEY_LENGTH;
                e->pos = field_pos;
                e->a = hk_len;
                return e->reason;
            }
            SKIP_NULLABLE(hk_len, "headerKeyLength", "headerKey");
            READ_IN_RECORD(hv_len, "headerValueLength");
            SKIP_NULLABLE(hv_len, "headerValueLength", "headerValue");
        }
        if (p != rec_end) {
            e->reason = SCAN_RECORD_SLACK;
            e->pos = p;
            e->a = (int64_t)(rec_end - p);
            return e->reason;
        }

        /* The record parses; only now judge its offset delta, so that a
         * record that is both malformed and misnumbered is called corrupt
         * (the order the decoding reader finds them in). */
        if (contiguous && off_delta != i) {
            e->reason = SCAN_OFFSET_DELTA_NOT_CONTIGUOUS;
            e->pos = off_pos;
            e->a = off_delta;
            return e->reason;
        }
        if (off_delta <= prev) {
            e->reason = SCAN_OFFSET_DELTA_NOT_INCREASING;
            e->pos = off_pos;
            e->a = off_delta;
            e->b = prev;
            return e->reason;
        }
        if (off_delta > last) {
            e->reason = SCAN_OFFSET_DELTA_PAST_LAST;
            e->pos = off_pos;
            e->a = off_delta;
            e->b = last;
            return e->reason;
        }
        prev = off_delta;
        if (ts_delta < s->ts_delta_min) {
            s->ts_delta_min = ts_delta;
        }
        if (ts_delta > s->ts_delta_max) {
            s->ts_delta_max = ts_delta;
        }
        if (key_len == -1) {
            s->null_keys++;
        }
    }
    if (p != n) {
        e->record = -1;
        e->reason = SCAN_TRAILING_BYTES;
        e->pos = p;
        e->a = (int64_t)(n - p);
        return e->reason;
    }
    return SCAN_OK;
}

#undef FAIL_VARINT
#undef READ_IN_RECORD
#undef SKIP_NULLABLE

/* The message for an error; must match record_scan._message exactly. */
static PyObject *
format_error(const scan_error *e)
{
    long long rec = (long long)e->record;
    long long a = (long long)e->a;
    long long b = (long long)e->b;
    Py_ssize_t pos = e->pos;

    switch (e->reason) {
    case SCAN_LAST_OFFSET_DELTA:
        return PyUnicode_FromFormat(
            "lastOffsetDelta %lld does not match recordsCount %lld; a produced batch "
            "numbers its records 0..recordsCount-1", a, b);
    case SCAN_RECORDS_COUNT:
        return PyUnicode_FromFormat(
            "recordsCount is %lld; a record batch must hold at least one record", a);
    case SCAN_OFFSET_DELTA_NOT_CONTIGUOUS:
        return PyUnicode_FromFormat(
            "record %lld: offsetDelta %lld at byte %zd where %lld was expected; deltas "
            "must be 0, 1, 2, ... in a produced batch", rec, a, pos, rec);
    case SCAN_OFFSET_DELTA_NOT_INCREASING:
        return PyUnicode_FromFormat(
            "record %lld: offsetDelta %lld at byte %zd does not increase on the "
            "previous %lld", rec, a, pos, b);
    case SCAN_OFFSET_DELTA_PAST_LAST:
        return PyUnicode_FromFormat(
            "record %lld: offsetDelta %lld at byte %zd is past lastOffsetDelta %lld",
            rec, a, pos, b);
    case SCAN_MISSING_RECORD:
        return PyUnicode_FromFormat(
            "the records section ends at byte %zd after %lld of the %lld records "
            "recordsCount promises", pos, rec, a);
    case SCAN_VARINT_TRUNCATED:
        return PyUnicode_FromFormat(
            "record %lld: %s varint at byte %zd runs past the end of the %s", rec,
            e->field, pos, e->in_record ? "record" : "records section");
    case SCAN_VARINT_TOO_LONG:
        return PyUnicode_FromFormat(
            "record %lld: %s varint at byte %zd is longer than 10 bytes", rec, e->field,
            pos);
    case SCAN_VARINT_OVERFLOW:
        return PyUnicode_FromFormat(
            "record %lld: %s varint at byte %zd overflows 64 bits", rec, e->field, pos);
    case SCAN_RECORD_LENGTH:
        if (a < 1) {
            return PyUnicode_FromFormat(
                "record %lld: length %lld at byte %zd is not positive", rec, a, pos);
        }
        return PyUnicode_FromFormat(
            "record %lld: length %lld at byte %zd exceeds the %lld bytes left in the "
            "records section", rec, a, pos, b);
    case SCAN_FIELD_OVERRUN:
        return PyUnicode_FromFormat(
            "record %lld: %s of %lld bytes at byte %zd runs past the end of the record "
            "(%lld bytes left)", rec, e->field, a, pos, b);
    case SCAN_NEGATIVE_LENGTH:
        return PyUnicode_FromFormat(
            "record %lld: %s %lld at byte %zd is below -1 (null)", rec, e->field, a, pos);
    case SCAN_HEADER_COUNT:
        return PyUnicode_FromFormat(
            "record %lld: headerCount %lld at byte %zd is negative", rec, a, pos);
    case SCAN_HEADER_KEY_LENGTH:
        return PyUnicode_FromFormat(
            "record %lld: headerKeyLength %lld at byte %zd is negative; header keys "
            "may not be null", rec, a, pos);
    case SCAN_RECORD_SLACK:
        return PyUnicode_FromFormat(
            "record %lld: %lld bytes at byte %zd that its fields do not explain", rec, a,
            pos);
    case SCAN_TRAILING_BYTES:
        return PyUnicode_FromFormat(
            "%lld trailing bytes at byte %zd after the last record of the batch", a, pos);
    default:
        return PyUnicode_FromFormat("record %lld: unknown scan failure %d", rec,
                                    (int)e->reason);
    }
}

PyDoc_STRVAR(scan_doc,
"scan(data, records_count, last_offset_delta, contiguous)\n"
"    -> (ts_delta_min, ts_delta_max, null_keys)\n\n"
"Check the records section of a RecordBatch v2. Raises ValueError whose\n"
"args are (message, reason, record_index, byte) on the first problem.");

static PyObject *
recordscan_scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, last;
    int contiguous;
    scan_error e;
    scan_summary summary;
    reason_t r;
    PyObject *msg, *exc_args;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*LLp:scan", &buf, &count, &last, &contiguous)) {
        return NULL;
    }
    memset(&e, 0, sizeof(e));
    if (buf.len >= RELEASE_GIL_BYTES_MIN) {
        Py_BEGIN_ALLOW_THREADS
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last,
                      contiguous, &e, &summary);
        Py_END_ALLOW_THREADS
    }
    else {
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last,
                      contiguous, &e, &summary);
    }
    PyBuffer_Release(&buf);
    if (r == SCAN_OK) {
        return Py_BuildValue("(LLL)", (long long)summary.ts_delta_min,
                             (long long)summary.ts_delta_max, (long long)summary.null_keys);
    }
    msg = format_error(&e);
    if (msg == NULL) {
        return NULL;
    }
    exc_args = Py_BuildValue("(NsLn)", msg, REASON_NAMES[r], (long long)e.record, e.pos);
    if (exc_args == NULL) {
        return NULL;
    }
    PyErr_SetObject(PyExc_ValueError, exc_args);
    Py_DECREF(exc_args);
    return NULL;
}

static PyMethodDef recordscan_methods[] = {
    {"scan", recordscan_scan, METH_VARARGS, scan_doc},
    {NULL, NULL, 0, NULL},
};

/* Bumped whenever scan's arguments or answer change: record_scan.py ignores
 * a module built from an older source (an editable install keeps the last
 * build until it is rebuilt) instead of misreading its answers. */
#define RECORDSCAN_ABI 2

static int
recordscan_exec(PyObject *module)
{
    return PyModule_AddIntConstant(module, "ABI", RECORDSCAN_ABI);
}

static PyModuleDef_Slot recordscan_slots[] = {
    {Py_mod_exec, recordscan_exec},
    {0, NULL},
};

static struct PyModuleDef recordscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "lograft.storage._recordscan",
    .m_doc = "Allocation-free validation of RecordBatch v2 records sections.",
    .m_size = 0,
    .m_methods = recordscan_methods,
    .m_slots = recordscan_slots,
};

PyMODINIT_FUNC
PyInit__recordscan(void)
{
    return PyModuleDef_Init(&recordscan_module);
}

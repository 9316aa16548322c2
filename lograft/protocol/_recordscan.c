/*
 * _recordscan: walk the records section of a Kafka RecordBatch v2 without
 * building any object, and report the first thing wrong with it; when
 * nothing is, report the range of its timestampDeltas and how many records
 * have a null key (the leader judges those against the batch header and the
 * topic's rules).
 *
 * This is the C twin of lograft/protocol/record_scan.py's pure-Python
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
#include <structmember.h> /* PyMemberDef, T_OBJECT_EX: decode_records fills slots */

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
    /* RecordTooLargeError: a record over the caller's limit. */
    SCAN_RECORD_TOO_LARGE,
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
    [SCAN_RECORD_TOO_LARGE] = "record_too_large",
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

/* `record_max` < 0: no limit on one record's length. */
static reason_t
scan_core(const uint8_t *d, Py_ssize_t n, int64_t count, int64_t last, int contiguous,
          int64_t record_max, scan_error *e, scan_summary *s)
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
        /* Only a record that is really there can be too large. */
        if (record_max >= 0 && length > record_max) {
            e->reason = SCAN_RECORD_TOO_LARGE;
            e->pos = at;
            e->a = length;
            e->b = record_max;
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
    case SCAN_RECORD_TOO_LARGE:
        return PyUnicode_FromFormat(
            "record %lld: length %lld at byte %zd exceeds the limit of %lld bytes for one "
            "record", rec, a, pos, b);
    default:
        return PyUnicode_FromFormat("record %lld: unknown scan failure %d", rec,
                                    (int)e->reason);
    }
}

PyDoc_STRVAR(scan_doc,
"scan(data, records_count, last_offset_delta, contiguous, record_max=-1)\n"
"    -> (ts_delta_min, ts_delta_max, null_keys)\n\n"
"Check the records section of a RecordBatch v2; record_max >= 0 also bounds\n"
"each record's length. Raises ValueError whose args are (message, reason,\n"
"record_index, byte) on the first problem.");

static PyObject *
recordscan_scan(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, last, record_max = -1;
    int contiguous;
    scan_error e;
    scan_summary summary;
    reason_t r;
    PyObject *msg, *exc_args;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*LLp|L:scan", &buf, &count, &last, &contiguous,
                          &record_max)) {
        return NULL;
    }
    memset(&e, 0, sizeof(e));
    if (buf.len >= RELEASE_GIL_BYTES_MIN) {
        Py_BEGIN_ALLOW_THREADS
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last,
                      contiguous, (int64_t)record_max, &e, &summary);
        Py_END_ALLOW_THREADS
    }
    else {
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last,
                      contiguous, (int64_t)record_max, &e, &summary);
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

/* ---- decode_columns: the records of a section as columns -------------------
 *
 * The executor read path (lograft/pipelines) turns every record into an Arrow
 * row. Building a Python object per record cost ~80% of a task's read time,
 * so this decodes a whole section in one call into flat buffers that Arrow
 * wraps without copying per record: absolute offsets and timestamps (int64,
 * timestamps in microseconds), and keys and values each as one data buffer,
 * int32 start offsets (one per record, from a caller-given base so sections
 * can be joined) and a validity byte per record (1 = present, 0 = null).
 *
 * The section is first walked by scan_core with the read rules (not
 * contiguous: compacted batches have gaps), so a malformed section is
 * refused with exactly the scanner's reason and message; the decode pass
 * then runs over bytes known to be well formed. Every output is bounded by
 * the section's length (records_count is only trusted once the scan found
 * that many records in the bytes).
 */

/* The decode pass over a section scan_core accepted: no read can fail. */
typedef struct {
    int64_t *offsets, *timestamps;
    int32_t *key_offsets, *value_offsets;
    uint8_t *key_valid, *value_valid, *key_data, *value_data;
    Py_ssize_t key_len, value_len;      /* bytes written to the data buffers */
    int64_t key_nulls, value_nulls;
    int64_t ts_overflow_record;         /* first record whose timestamp overflows, or -1 */
    int64_t offset_overflow_record;     /* first record whose offset overflows, or -1 */
} columns_out;

static inline int64_t
decoded_varint(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t n)
{
    int64_t v = 0;
    int ovf;
    (void)read_varint(d, pp, n, &v, &ovf); /* the scan proved it well formed */
    return v;
}

static void
decode_core(const uint8_t *d, Py_ssize_t n, int64_t count, int64_t base_offset,
            int64_t base_ts, int ts_fixed, int64_t fixed_ts, int32_t key_base,
            int32_t value_base, columns_out *o)
{
    Py_ssize_t p = 0;
    int64_t i;

    o->key_len = o->value_len = 0;
    o->key_nulls = o->value_nulls = 0;
    o->ts_overflow_record = -1;
    o->offset_overflow_record = -1;
    for (i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, nh, h, ts, us;
        Py_ssize_t rec_end;

        length = decoded_varint(d, &p, n);
        rec_end = p + (Py_ssize_t)length;
        p += 1; /* attributes */
        ts_delta = decoded_varint(d, &p, n);
        off_delta = decoded_varint(d, &p, n);
        if (__builtin_add_overflow(base_offset, off_delta, &o->offsets[i])) {
            o->offsets[i] = 0;
            if (o->offset_overflow_record < 0) {
                o->offset_overflow_record = i;
            }
        }
        if (ts_fixed) {
            ts = fixed_ts;
        }
        else if (__builtin_add_overflow(base_ts, ts_delta, &ts)) {
            ts = 0;
            if (o->ts_overflow_record < 0) {
                o->ts_overflow_record = i;
            }
        }
        if (__builtin_mul_overflow(ts, (int64_t)1000, &us)) {
            us = 0;
            if (o->ts_overflow_record < 0) {
                o->ts_overflow_record = i;
            }
        }
        o->timestamps[i] = us;

        klen = decoded_varint(d, &p, n);
        o->key_offsets[i] = key_base + (int32_t)o->key_len;
        if (klen >= 0) {
            memcpy(o->key_data + o->key_len, d + p, (size_t)klen);
            o->key_len += (Py_ssize_t)klen;
            p += (Py_ssize_t)klen;
            o->key_valid[i] = 1;
        }
        else {
            o->key_valid[i] = 0;
            o->key_nulls++;
        }
        vlen = decoded_varint(d, &p, n);
        o->value_offsets[i] = value_base + (int32_t)o->value_len;
        if (vlen >= 0) {
            memcpy(o->value_data + o->value_len, d + p, (size_t)vlen);
            o->value_len += (Py_ssize_t)vlen;
            p += (Py_ssize_t)vlen;
            o->value_valid[i] = 1;
        }
        else {
            o->value_valid[i] = 0;
            o->value_nulls++;
        }
        nh = decoded_varint(d, &p, n);
        for (h = 0; h < nh; h++) {
            int64_t hk = decoded_varint(d, &p, n);
            p += (Py_ssize_t)hk;
            int64_t hv = decoded_varint(d, &p, n);
            if (hv > 0) {
                p += (Py_ssize_t)hv;
            }
        }
        p = rec_end;
    }
}

/* The headers of every record, as a list of tuples of (key bytes, value
 * bytes or None); only built when asked for (includeHeaders). */
static PyObject *
decode_headers(const uint8_t *d, Py_ssize_t n, int64_t count)
{
    Py_ssize_t p = 0;
    int64_t i;
    PyObject *out = PyList_New((Py_ssize_t)count);

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i < count; i++) {
        int64_t length, klen, vlen, nh, h;
        Py_ssize_t rec_end;
        PyObject *tup;

        length = decoded_varint(d, &p, n);
        rec_end = p + (Py_ssize_t)length;
        p += 1;
        (void)decoded_varint(d, &p, n); /* timestampDelta */
        (void)decoded_varint(d, &p, n); /* offsetDelta */
        klen = decoded_varint(d, &p, n);
        if (klen > 0) {
            p += (Py_ssize_t)klen;
        }
        vlen = decoded_varint(d, &p, n);
        if (vlen > 0) {
            p += (Py_ssize_t)vlen;
        }
        nh = decoded_varint(d, &p, n); /* scan: each header takes >= 2 bytes of the record */
        tup = PyTuple_New((Py_ssize_t)nh);
        if (tup == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, tup);
        for (h = 0; h < nh; h++) {
            PyObject *k, *v, *pair;
            int64_t hk = decoded_varint(d, &p, n);
            k = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)hk);
            p += (Py_ssize_t)hk;
            int64_t hv = decoded_varint(d, &p, n);
            if (hv >= 0) {
                v = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)hv);
                p += (Py_ssize_t)hv;
            }
            else {
                v = Py_NewRef(Py_None);
            }
            if (k == NULL || v == NULL) {
                Py_XDECREF(k);
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            pair = PyTuple_Pack(2, k, v);
            Py_DECREF(k);
            Py_DECREF(v);
            if (pair == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyTuple_SET_ITEM(tup, (Py_ssize_t)h, pair);
        }
        p = rec_end;
    }
    return out;
}

static PyObject *
scan_failure(const scan_error *e, reason_t r)
{
    PyObject *msg = format_error(e);
    PyObject *exc_args;
    if (msg == NULL) {
        return NULL;
    }
    exc_args = Py_BuildValue("(NsLn)", msg, REASON_NAMES[r], (long long)e->record, e->pos);
    if (exc_args == NULL) {
        return NULL;
    }
    PyErr_SetObject(PyExc_ValueError, exc_args);
    Py_DECREF(exc_args);
    return NULL;
}

PyDoc_STRVAR(decode_columns_doc,
"decode_columns(data, records_count, last_offset_delta, base_offset, base_timestamp,\n"
"               is_log_append_time, max_timestamp, key_base, value_base, want_headers)\n"
"    -> (offsets, timestamps_us, key_data, key_offsets, key_valid, key_nulls,\n"
"        value_data, value_offsets, value_valid, value_nulls, headers)\n\n"
"Decode a records section into columns (see record_columns.py). offsets and\n"
"timestamps_us are native int64 arrays, *_offsets native int32 start offsets\n"
"from *_base, *_valid one byte per record; headers a list of tuples or None.\n"
"is_log_append_time: every record's timestamp is max_timestamp.\n"
"Raises ValueError(message, reason, record_index, byte) as scan() does.");

static PyObject *
recordscan_decode_columns(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, last, base_offset, base_ts, max_ts;
    int log_append;
    Py_ssize_t key_base, value_base;
    int want_headers;
    scan_error e;
    scan_summary summary;
    reason_t r;
    columns_out o;
    Py_ssize_t n;
    PyObject *offsets = NULL, *timestamps = NULL, *key_offsets = NULL, *value_offsets = NULL;
    PyObject *key_valid = NULL, *value_valid = NULL, *key_data = NULL, *value_data = NULL;
    PyObject *headers = NULL, *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*LLLLpLnnp:decode_columns", &buf, &count, &last,
                          &base_offset, &base_ts, &log_append, &max_ts, &key_base, &value_base,
                          &want_headers)) {
        return NULL;
    }
    n = buf.len;
    if (key_base < 0 || value_base < 0 || key_base > INT32_MAX - n || value_base > INT32_MAX - n) {
        PyErr_SetString(PyExc_OverflowError,
                        "decode_columns: key/value base plus the section exceeds int32 offsets");
        goto done;
    }
    memset(&e, 0, sizeof(e));
    if (n >= RELEASE_GIL_BYTES_MIN) {
        Py_BEGIN_ALLOW_THREADS
        r = scan_core((const uint8_t *)buf.buf, n, (int64_t)count, (int64_t)last, 0, -1, &e,
                      &summary);
        Py_END_ALLOW_THREADS
    }
    else {
        r = scan_core((const uint8_t *)buf.buf, n, (int64_t)count, (int64_t)last, 0, -1, &e,
                      &summary);
    }
    if (r != SCAN_OK) {
        scan_failure(&e, r);
        goto done;
    }
    /* The scan found `count` records of at least two bytes each in n bytes,
     * so count <= n / 2 and every buffer below is bounded by the input. */
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    timestamps = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 8);
    key_offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 4);
    value_offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count * 4);
    key_valid = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count);
    value_valid = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)count);
    key_data = PyBytes_FromStringAndSize(NULL, n);
    value_data = PyBytes_FromStringAndSize(NULL, n);
    if (!offsets || !timestamps || !key_offsets || !value_offsets || !key_valid ||
        !value_valid || !key_data || !value_data) {
        goto done;
    }
    o.offsets = (int64_t *)PyBytes_AS_STRING(offsets);
    o.timestamps = (int64_t *)PyBytes_AS_STRING(timestamps);
    o.key_offsets = (int32_t *)PyBytes_AS_STRING(key_offsets);
    o.value_offsets = (int32_t *)PyBytes_AS_STRING(value_offsets);
    o.key_valid = (uint8_t *)PyBytes_AS_STRING(key_valid);
    o.value_valid = (uint8_t *)PyBytes_AS_STRING(value_valid);
    o.key_data = (uint8_t *)PyBytes_AS_STRING(key_data);
    o.value_data = (uint8_t *)PyBytes_AS_STRING(value_data);
    if (n >= RELEASE_GIL_BYTES_MIN) {
        Py_BEGIN_ALLOW_THREADS
        decode_core((const uint8_t *)buf.buf, n, (int64_t)count, (int64_t)base_offset,
                    (int64_t)base_ts, log_append, (int64_t)max_ts,
                    (int32_t)key_base, (int32_t)value_base, &o);
        Py_END_ALLOW_THREADS
    }
    else {
        decode_core((const uint8_t *)buf.buf, n, (int64_t)count, (int64_t)base_offset,
                    (int64_t)base_ts, log_append, (int64_t)max_ts,
                    (int32_t)key_base, (int32_t)value_base, &o);
    }
    if (o.offset_overflow_record >= 0) {
        PyObject *exc_args = Py_BuildValue(
            "(NsLn)",
            PyUnicode_FromFormat("record %lld: its offset (baseOffset %lld plus its "
                                 "offsetDelta) does not fit int64",
                                 (long long)o.offset_overflow_record, base_offset),
            "offset_overflow", (long long)o.offset_overflow_record, (Py_ssize_t)-1);
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_ValueError, exc_args);
            Py_DECREF(exc_args);
        }
        goto done;
    }
    if (o.ts_overflow_record >= 0) {
        PyObject *exc_args = Py_BuildValue(
            "(NsLn)",
            PyUnicode_FromFormat("record %lld: its timestamp (baseTimestamp %lld plus its "
                                 "timestampDelta) does not fit int64 microseconds",
                                 (long long)o.ts_overflow_record, base_ts),
            "timestamp_overflow", (long long)o.ts_overflow_record, (Py_ssize_t)-1);
        if (exc_args != NULL) {
            PyErr_SetObject(PyExc_ValueError, exc_args);
            Py_DECREF(exc_args);
        }
        goto done;
    }
    if (_PyBytes_Resize(&key_data, o.key_len) < 0 || _PyBytes_Resize(&value_data, o.value_len) < 0) {
        goto done;
    }
    if (want_headers) {
        headers = decode_headers((const uint8_t *)buf.buf, n, (int64_t)count);
        if (headers == NULL) {
            goto done;
        }
    }
    else {
        headers = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(OOOOOLOOOLO)", offsets, timestamps, key_data, key_offsets,
                           key_valid, (long long)o.key_nulls, value_data, value_offsets,
                           value_valid, (long long)o.value_nulls, headers);
done:
    PyBuffer_Release(&buf);
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(key_offsets);
    Py_XDECREF(value_offsets);
    Py_XDECREF(key_valid);
    Py_XDECREF(value_valid);
    Py_XDECREF(key_data);
    Py_XDECREF(value_data);
    Py_XDECREF(headers);
    return result;
}

/*
 * decode_records: the records of a section as objects of the caller's
 * slots class (lograft.protocol.batch.Record: offset, timestamp, key, value,
 * headers), for the consumer. The section is first walked by scan_core with
 * the read rules, so a malformed section is refused with the scanner's
 * reason and message and the build pass reads only well formed bytes.
 * Records below start_offset are stepped over. An instance is allocated and
 * its five slots stored directly: a frozen dataclass's __init__ (one
 * object.__setattr__ per field) cost more than the decoding itself.
 */

#define RECORD_FIELDS 5
static const char *const RECORD_FIELD_NAMES[RECORD_FIELDS] = {
    "offset", "timestamp", "key", "value", "headers",
};

/* The byte offset of each of `names`' slots in instances of `tp`; -1 and an
 * exception when one is not an object slot of that class. */
static int
slot_offsets(PyTypeObject *tp, const char *const *names, int n, Py_ssize_t *offsets)
{
    int i;
    for (i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)tp, names[i]);
        PyMemberDef *m;
        if (d == NULL) {
            return -1;
        }
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            Py_DECREF(d);
            PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", tp->tp_name, names[i]);
            return -1;
        }
        m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || m->offset < (Py_ssize_t)sizeof(PyObject) ||
            m->offset > tp->tp_basicsize - (Py_ssize_t)sizeof(PyObject *)) {
            Py_DECREF(d);
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", tp->tp_name, names[i]);
            return -1;
        }
        offsets[i] = m->offset;
        Py_DECREF(d);
    }
    return 0;
}

/* base + delta as a Python int, exact even past int64 (as Python's sum). */
static PyObject *
sum_to_long(int64_t base, int64_t delta)
{
    int64_t v;
    PyObject *a, *b, *r;
    if (!__builtin_add_overflow(base, delta, &v)) {
        return PyLong_FromLongLong((long long)v);
    }
    a = PyLong_FromLongLong((long long)base);
    b = PyLong_FromLongLong((long long)delta);
    r = (a != NULL && b != NULL) ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* A record's headers: a tuple of (str key, bytes value or None); keys are
 * decoded as UTF-8 with surrogateescape, as batch.decode_records does. */
static PyObject *
build_headers(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t n)
{
    Py_ssize_t p = *pp;
    int64_t nh = decoded_varint(d, &p, n), h;
    PyObject *tup = PyTuple_New((Py_ssize_t)nh);
    if (tup == NULL) {
        return NULL;
    }
    for (h = 0; h < nh; h++) {
        PyObject *k, *v, *pair;
        int64_t hk = decoded_varint(d, &p, n);
        int64_t hv;
        k = PyUnicode_DecodeUTF8((const char *)d + p, (Py_ssize_t)hk, "surrogateescape");
        p += (Py_ssize_t)hk;
        hv = decoded_varint(d, &p, n);
        if (hv >= 0) {
            v = PyBytes_FromStringAndSize((const char *)d + p, (Py_ssize_t)hv);
            p += (Py_ssize_t)hv;
        }
        else {
            v = Py_NewRef(Py_None);
        }
        if (k == NULL || v == NULL) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(tup);
            return NULL;
        }
        pair = PyTuple_Pack(2, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        if (pair == NULL) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, (Py_ssize_t)h, pair);
    }
    *pp = p;
    return tup;
}

/* A nullable bytes field (length -1 = None) at d[*pp]. */
static PyObject *
build_nullable(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t n)
{
    int64_t len = decoded_varint(d, pp, n);
    PyObject *out;
    if (len < 0) {
        return Py_NewRef(Py_None);
    }
    out = PyBytes_FromStringAndSize((const char *)d + *pp, (Py_ssize_t)len);
    *pp += (Py_ssize_t)len;
    return out;
}

/* Where decode_records puts what: the slots of the five decoded fields
 * (offset, timestamp, key, value, headers) in instances of `tp`, and the
 * consumer's constants (topic, partition, timestamp type) with their slots. */
#define CONSUMER_CONSTS 3
static const char *const CONSUMER_CONST_NAMES[CONSUMER_CONSTS] = {
    "topic", "partition", "timestamp_type",
};

typedef struct {
    PyTypeObject *tp;
    Py_ssize_t field_off[RECORD_FIELDS];
    int nconst;
    PyObject *consts[CONSUMER_CONSTS];
    Py_ssize_t const_off[CONSUMER_CONSTS];
} record_layout;

/* One record's object (the fields' references are stolen). */
static PyObject *
new_record(const record_layout *l, PyObject *fields[RECORD_FIELDS])
{
    int i;
    PyObject *obj = l->tp->tp_alloc(l->tp, 0);
    if (obj == NULL) {
        for (i = 0; i < RECORD_FIELDS; i++) {
            Py_DECREF(fields[i]);
        }
        return NULL;
    }
    for (i = 0; i < RECORD_FIELDS; i++) {
        *(PyObject **)((char *)obj + l->field_off[i]) = fields[i];
    }
    for (i = 0; i < l->nconst; i++) {
        *(PyObject **)((char *)obj + l->const_off[i]) = Py_NewRef(l->consts[i]);
    }
    /* Every field is an int, bytes, None or a tuple of (str, bytes or None)
     * pairs, the constants a str, an int and an enum member: no reference
     * cycle can pass through the object, so the cyclic collector need not
     * walk it (a consumer holds a response's worth of them at a time). */
    if (PyObject_IS_GC(obj)) {
        PyObject_GC_UnTrack(obj);
    }
    return obj;
}

static PyObject *
build_records(const uint8_t *d, Py_ssize_t n, int64_t count, int64_t base_offset,
              int64_t base_ts, int log_append, int64_t max_ts, int has_start,
              int64_t start_offset, const record_layout *layout)
{
    Py_ssize_t p = 0;
    int64_t i;
    PyObject *out = PyList_New(0);
    PyObject *fixed_ts = NULL;

    if (out == NULL) {
        return NULL;
    }
    if (log_append && (fixed_ts = PyLong_FromLongLong((long long)max_ts)) == NULL) {
        goto fail;
    }
    for (i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, offset;
        Py_ssize_t rec_end;
        PyObject *f[RECORD_FIELDS] = {NULL, NULL, NULL, NULL, NULL};
        PyObject *rec;
        int j, ok, in_range;

        length = decoded_varint(d, &p, n);
        rec_end = p + (Py_ssize_t)length;
        p += 1; /* attributes */
        ts_delta = decoded_varint(d, &p, n);
        off_delta = decoded_varint(d, &p, n);
        in_range = !__builtin_add_overflow(base_offset, off_delta, &offset);
        /* An offset past int64 is past any start offset. */
        if (has_start && in_range && offset < start_offset) {
            p = rec_end;
            continue;
        }
        f[0] = sum_to_long(base_offset, off_delta);
        f[1] = log_append ? Py_NewRef(fixed_ts) : sum_to_long(base_ts, ts_delta);
        f[2] = build_nullable(d, &p, n);
        f[3] = build_nullable(d, &p, n);
        f[4] = build_headers(d, &p, n);
        ok = 1;
        for (j = 0; j < RECORD_FIELDS; j++) {
            ok = ok && f[j] != NULL;
        }
        if (!ok) {
            for (j = 0; j < RECORD_FIELDS; j++) {
                Py_XDECREF(f[j]);
            }
            goto fail;
        }
        rec = new_record(layout, f);
        if (rec == NULL) {
            goto fail;
        }
        if (PyList_Append(out, rec) < 0) {
            Py_DECREF(rec);
            goto fail;
        }
        Py_DECREF(rec);
        p = rec_end;
    }
    Py_XDECREF(fixed_ts);
    return out;
fail:
    Py_XDECREF(fixed_ts);
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, records_count, last_offset_delta, base_offset, base_timestamp,\n"
"               is_log_append_time, max_timestamp, has_start, start_offset, record_type,\n"
"               topic=None, partition=None, timestamp_type=None)\n"
"    -> list of record_type\n\n"
"The records of a records section at or after start_offset (when has_start) as\n"
"instances of record_type, a slots class with the object slots offset,\n"
"timestamp, key, value, headers; with topic (then partition and\n"
"timestamp_type too), also the slots topic, partition, timestamp_type set to\n"
"them (the consumer's records). No __init__ is called, and the objects are\n"
"not tracked by the cyclic collector (nothing in them can form a cycle). The\n"
"section is checked first as scan(..., contiguous=False) does and refused the\n"
"same way: ValueError(message, reason, record_index, byte).");

static PyObject *
recordscan_decode_records(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    long long count, last, base_offset, base_ts, max_ts, start;
    int log_append, has_start;
    PyObject *type_obj, *topic = Py_None, *partition = Py_None, *ts_type = Py_None;
    record_layout layout;
    scan_error e;
    scan_summary summary;
    reason_t r;
    PyObject *result = NULL;

    (void)self;
    if (!PyArg_ParseTuple(args, "y*LLLLpLpLO!|OOO:decode_records", &buf, &count, &last,
                          &base_offset, &base_ts, &log_append, &max_ts, &has_start, &start,
                          &PyType_Type, &type_obj, &topic, &partition, &ts_type)) {
        return NULL;
    }
    memset(&layout, 0, sizeof(layout));
    layout.tp = (PyTypeObject *)type_obj;
    if (slot_offsets(layout.tp, RECORD_FIELD_NAMES, RECORD_FIELDS, layout.field_off) < 0) {
        goto done;
    }
    if (topic != Py_None) {
        if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(partition)) {
            PyErr_SetString(PyExc_TypeError, "decode_records: topic must be a str and "
                            "partition an int");
            goto done;
        }
        layout.nconst = CONSUMER_CONSTS;
        layout.consts[0] = topic;
        layout.consts[1] = partition;
        layout.consts[2] = ts_type;
        if (slot_offsets(layout.tp, CONSUMER_CONST_NAMES, CONSUMER_CONSTS, layout.const_off) < 0) {
            goto done;
        }
    }
    memset(&e, 0, sizeof(e));
    if (buf.len >= RELEASE_GIL_BYTES_MIN) {
        Py_BEGIN_ALLOW_THREADS
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last, 0, -1,
                      &e, &summary);
        Py_END_ALLOW_THREADS
    }
    else {
        r = scan_core((const uint8_t *)buf.buf, buf.len, (int64_t)count, (int64_t)last, 0, -1,
                      &e, &summary);
    }
    if (r != SCAN_OK) {
        scan_failure(&e, r);
        goto done;
    }
    result = build_records((const uint8_t *)buf.buf, buf.len, (int64_t)count,
                           (int64_t)base_offset, (int64_t)base_ts, log_append, (int64_t)max_ts,
                           has_start, (int64_t)start, &layout);
done:
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef recordscan_methods[] = {
    {"scan", recordscan_scan, METH_VARARGS, scan_doc},
    {"decode_columns", recordscan_decode_columns, METH_VARARGS, decode_columns_doc},
    {"decode_records", recordscan_decode_records, METH_VARARGS, decode_records_doc},
    {NULL, NULL, 0, NULL},
};

/* Bumped whenever scan's arguments or answer change: record_scan.py ignores
 * a module built from an older source (an editable install keeps the last
 * build until it is rebuilt) instead of misreading its answers. */
#define RECORDSCAN_ABI 3  /* 3: record_max */

/* Version of decode_columns' arguments and answer, checked by
 * record_columns.py apart from ABI (scan's), so either can change alone. */
#define RECORDSCAN_COLUMNS_ABI 1

/* Version of decode_records' arguments and answer (record_decode.py). */
#define RECORDSCAN_RECORDS_ABI 2  /* 2: the consumer's records (topic, partition, timestamp_type) */

static int
recordscan_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "COLUMNS_ABI", RECORDSCAN_COLUMNS_ABI) < 0) {
        return -1;
    }
    if (PyModule_AddIntConstant(module, "RECORDS_ABI", RECORDSCAN_RECORDS_ABI) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "ABI", RECORDSCAN_ABI);
}

static PyModuleDef_Slot recordscan_slots[] = {
    {Py_mod_exec, recordscan_exec},
    {0, NULL},
};

static struct PyModuleDef recordscan_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "lograft.protocol._recordscan",
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

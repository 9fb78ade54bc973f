/*
 * _recordwalk: the compiled record walk and encoder of broker_runtime.protocol.record_codec (one pass, no
 * per-record Python work).
 *
 * Contract. The record format is documented in record_codec/format.py, the checks and their messages in
 * record_codec/scan.py (scan_records) and decode.py (record_layout); the Python record walk, pywalk.py beside
 * this file, has the same entry points (scan, layout, header_spans) and this file must agree with it exactly
 * (tests/protocol/test_recordwalk.py compares both on random valid and damaged batches). Every function takes
 * the (decompressed) records bytes as a read-only contiguous buffer and writes its results into int64 buffers
 * the caller allocated (numpy arrays), so this file needs only the CPython C API, no numpy headers.
 *
 *   scan(data, count, base_ts, low, high, log_append, check_ts, out) -> (max_ts, n_null_keys, n_bad_ts)
 *       Validation of one batch (produce path). out holds 3 * count int64: [0, n_null_keys) the indexes of
 *       the records with a null key, [count, count + n_bad_ts) the indexes of the records whose timestamp
 *       (base_ts + delta, not -1) lies outside [low, high] when check_ts, [2 * count, ...) those timestamps.
 *       max_ts is the largest record timestamp (-1 when none or log_append).
 *   layout(arena, batches, out, walk_headers) -> total header count
 *       The decoder's walk over several batches. batches: int64 rows (begin, end, count, lastOffsetDelta);
 *       out: 10 rows of n = sum(count) int64: record start, end, timestampDelta, offsetDelta, key start,
 *       key length, value start, value length, headers count, headers position. walk_headers also checks
 *       every header's lengths and that the fields end at the record's end.
 *   header_spans(arena, headers_pos, headers_count, out) -> None
 *       After layout(walk_headers=True): out holds 4 rows of total-header-count int64: key start, key length,
 *       value start, value length of every header, record by record.
 *
 *   gather(arena, starts, lengths, offsets, out) -> None
 *       The bytes of n arena slices laid end to end, as an Arrow binary column: starts, lengths: n int64
 *       (a length of -1, a null, takes no bytes); offsets: n + 1 int32 it fills (0, then each slice's end in
 *       out); out: a writable byte buffer of exactly the lengths' sum (>= 0 each). One memcpy per slice,
 *       instead of Arrow's filter over an interleaved "pieces" array (the decoder's key and value columns).
 *       A slice outside the arena, a sum that is not out's size or above INT32_MAX raise ValueError.
 *   split(klen, vlen, hcount, hbytes, ts, starts, limit, bounds) -> number of bounds
 *       The encoder's batch split (encode.py's _split): int64 key / value lengths (-1 null), header counts,
 *       encoded header bytes and timestamps per row; starts: the row groups' first rows (from 0). Each batch
 *       takes, greedily, the records whose sizes (with their offsetDelta / timestampDelta in that batch) sum
 *       to at most limit bytes (limit < 0: no bound), at least one; bounds receives 0, ..., n.
 *   encode(bounds, ts, klen, koff, kdata, vlen, voff, vdata, hcount, hoff, hdata, offsets) -> bytes
 *       The encoder's records sections: every record (length, attributes 0, timestampDelta and offsetDelta
 *       relative to its batch's first row, key, value, headers count, the already encoded headers hdata) in
 *       one bytes object, offsets (n + 1 int64) where each record starts. koff / voff / hoff: the n + 1 int64
 *       offsets of Arrow large_binary arrays (empty when the column is absent: all its lengths are -1 / 0);
 *       kdata / vdata / hdata their data buffers. Every field is checked to lie in its buffer (ValueError),
 *       then written with the GIL released. Byte-identical to the numpy encoder (test_record_codec.py).
 *   encode(..., offsets, gap, alloc) -> alloc's buffer
 *       The same records, but gap bytes left free before each batch's records (for its header, written in
 *       place by the caller: no join of header and records), so batch b's records start at
 *       offsets[bounds[b]] + (b + 1) * gap; the output is alloc(size), a writable buffer of exactly size
 *       bytes (e.g. from Arrow's memory pool, which keeps freed memory for the next call instead of handing
 *       it back to the system and faulting it in again). offsets stay those of the records without gaps.
 *
 * Errors raise WalkError(batch, record, message): batch index (always 0 for scan), the record's index in its
 * batch or None when no one record is to blame; the caller turns it into CorruptRecordError.
 *
 * Invariants. Records are walked strictly in order and, within a record, fields in order; the first check
 * that fails wins, so the record named is the first bad one. No byte outside [0, len(data)) is read; every
 * field varint is read within its record's declared end. varints: zigzag LEB128, at most 5 bytes, value
 * wrapped to 32 bits; varlongs at most 10 bytes. No allocation per record; the GIL is held (the buffers are
 * borrowed for the call only). Thread-safe: no global state besides the exception type.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *WalkError;

enum { VARINT_OK = 0, VARINT_OVERLONG = 1, VARINT_CUT = 2 };

/* Reads a zigzag LEB128 value at *p (below limit) of at most max_bytes; advances *p. */
static inline int read_varint(const uint8_t *a, Py_ssize_t *p, Py_ssize_t limit, int max_bytes, int64_t *out)
{
    uint64_t u = 0;
    Py_ssize_t q = *p;
    for (int k = 0; k < max_bytes; k++) {
        if (q >= limit)
            return VARINT_CUT;
        uint8_t b = a[q++];
        u |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) {
            *p = q;
            *out = (int64_t)((u >> 1) ^ (0 - (u & 1)));
            return VARINT_OK;
        }
    }
    return VARINT_OVERLONG;
}

typedef struct {
    Py_ssize_t batch;
    Py_ssize_t record; /* -1: no record to blame */
    char message[200];
} walk_error;

static int fail(walk_error *e, Py_ssize_t record, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyOS_vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->record = record;
    return -1;
}

static PyObject *raise_walk_error(const walk_error *e)
{
    PyObject *record = e->record < 0 ? Py_NewRef(Py_None) : PyLong_FromSsize_t(e->record);
    PyObject *args = record == NULL ? NULL : Py_BuildValue("(nNs)", e->batch, record, e->message);
    if (args == NULL)
        return NULL;
    PyErr_SetObject(WalkError, args);
    Py_DECREF(args);
    return NULL;
}

/* A field varint of a record: errors name the field. */
static inline int field(const uint8_t *a, Py_ssize_t *p, Py_ssize_t rec_end, int max_bytes, int64_t *v,
                        walk_error *e, Py_ssize_t i, const char *what)
{
    int r = read_varint(a, p, rec_end, max_bytes, v);
    if (r == VARINT_OK) {
        if (max_bytes == 5)
            *v = (int32_t)(uint32_t)(uint64_t)*v; /* 32-bit wrap, as Java's int arithmetic */
        return 0;
    }
    if (r == VARINT_OVERLONG)
        return fail(e, i, "%s varint is longer than %d bytes", what, max_bytes);
    return fail(e, i, "%s runs past the end of the record", what);
}

/* Is [s, s + n) valid UTF-8? ASCII is checked here, anything else by CPython's strict decoder. */
static int utf8_ok(const uint8_t *s, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        if (s[k] >= 0x80) {
            PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
            if (u == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(u);
            return 1;
        }
    }
    return 1;
}

/* The fixed part of record i at *pos: length .. headers count. Fills f[0..9] as the layout rows. */
enum { F_START, F_END, F_TS, F_OD, F_KS, F_KL, F_VS, F_VL, F_HC, F_HP, N_FIELDS };

static inline int record_head(const uint8_t *a, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t i, int64_t *f,
                              walk_error *e)
{
    Py_ssize_t p = pos;
    int64_t length = 0, v = 0;
    if (pos >= end)
        return fail(e, i, "the record starts past the end of the records section (recordsCount or a record "
                          "length is wrong)");
    int r = read_varint(a, &p, end, 5, &length);
    if (r == VARINT_OVERLONG)
        return fail(e, i, "record length varint is longer than 5 bytes");
    if (r == VARINT_CUT)
        return fail(e, i, "the record runs past the end of the records section (recordsCount or a record "
                          "length is wrong)");
    length = (int32_t)(uint32_t)(uint64_t)length;
    if (length < 0)
        return fail(e, i, "negative record length");
    if (length > end - p)
        return fail(e, i, "the record runs %lld bytes past the end of the records section (recordsCount or a "
                          "record length is wrong)", (long long)(length - (end - p)));
    Py_ssize_t rec_end = p + (Py_ssize_t)length;
    f[F_START] = pos;
    f[F_END] = rec_end;
    if (p >= rec_end) /* the attributes byte is not interpreted (Kafka ignores it too) */
        return fail(e, i, "attributes run past the end of the record");
    p += 1;
    if (field(a, &p, rec_end, 10, &f[F_TS], e, i, "timestampDelta"))
        return -1;
    if (field(a, &p, rec_end, 5, &f[F_OD], e, i, "offsetDelta"))
        return -1;
    if (field(a, &p, rec_end, 5, &v, e, i, "key length"))
        return -1;
    if (v < -1)
        return fail(e, i, "key length below -1");
    f[F_KS] = p;
    f[F_KL] = v;
    if (v > 0) {
        if (v > rec_end - p)
            return fail(e, i, "key runs past the end of the record");
        p += (Py_ssize_t)v;
    }
    if (field(a, &p, rec_end, 5, &v, e, i, "value length"))
        return -1;
    if (v < -1)
        return fail(e, i, "value length below -1");
    f[F_VS] = p;
    f[F_VL] = v;
    if (v > 0) {
        if (v > rec_end - p)
            return fail(e, i, "value runs past the end of the record");
        p += (Py_ssize_t)v;
    }
    if (field(a, &p, rec_end, 5, &v, e, i, "headers count"))
        return -1;
    if (v < 0 || v * 2 > rec_end - p)
        return fail(e, i, "headers count is negative or larger than the record can hold");
    f[F_HC] = v;
    f[F_HP] = p;
    return 0;
}

/* Walks the headers of record i from f[F_HP] to its end. */
static inline int record_headers(const uint8_t *a, const int64_t *f, Py_ssize_t i, int check_utf8, walk_error *e)
{
    Py_ssize_t p = (Py_ssize_t)f[F_HP], rec_end = (Py_ssize_t)f[F_END];
    for (int64_t h = 0; h < f[F_HC]; h++) {
        int64_t kl = 0, vl = 0;
        if (field(a, &p, rec_end, 5, &kl, e, i, "header key length"))
            return -1;
        if (kl < 0)
            return fail(e, i, "negative header key length");
        if (kl > rec_end - p)
            return fail(e, i, "header key runs past the end of the record");
        if (check_utf8 && !utf8_ok(a + p, (Py_ssize_t)kl))
            return fail(e, -1, "a record header key is not valid UTF-8");
        p += (Py_ssize_t)kl;
        if (field(a, &p, rec_end, 5, &vl, e, i, "header value length"))
            return -1;
        if (vl < -1)
            return fail(e, i, "header value length below -1");
        if (vl > 0) {
            if (vl > rec_end - p)
                return fail(e, i, "header value runs past the end of the record");
            p += (Py_ssize_t)vl;
        }
    }
    if (p != rec_end)
        return fail(e, i, "record length does not match the fields it holds");
    return 0;
}

static int get_int64_out(PyObject *obj, Py_buffer *view, Py_ssize_t need, const char *what)
{
    if (need < 0 || need > PY_SSIZE_T_MAX / 8) {
        PyErr_Format(PyExc_ValueError, "%s: %zd items cannot be addressed", what, need);
        return -1;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->format == NULL || (view->format[0] != 'q' && view->format[0] != 'l') ||
        view->len < need * 8) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must be a writable int64 buffer of at least %zd items", what, need);
        return -1;
    }
    return 0;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer data, out;
    Py_ssize_t count;
    long long base_ts, low, high;
    int log_append, check_ts;
    PyObject *out_obj;
    if (!PyArg_ParseTuple(args, "y*nLLLppO", &data, &count, &base_ts, &low, &high, &log_append, &check_ts,
                          &out_obj))
        return NULL;
    if (count < 0 || count > data.len || get_int64_out(out_obj, &out, 3 * count, "out") < 0) {
        if (count < 0 || count > data.len)
            PyErr_SetString(PyExc_ValueError, "count must lie in [0, len(data)]");
        PyBuffer_Release(&data);
        return NULL;
    }
    const uint8_t *a = data.buf;
    Py_ssize_t end = data.len, pos = 0, n_null = 0, n_bad = 0;
    int64_t *null_keys = out.buf, *bad_idx = null_keys + count, *bad_ts = bad_idx + count;
    int64_t max_ts = -1, f[N_FIELDS];
    walk_error e = {0, -1, ""};
    int err = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (record_head(a, pos, end, i, f, &e) || record_headers(a, f, i, 1, &e)) {
            err = 1;
            break;
        }
        if (f[F_OD] != i) {
            err = fail(&e, i, "offsetDelta is not the record's index in the batch");
            break;
        }
        if (f[F_KL] < 0)
            null_keys[n_null++] = i;
        if (!log_append) {
            int64_t ts = (int64_t)((uint64_t)base_ts + (uint64_t)f[F_TS]); /* wraps as numpy's int64 */
            if (ts > max_ts)
                max_ts = ts;
            if (check_ts && ts != -1 && (ts < low || ts > high)) {
                bad_idx[n_bad] = i;
                bad_ts[n_bad++] = ts;
            }
        }
        pos = (Py_ssize_t)f[F_END];
    }
    if (!err && pos != end)
        err = fail(&e, count - 1, "%zd bytes remain of the records section after its %zd records (recordsCount "
                                  "or a record length is wrong)", end - pos, count);
    PyBuffer_Release(&out);
    PyBuffer_Release(&data);
    if (err) {
        if (count == 0)
            e.record = -1;
        return raise_walk_error(&e);
    }
    return Py_BuildValue("(Lnn)", (long long)max_ts, n_null, n_bad);
}

static PyObject *layout(PyObject *self, PyObject *args)
{
    Py_buffer data, batches, out;
    PyObject *batches_obj, *out_obj;
    int walk_headers;
    if (!PyArg_ParseTuple(args, "y*OOp", &data, &batches_obj, &out_obj, &walk_headers))
        return NULL;
    if (PyObject_GetBuffer(batches_obj, &batches, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (batches.itemsize != 8 || batches.len % 32) {
        PyErr_SetString(PyExc_ValueError, "batches must be int64 rows of (begin, end, count, lastOffsetDelta)");
        goto fail_batches;
    }
    const int64_t *bt = batches.buf;
    Py_ssize_t nb = batches.len / 32, n = 0;
    for (Py_ssize_t b = 0; b < nb; b++) {
        if (bt[4 * b] < 0 || bt[4 * b + 1] > data.len || bt[4 * b] > bt[4 * b + 1] || bt[4 * b + 2] < 0 ||
            bt[4 * b + 2] > bt[4 * b + 1] - bt[4 * b]) {
            PyErr_SetString(PyExc_ValueError,
                            "a batch's records section lies outside the arena, or its count exceeds its bytes");
            goto fail_batches;
        }
        n += (Py_ssize_t)bt[4 * b + 2];
    }
    if (get_int64_out(out_obj, &out, N_FIELDS * n, "out") < 0)
        goto fail_batches;
    const uint8_t *a = data.buf;
    int64_t *rows = out.buf, f[N_FIELDS];
    Py_ssize_t r = 0, total_headers = 0;
    walk_error e = {0, -1, ""};
    int err = 0;
    for (Py_ssize_t b = 0; b < nb && !err; b++) {
        Py_ssize_t pos = (Py_ssize_t)bt[4 * b], end = (Py_ssize_t)bt[4 * b + 1];
        Py_ssize_t count = (Py_ssize_t)bt[4 * b + 2];
        int64_t last_delta = bt[4 * b + 3], prev = -1;
        e.batch = b;
        for (Py_ssize_t i = 0; i < count; i++, r++) {
            if (record_head(a, pos, end, i, f, &e)) {
                err = 1;
                break;
            }
            if (f[F_OD] < 0 || f[F_OD] > last_delta) {
                err = fail(&e, i, "offsetDelta outside [0, lastOffsetDelta]");
                break;
            }
            if (f[F_OD] <= prev) {
                err = fail(&e, i, "offsetDelta does not increase");
                break;
            }
            if (walk_headers && record_headers(a, f, i, 0, &e)) {
                err = 1;
                break;
            }
            prev = f[F_OD];
            total_headers += (Py_ssize_t)f[F_HC];
            for (int k = 0; k < N_FIELDS; k++)
                rows[k * n + r] = f[k];
            pos = (Py_ssize_t)f[F_END];
        }
        if (!err && pos != end)
            err = fail(&e, -1, "recordsCount %zd records do not end at the end of the %lld-byte records section "
                               "(they end at byte %lld)", count, (long long)(end - bt[4 * b]),
                       (long long)(pos - bt[4 * b]));
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&batches);
    PyBuffer_Release(&data);
    if (err)
        return raise_walk_error(&e);
    return PyLong_FromSsize_t(total_headers);
fail_batches:
    PyBuffer_Release(&batches);
    PyBuffer_Release(&data);
    return NULL;
}

static PyObject *header_spans(PyObject *self, PyObject *args)
{
    Py_buffer data, hp, hc, out;
    PyObject *hp_obj, *hc_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "y*OOO", &data, &hp_obj, &hc_obj, &out_obj))
        return NULL;
    if (PyObject_GetBuffer(hp_obj, &hp, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (PyObject_GetBuffer(hc_obj, &hc, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&hp);
        PyBuffer_Release(&data);
        return NULL;
    }
    Py_ssize_t n = hp.len / 8, total = 0;
    const int64_t *pos = hp.buf, *cnt = hc.buf;
    int ok = hp.len == hc.len && hp.len % 8 == 0;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        if (cnt[i] < 0 || cnt[i] > data.len || pos[i] < 0 || pos[i] > data.len)
            ok = 0;
        total += ok ? (Py_ssize_t)cnt[i] : 0;
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "headers_pos / headers_count do not describe the arena");
    }
    if (!ok || get_int64_out(out_obj, &out, 4 * total, "out") < 0) {
        PyBuffer_Release(&hc);
        PyBuffer_Release(&hp);
        PyBuffer_Release(&data);
        return NULL;
    }
    int64_t *spans[4] = {out.buf, (int64_t *)out.buf + total, (int64_t *)out.buf + 2 * total,
                         (int64_t *)out.buf + 3 * total};
    walk_error e = {0, -1, ""};
    int err = 0;
    for (Py_ssize_t i = 0; i < n && !err; i++) {
        if (cnt[i] == 0)
            continue;
        /* the record's end is unknown here: bound the walk by the arena (layout checked the records) */
        Py_ssize_t p = (Py_ssize_t)pos[i];
        for (int64_t h = 0; h < cnt[i] && !err; h++) {
            int64_t kl = 0, vl = 0;
            if (field(data.buf, &p, data.len, 5, &kl, &e, i, "header key length") || kl < 0 ||
                kl > data.len - p) {
                err = fail(&e, i, "header spans walked over a record layout() did not check");
                break;
            }
            *spans[0]++ = p;
            *spans[1]++ = kl;
            p += (Py_ssize_t)kl;
            if (field(data.buf, &p, data.len, 5, &vl, &e, i, "header value length") || vl < -1 ||
                vl > data.len - p) {
                err = fail(&e, i, "header spans walked over a record layout() did not check");
                break;
            }
            *spans[2]++ = p;
            *spans[3]++ = vl;
            if (vl > 0)
                p += (Py_ssize_t)vl;
        }
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&hc);
    PyBuffer_Release(&hp);
    PyBuffer_Release(&data);
    if (err)
        return raise_walk_error(&e);
    Py_RETURN_NONE;
}

static PyObject *gather(PyObject *self, PyObject *args)
{
    Py_buffer data, st, ln, off, out;
    PyObject *st_obj, *ln_obj, *off_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "y*OOOO", &data, &st_obj, &ln_obj, &off_obj, &out_obj))
        return NULL;
    if (PyObject_GetBuffer(st_obj, &st, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto fail_data;
    if (PyObject_GetBuffer(ln_obj, &ln, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto fail_st;
    if (PyObject_GetBuffer(off_obj, &off, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto fail_ln;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto fail_off;
    Py_ssize_t n = st.len / 8;
    if (st.itemsize != 8 || ln.itemsize != 8 || st.len != ln.len || off.itemsize != 4 ||
        off.len != (n + 1) * 4 || out.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "gather: starts and lengths must be n int64, offsets n + 1 int32, out below 2 GiB");
        goto fail_out;
    }
    const int64_t *start = st.buf, *len = ln.buf;
    int32_t *offsets = off.buf;
    const uint8_t *src = data.buf;
    uint8_t *dst = out.buf;
    Py_ssize_t cursor = 0;
    offsets[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = len[i] < 0 ? 0 : len[i];
        if (start[i] < 0 || start[i] > data.len || k > data.len - start[i] || k > out.len - cursor) {
            PyErr_Format(PyExc_ValueError, "gather: slice %zd [%lld, +%lld) lies outside the arena or out", i,
                         (long long)start[i], (long long)k);
            goto fail_out;
        }
        memcpy(dst + cursor, src + start[i], (size_t)k);
        cursor += (Py_ssize_t)k;
        offsets[i + 1] = (int32_t)cursor;
    }
    if (cursor != out.len) {
        PyErr_Format(PyExc_ValueError, "gather: the slices hold %zd bytes, out has %zd", cursor, out.len);
        goto fail_out;
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&off);
    PyBuffer_Release(&ln);
    PyBuffer_Release(&st);
    PyBuffer_Release(&data);
    Py_RETURN_NONE;
fail_out:
    PyBuffer_Release(&out);
fail_off:
    PyBuffer_Release(&off);
fail_ln:
    PyBuffer_Release(&ln);
fail_st:
    PyBuffer_Release(&st);
fail_data:
    PyBuffer_Release(&data);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------ encode */

static inline uint64_t zz(int64_t v) { return ((uint64_t)v << 1) ^ (0 - ((uint64_t)v >> 63)); }

static inline int64_t uvsize(uint64_t u)
{
    int64_t s = 1;
    while (u >= 0x80) {
        u >>= 7;
        s++;
    }
    return s;
}

static inline uint8_t *put_uv(uint8_t *o, uint64_t u)
{
    while (u >= 0x80) {
        *o++ = (uint8_t)(u | 0x80);
        u >>= 7;
    }
    *o++ = (uint8_t)u;
    return o;
}

/* Reads an int64 array argument of exactly `need` items (need < 0: any length, returned in *n). */
static int get_int64_in(Py_buffer *view, Py_ssize_t need, const char *what)
{
    if (view->len % 8 != 0 || (need >= 0 && view->len != need * 8)) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd int64 items, has %zd bytes", what, need, view->len);
        return -1;
    }
    return 0;
}

static PyObject *encode(PyObject *self, PyObject *args)
{
    Py_buffer in[11], out, dest;
    PyObject *out_obj, *alloc = Py_None;
    Py_ssize_t gap = 0;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*y*O|nO", &in[0], &in[1], &in[2], &in[3], &in[4], &in[5],
                          &in[6], &in[7], &in[8], &in[9], &in[10], &out_obj, &gap, &alloc))
        return NULL;
    /* in: bounds, ts, klen, koff, kdata, vlen, voff, vdata, hcount, hoff, hdata */
    Py_ssize_t n = in[1].len / 8, nb = in[0].len / 8;
    PyObject *result = NULL;
    int have_out = 0, have_dest = 0;
    if (gap < 0 || gap > (1 << 20) || (gap > 0 && alloc == Py_None)) {
        PyErr_SetString(PyExc_ValueError, "gap must be 0 to 1 MiB, and a gap needs alloc");
        goto done;
    }
    if (get_int64_in(&in[0], -1, "bounds") || nb < 1 || get_int64_in(&in[1], n, "ts") ||
        get_int64_in(&in[2], n, "klen") || get_int64_in(&in[5], n, "vlen") || get_int64_in(&in[8], n, "hcount") ||
        (in[3].len && get_int64_in(&in[3], n + 1, "koff")) || (in[6].len && get_int64_in(&in[6], n + 1, "voff")) ||
        (in[9].len && get_int64_in(&in[9], n + 1, "hoff"))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "bounds must hold at least one row index");
        goto done;
    }
    if (get_int64_out(out_obj, &out, n + 1, "offsets") < 0)
        goto done;
    have_out = 1;
    const int64_t *bounds = in[0].buf, *ts = in[1].buf, *klen = in[2].buf, *koff = in[3].buf,
                  *vlen = in[5].buf, *voff = in[6].buf, *hcount = in[8].buf, *hoff = in[9].buf;
    const uint8_t *kdata = in[4].buf, *vdata = in[7].buf, *hdata = in[10].buf;
    int64_t *offsets = out.buf;
    if (bounds[0] != 0 || bounds[nb - 1] != n) {
        PyErr_SetString(PyExc_ValueError, "bounds must run from 0 to the row count");
        goto done;
    }
    /* pass 1: every record's size, checking that each field lies inside its buffer */
    offsets[0] = 0;
    for (Py_ssize_t b = 0; b + 1 < nb; b++) {
        Py_ssize_t s = (Py_ssize_t)bounds[b], e = (Py_ssize_t)bounds[b + 1];
        if (s < 0 || e > n || e <= s) {
            PyErr_SetString(PyExc_ValueError, "bounds must increase strictly");
            goto done;
        }
        for (Py_ssize_t i = s; i < e; i++) {
            int64_t kl = klen[i], vl = vlen[i], hl = 0;
            if ((kl >= 0 && (!in[3].len || koff[i] < 0 || kl > in[4].len || koff[i] > in[4].len - kl)) ||
                (vl >= 0 && (!in[6].len || voff[i] < 0 || vl > in[7].len || voff[i] > in[7].len - vl)) ||
                kl < -1 || vl < -1 || hcount[i] < 0) {
                PyErr_Format(PyExc_ValueError, "row %zd: key or value outside its data buffer", i);
                goto done;
            }
            if (in[9].len) {
                hl = hoff[i + 1] - hoff[i];
                if (hoff[i] < 0 || hl < 0 || hoff[i + 1] > in[10].len) {
                    PyErr_Format(PyExc_ValueError, "row %zd: headers outside their data buffer", i);
                    goto done;
                }
            }
            int64_t body = 1 + uvsize(zz((int64_t)((uint64_t)ts[i] - (uint64_t)ts[s]))) + uvsize(zz(i - s)) +
                           uvsize(zz(kl)) + (kl > 0 ? kl : 0) + uvsize(zz(vl)) + (vl > 0 ? vl : 0) +
                           uvsize(zz(hcount[i])) + hl;
            offsets[i + 1] = offsets[i] + uvsize(zz(body)) + body;
        }
    }
    Py_ssize_t size = (Py_ssize_t)offsets[n] + (nb - 1) * gap;
    uint8_t *o;
    if (alloc == Py_None) {
        result = PyBytes_FromStringAndSize(NULL, size);
        if (result == NULL)
            goto done;
        o = (uint8_t *)PyBytes_AS_STRING(result);
    } else {
        result = PyObject_CallFunction(alloc, "n", size);
        if (result == NULL)
            goto done;
        if (PyObject_GetBuffer(result, &dest, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        have_dest = 1;
        if (dest.len != size) {
            PyErr_Format(PyExc_ValueError, "alloc(%zd) returned a buffer of %zd bytes", size, dest.len);
            Py_CLEAR(result);
            goto done;
        }
        o = dest.buf;
    }
    /* pass 2: write them */
    uint8_t *const start = o;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b + 1 < nb; b++) {
        Py_ssize_t s = (Py_ssize_t)bounds[b], e = (Py_ssize_t)bounds[b + 1];
        o += gap;
        for (Py_ssize_t i = s; i < e; i++) {
            int64_t kl = klen[i], vl = vlen[i], hl = in[9].len ? hoff[i + 1] - hoff[i] : 0;
            int64_t body = 1 + uvsize(zz((int64_t)((uint64_t)ts[i] - (uint64_t)ts[s]))) + uvsize(zz(i - s)) +
                           uvsize(zz(kl)) + (kl > 0 ? kl : 0) + uvsize(zz(vl)) + (vl > 0 ? vl : 0) +
                           uvsize(zz(hcount[i])) + hl;
            o = put_uv(o, zz(body));
            *o++ = 0; /* attributes */
            o = put_uv(o, zz((int64_t)((uint64_t)ts[i] - (uint64_t)ts[s])));
            o = put_uv(o, zz(i - s));
            o = put_uv(o, zz(kl));
            if (kl > 0) {
                memcpy(o, kdata + koff[i], (size_t)kl);
                o += kl;
            }
            o = put_uv(o, zz(vl));
            if (vl > 0) {
                memcpy(o, vdata + voff[i], (size_t)vl);
                o += vl;
            }
            o = put_uv(o, zz(hcount[i]));
            if (hl > 0) {
                memcpy(o, hdata + hoff[i], (size_t)hl);
                o += hl;
            }
        }
    }
    Py_END_ALLOW_THREADS
    if (o != start + size) { /* pass 1 and pass 2 disagree: never hand out such bytes */
        PyErr_Format(PyExc_SystemError, "encode wrote %zd bytes of %zd", (Py_ssize_t)(o - start), size);
        Py_CLEAR(result);
    }
done:
    if (have_dest)
        PyBuffer_Release(&dest);
    if (have_out)
        PyBuffer_Release(&out);
    for (int k = 0; k < 11; k++)
        PyBuffer_Release(&in[k]);
    return result;
}

/* Batch boundaries of build_batches' _split, for every row group: greedy, each batch as many records as fit
 * in limit bytes (limit < 0: no bound), at least one. */
static PyObject *split(PyObject *self, PyObject *args)
{
    Py_buffer in[6], out;
    long long limit;
    PyObject *out_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*LO", &in[0], &in[1], &in[2], &in[3], &in[4], &in[5], &limit,
                          &out_obj))
        return NULL;
    /* in: klen, vlen, hcount, hbytes, ts, group starts */
    Py_ssize_t n = in[4].len / 8, ng = in[5].len / 8, nb = 0;
    PyObject *result = NULL;
    int have_out = 0;
    if (get_int64_in(&in[4], -1, "ts") || get_int64_in(&in[0], n, "klen") || get_int64_in(&in[1], n, "vlen") ||
        get_int64_in(&in[2], n, "hcount") || get_int64_in(&in[3], n, "hbytes") ||
        get_int64_in(&in[5], -1, "starts"))
        goto done;
    if (get_int64_out(out_obj, &out, n + 1, "bounds") < 0)
        goto done;
    have_out = 1;
    const int64_t *klen = in[0].buf, *vlen = in[1].buf, *hcount = in[2].buf, *hbytes = in[3].buf, *ts = in[4].buf,
                  *starts = in[5].buf;
    int64_t *bounds = out.buf;
    if (ng < 1 || starts[0] != 0) {
        PyErr_SetString(PyExc_ValueError, "starts must begin with 0");
        goto done;
    }
    bounds[nb++] = 0;
    for (Py_ssize_t g = 0; g < ng; g++) {
        Py_ssize_t gs = (Py_ssize_t)starts[g], ge = g + 1 < ng ? (Py_ssize_t)starts[g + 1] : n;
        if (gs < 0 || ge > n || ge <= gs) {
            PyErr_SetString(PyExc_ValueError, "starts must increase strictly below the row count");
            goto done;
        }
        Py_ssize_t s = gs;
        int64_t used = 0;
        for (Py_ssize_t i = gs; i < ge; i++) {
            int64_t kl = klen[i], vl = vlen[i];
            int64_t body = 1 + uvsize(zz((int64_t)((uint64_t)ts[i] - (uint64_t)ts[s]))) + uvsize(zz(i - s)) +
                           uvsize(zz(kl)) + (kl > 0 ? kl : 0) + uvsize(zz(vl)) + (vl > 0 ? vl : 0) +
                           uvsize(zz(hcount[i])) + hbytes[i];
            int64_t size = uvsize(zz(body)) + body;
            if (limit >= 0 && i > s && used + size > limit) {
                bounds[nb++] = i; /* record i starts the next batch: its deltas change, size it again */
                s = i;
                used = 0;
                i--;
                continue;
            }
            used += size;
        }
        bounds[nb++] = ge;
    }
    result = PyLong_FromSsize_t(nb);
done:
    if (have_out)
        PyBuffer_Release(&out);
    for (int k = 0; k < 6; k++)
        PyBuffer_Release(&in[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Validate the records of one batch (see the file's header comment)."},
    {"layout", layout, METH_VARARGS, "Locate the records of several batches (see the file's header comment)."},
    {"header_spans", header_spans, METH_VARARGS, "Locate every header after layout()."},
    {"gather", gather, METH_VARARGS, "Copy arena slices into one binary column (see the file's header comment)."},
    {"split", split, METH_VARARGS, "Batch boundaries of build_batches (see the file's header comment)."},
    {"encode", encode, METH_VARARGS, "Write the records sections of magic-2 batches (see the file's header comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_recordwalk",
    .m_doc = "The compiled record walk of broker_runtime.protocol.record_codec.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__recordwalk(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    WalkError = PyErr_NewException("_recordwalk.WalkError", PyExc_ValueError, NULL);
    if (WalkError == NULL || PyModule_AddObjectRef(m, "WalkError", WalkError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

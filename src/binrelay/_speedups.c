/*
 * The relay's hot loop in C: take the run of ordinary events at the start of a receive buffer.
 *
 * Semantics are exactly those of take_run_python (relay/hotloop.py); that function
 * is the specification and the fallback when this module is not built, and a test runs both
 * on the same bytes.  An event is taken when its packet is whole (0x00 marker, shorter than
 * 16 MiB - 1), its type is flagged in `boring`, it is not artificial, it starts where the
 * file ends (log_pos - size == offset), its size matches the packet, and (when asked) its
 * CRC32 matches.  The first event that fails any test stops the run; Python decides about it.
 *
 * Also the row scanner's event walk (walk_events; rows/walk.py is its specification): check
 * every event's CRC32 and return only the events the scanner looks at.
 *
 * And the keyed apply path's multi-row statements (render_rows; apply/sql.py's
 * render_rows_python is its specification): row values as SQL literals.
 *
 * And the same rows as LOAD DATA lines (render_tsv; render_tsv_python is its specification).
 *
 * And dump --json's row lines (json_rows; rows/jsondump.py is its specification): the JSON
 * text of a rows event's images for the common column types, without a Python object per
 * value.
 *
 * And the read tasks' compaction loop (fold_images; spark/compact.py's fold_images_python is
 * its specification): the last operation per key of a rows event's images; and the
 * per-event loop around it for keyed tables (fold_events; the scanner's and compact_segment's
 * Python, which takes every event this leaves, is its specification).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32_buf(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                           (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
                      (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* zlib's crc32 (reached through Python's zlib module, so building needs no zlib headers) is
 * about twice as fast as the table loop on large buffers; the call costs more than it saves
 * on small events. */
static PyObject *zlib_crc32;
#define ZLIB_CRC_MIN 1024

static int event_crc_ok(const unsigned char *ev, uint32_t size, int *error)
{
    uint32_t want = (uint32_t)ev[size - 4] | (uint32_t)ev[size - 3] << 8 |
                    (uint32_t)ev[size - 2] << 16 | (uint32_t)ev[size - 1] << 24;
    if (size < ZLIB_CRC_MIN || zlib_crc32 == NULL)
        return crc32_buf(ev, size - 4) == want;
    PyObject *view = PyMemoryView_FromMemory((char *)ev, size - 4, PyBUF_READ);
    if (view == NULL) {
        *error = 1;
        return 0;
    }
    PyObject *got = PyObject_CallOneArg(zlib_crc32, view);
    Py_DECREF(view);
    if (got == NULL) {
        *error = 1;
        return 0;
    }
    unsigned long value = PyLong_AsUnsignedLong(got);
    Py_DECREF(got);
    return value == want;
}

/* Whether the CRC32 over the whole event, trailer included, is the residue a correct
 * trailer gives (what the Python side checks; an event too short for a trailer fails). */
static int event_crc_ok_residue(const unsigned char *ev, uint32_t size, int *error)
{
    if (size < 4)
        return 0;
    return event_crc_ok(ev, size, error);
}

static inline uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The MariaDB transaction state take_run updates when given one (progress.TxnRun). */
typedef struct {
    long state;
    int has_pending;
    long long p_domain, p_server, p_seq;
} txn_state;

enum { TXN_IDLE = 0, TXN_AFTER_GTID = 1, TXN_IN_TRX = 2 }; /* binlog/txn.py's states */
#define GTID_EVENT 162
#define XID_EVENT 16
#define FL_STANDALONE 1

/* progress.merge_maria: the highest seq_no of each domain stays. */
static int merge_maria(PyObject *maria, long long domain, long long server, long long seq)
{
    PyObject *key = PyLong_FromLongLong(domain);
    if (key == NULL)
        return -1;
    PyObject *old = PyDict_GetItemWithError(maria, key); /* borrowed */
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    if (old != NULL) {
        if (!PyTuple_Check(old) || PyTuple_GET_SIZE(old) != 2) {
            Py_DECREF(key);
            PyErr_SetString(PyExc_TypeError, "maria: values must be (server_id, seq_no)");
            return -1;
        }
        long long old_seq = PyLong_AsLongLong(PyTuple_GET_ITEM(old, 1));
        if (old_seq == -1 && PyErr_Occurred()) {
            Py_DECREF(key);
            return -1;
        }
        if (seq < old_seq) {
            Py_DECREF(key);
            return 0;
        }
    }
    PyObject *value = Py_BuildValue("(LL)", server, seq);
    int rc = value == NULL ? -1 : PyDict_SetItem(maria, key, value);
    Py_XDECREF(value);
    Py_DECREF(key);
    return rc;
}

/* take_run(data, pos, offset, check_crc, boring, out[, txn]) -> (pos, offset, count, bad_crc);
 * with txn (a progress.TxnRun), MariaDB GTID and XID events too (relay/hotloop.py). */
static PyObject *take_run(PyObject *self, PyObject *args)
{
    Py_buffer data, boring;
    Py_ssize_t pos;
    long long offset;
    int check_crc;
    PyObject *out, *txn = Py_None, *maria = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*nLpy*O!|O", &data, &pos, &offset, &check_crc, &boring,
                          &PyByteArray_Type, &out, &txn))
        return NULL;
    if (boring.len < 256) {
        PyErr_SetString(PyExc_ValueError, "boring must have 256 entries");
        goto done;
    }
    txn_state st = {0, 0, 0, 0, 0};
    int with_txn = txn != Py_None;
    if (with_txn) {
        PyObject *state = PyObject_GetAttrString(txn, "state");
        PyObject *pending = state ? PyObject_GetAttrString(txn, "pending") : NULL;
        maria = pending ? PyObject_GetAttrString(txn, "maria") : NULL;
        if (maria != NULL && !PyDict_Check(maria))
            PyErr_SetString(PyExc_TypeError, "txn.maria must be a dict");
        if (state != NULL && !PyErr_Occurred())
            st.state = PyLong_AsLong(state);
        if (pending != NULL && pending != Py_None && !PyErr_Occurred()) {
            if (!PyTuple_Check(pending) || PyTuple_GET_SIZE(pending) != 3) {
                PyErr_SetString(PyExc_TypeError, "txn.pending must be None or a MariaDB GTID");
            } else {
                st.has_pending = 1;
                st.p_domain = PyLong_AsLongLong(PyTuple_GET_ITEM(pending, 0));
                st.p_server = PyLong_AsLongLong(PyTuple_GET_ITEM(pending, 1));
                st.p_seq = PyLong_AsLongLong(PyTuple_GET_ITEM(pending, 2));
            }
        }
        Py_XDECREF(state);
        Py_XDECREF(pending);
        if (PyErr_Occurred())
            goto done;
    }
    const unsigned char *buf = data.buf;
    const unsigned char *flags = boring.buf;
    Py_ssize_t n = data.len, start_pos = pos, total = 0, count = 0;
    int bad_crc = 0;
    long long off = offset;

    /* First pass: find the run and its size, so `out` grows once. */
    while (n - pos >= 4 + 19) {
        uint32_t length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16;
        Py_ssize_t end = pos + 4 + (Py_ssize_t)length;
        if (end > n || length >= 0xFFFFFF || buf[pos + 4] != 0)
            break;
        const unsigned char *ev = buf + pos + 5;
        uint8_t type = ev[4];
        uint32_t size = le32(ev + 9), log_pos = le32(ev + 13);
        uint16_t eflags = (uint16_t)(ev[17] | ev[18] << 8);
        if ((eflags & 0x20) || size != length - 1 || (long long)log_pos - (long long)size != off)
            break;
        if (!flags[type]) {
            if (!with_txn)
                break;
            if (type == GTID_EVENT) {
                if (size < 19 + 13 || (ev[19 + 12] & FL_STANDALONE))
                    break;
            } else if (type != XID_EVENT) {
                break;
            }
        }
        if (check_crc) {
            int error = 0;
            if (size < 23 || !event_crc_ok(ev, size, &error)) {
                if (error)
                    goto done;
                bad_crc = 1;
                break;
            }
        }
        off = log_pos;
        total += size;
        count++;
        pos = end;
    }
    long long boundary = 0, last_ts = -1;
    if (total) {
        Py_ssize_t old = PyByteArray_GET_SIZE(out);
        if (PyByteArray_Resize(out, old + total) < 0)
            goto done;
        char *dst = PyByteArray_AS_STRING(out) + old;
        Py_ssize_t p = start_pos;
        while (p < pos) {
            uint32_t length = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16;
            const unsigned char *ev = buf + p + 5;
            memcpy(dst, ev, length - 1);
            dst += length - 1;
            p += 4 + (Py_ssize_t)length;
            if (!with_txn)
                continue;
            uint8_t type = ev[4];
            if (type == GTID_EVENT && !flags[type]) {
                st.has_pending = 1;
                st.p_domain = le32(ev + 19 + 8);
                st.p_server = le32(ev + 5);
                st.p_seq = (long long)((uint64_t)le32(ev + 19) | (uint64_t)le32(ev + 23) << 32);
                st.state = TXN_IN_TRX;
                last_ts = le32(ev);
            } else if (type == XID_EVENT && !flags[type]) {
                if (st.has_pending &&
                    merge_maria(maria, st.p_domain, st.p_server, st.p_seq) < 0)
                    goto done;
                st.has_pending = 0;
                st.state = TXN_IDLE;
                boundary = le32(ev + 13);
                last_ts = le32(ev);
            } else if (st.state == TXN_AFTER_GTID) {
                st.state = TXN_IN_TRX;
            }
        }
    }
    if (with_txn) {
        PyObject *state = PyLong_FromLong(st.state);
        PyObject *pending = st.has_pending
            ? Py_BuildValue("(LLL)", st.p_domain, st.p_server, st.p_seq)
            : Py_NewRef(Py_None);
        PyObject *bound = PyLong_FromLongLong(boundary);
        PyObject *ts = last_ts < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(last_ts);
        int bad = state == NULL || pending == NULL || bound == NULL || ts == NULL ||
                  PyObject_SetAttrString(txn, "state", state) < 0 ||
                  PyObject_SetAttrString(txn, "pending", pending) < 0 ||
                  (boundary && PyObject_SetAttrString(txn, "boundary", bound) < 0) ||
                  (last_ts >= 0 && PyObject_SetAttrString(txn, "last_ts", ts) < 0);
        Py_XDECREF(state);
        Py_XDECREF(pending);
        Py_XDECREF(bound);
        Py_XDECREF(ts);
        if (bad)
            goto done;
    }
    result = Py_BuildValue("nLni", pos, off, count, bad_crc);
done:
    Py_XDECREF(maria);
    PyBuffer_Release(&data);
    PyBuffer_Release(&boring);
    return result;
}

/* walk_events(buf, pos, end, crc, keep) -> (events, stopped_at, status): see
 * rows/walk.py, whose walk_events_python is the specification. */
static PyObject *walk_events(PyObject *self, PyObject *args)
{
    Py_buffer data, keep;
    Py_ssize_t pos, end;
    int crc;
    if (!PyArg_ParseTuple(args, "y*nnpy*", &data, &pos, &end, &crc, &keep))
        return NULL;
    PyObject *events = NULL, *result = NULL;
    if (keep.len < 256) {
        PyErr_SetString(PyExc_ValueError, "keep must have 256 entries");
        goto done;
    }
    if (pos < 0 || end > data.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "pos and end must lie within the buffer");
        goto done;
    }
    events = PyList_New(0);
    if (events == NULL)
        goto done;
    const unsigned char *buf = data.buf;
    const unsigned char *how = keep.buf;
    int status = 0;
    while (end - pos >= 19) {
        const unsigned char *ev = buf + pos;
        uint8_t type = ev[4];
        uint32_t size = le32(ev + 9);
        if (size < 19) {
            status = 1;
            break;
        }
        Py_ssize_t ev_end = pos + (Py_ssize_t)size;
        if (ev_end > end)
            break;
        /* A STOP_AFTER event's CRC is left to the decoder (it may be a new FDE). */
        if (how[type] != 2 && crc) {
            int error = 0;
            if (!event_crc_ok_residue(ev, size, &error)) {
                if (error)
                    goto done;
                status = 2;
                break;
            }
        }
        if (how[type] == 1 || how[type] == 2) {
            PyObject *item = Py_BuildValue("(inn)", (int)type, pos, ev_end);
            if (item == NULL)
                goto done;
            int failed = PyList_Append(events, item);
            Py_DECREF(item);
            if (failed)
                goto done;
        }
        pos = ev_end;
        if (how[type] == 2)
            break;
    }
    result = Py_BuildValue("(Oni)", events, pos, status);
done:
    Py_XDECREF(events);
    PyBuffer_Release(&data);
    PyBuffer_Release(&keep);
    return result;
}

/* hop_frames(buf, off, stop, whole, marks) -> (frames, off, marks, status): the planner's
 * walk over one buffer; binlog/framing.py's hop_frames_python is the specification. */
static PyObject *hop_frames(PyObject *self, PyObject *args)
{
    Py_buffer data, whole;
    Py_ssize_t off, stop;
    long marks;
    if (!PyArg_ParseTuple(args, "y*nny*l", &data, &off, &stop, &whole, &marks))
        return NULL;
    PyObject *frames = NULL, *result = NULL;
    if (whole.len < 256) {
        PyErr_SetString(PyExc_ValueError, "whole must have 256 entries");
        goto done;
    }
    if (off < 0 || off > data.len) {
        PyErr_SetString(PyExc_ValueError, "off must lie within the buffer");
        goto done;
    }
    frames = PyList_New(0);
    if (frames == NULL)
        goto done;
    const unsigned char *buf = data.buf;
    const unsigned char *how = whole.buf;
    Py_ssize_t have = data.len;
    int status = 1; /* HOP_END */
    while (off < stop) {
        if (have - off < 19) {
            status = 0; /* HOP_MORE */
            break;
        }
        uint8_t type = buf[off + 4];
        Py_ssize_t size = (Py_ssize_t)le32(buf + off + 9);
        if (size < 19) {
            status = 2; /* HOP_BAD_SIZE */
            break;
        }
        if (off + size > stop) {
            status = 1;
            break;
        }
        if (how[type] != 1) {
            marks |= how[type];
            off += size;
            continue;
        }
        if (off + size > have) {
            status = 0;
            break;
        }
        PyObject *item = Py_BuildValue("(nini)", off, (int)type, size, (int)marks);
        if (item == NULL)
            goto done;
        int failed = PyList_Append(frames, item);
        Py_DECREF(item);
        if (failed)
            goto done;
        marks = 0;
        off += size;
    }
    result = Py_BuildValue("(Onli)", frames, off, marks, status);
done:
    Py_XDECREF(frames);
    PyBuffer_Release(&data);
    PyBuffer_Release(&whole);
    return result;
}

/* ---- dump --json: row images straight to JSON text (rows/jsondump.py is the specification) --
 *
 * json_rows(out, data, pos, stop, op, prefix, plan, plan_after) appends the JSON line of every
 * row of one rows event's images in data[pos:stop] to the bytearray out, and returns stop.  A
 * plan (rows/jsondump.py's json_plan) describes the columns of one image: per present column
 * its kind, and its key as JSON text ('"name": ').  Anything this code does not do exactly as
 * the Python path would (text that is not valid UTF-8, a value running past the image, ...)
 * makes it return -1 with out untouched, and the caller does the event in Python.
 */
enum { JK_INT = 1, JK_YEAR = 2, JK_FLOAT = 3, JK_DOUBLE = 4, JK_UTF8 = 5, JK_ASCII = 6,
       JK_HEX = 7, JK_DATE = 8, JK_DATETIME2 = 9, JK_TIMESTAMP2 = 10, JK_TIME2 = 11,
       JK_DECIMAL = 12, JK_ENUM = 13, JK_SET = 14, JK_BITS = 15 };
#define JF_UNSIGNED 1
#define JF_RSTRIP 2
#define JSON_SLOW 1 /* status: leave the event to Python */

typedef struct {
    char *p;
    size_t len, cap;
} jbuf;

static jbuf jb;

static int jb_reserve(jbuf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + n)
        cap *= 2;
    char *q = realloc(b->p, cap);
    if (q == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = q;
    b->cap = cap;
    return 0;
}

#define JB_PUT(b, s, n)                                                                     \
    do {                                                                                    \
        if (jb_reserve((b), (n)))                                                           \
            return -1;                                                                      \
        memcpy((b)->p + (b)->len, (s), (n));                                                \
        (b)->len += (n);                                                                    \
    } while (0)
#define JB_LIT(b, lit) JB_PUT(b, lit, sizeof(lit) - 1)

static const char hexdigits[] = "0123456789abcdef";

/* A string's bytes as JSON text, escaped as json.dumps(..., ensure_ascii=False) does.
 * utf8: check the bytes are UTF-8 as Python's strict decoder takes it (else JSON_SLOW);
 * otherwise they must be ASCII. */
static int put_json_text(jbuf *b, const unsigned char *s, size_t n, int utf8)
{
    if (jb_reserve(b, n * 6 + 2))
        return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c >= 0x80) {
            size_t k;
            if (!utf8)
                return JSON_SLOW;
            if (c >= 0xC2 && c <= 0xDF) {
                k = 2;
            } else if (c >= 0xE0 && c <= 0xEF) {
                k = 3;
            } else if (c >= 0xF0 && c <= 0xF4) {
                k = 4;
            } else {
                return JSON_SLOW;
            }
            if (i + k > n)
                return JSON_SLOW;
            unsigned char c1 = s[i + 1];
            unsigned char lo = 0x80, hi = 0xBF;
            if (c == 0xE0)
                lo = 0xA0;
            else if (c == 0xED)
                hi = 0x9F; /* no UTF-16 surrogates */
            else if (c == 0xF0)
                lo = 0x90;
            else if (c == 0xF4)
                hi = 0x8F; /* nothing past U+10FFFF */
            if (c1 < lo || c1 > hi)
                return JSON_SLOW;
            for (size_t j = 2; j < k; j++)
                if ((s[i + j] & 0xC0) != 0x80)
                    return JSON_SLOW;
            memcpy(o, s + i, k);
            o += k;
            i += k;
            continue;
        }
        i++;
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hexdigits[c >> 4];
            *o++ = hexdigits[c & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* v in decimal, zero-padded to at least width digits (printf's %0*llu); returns the end. */
static char *digits(char *o, uint64_t v, int width)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < width)
        tmp[n++] = '0';
    while (n)
        *o++ = tmp[--n];
    return o;
}

static int put_uint(jbuf *b, unsigned long long v)
{
    if (jb_reserve(b, 24))
        return -1;
    b->len = (size_t)(digits(b->p + b->len, v, 1) - b->p);
    return 0;
}

static int put_int(jbuf *b, long long v)
{
    if (v >= 0)
        return put_uint(b, (unsigned long long)v);
    if (jb_reserve(b, 24))
        return -1;
    char *o = b->p + b->len;
    *o++ = '-';
    b->len = (size_t)(digits(o, 0 - (unsigned long long)v, 1) - b->p);
    return 0;
}

/* A double as json.dumps prints it: float.__repr__, or NaN / Infinity / -Infinity. */
static int put_double(jbuf *b, double v)
{
    if (isnan(v)) {
        JB_LIT(b, "NaN");
        return 0;
    }
    if (isinf(v)) {
        if (v > 0)
            JB_LIT(b, "Infinity");
        else
            JB_LIT(b, "-Infinity");
        return 0;
    }
    char *text = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (text == NULL)
        return -1;
    size_t n = strlen(text);
    int rc = jb_reserve(b, n);
    if (rc == 0) {
        memcpy(b->p + b->len, text, n);
        b->len += n;
    }
    PyMem_Free(text);
    return rc;
}

static uint64_t le_uint(const unsigned char *p, int width)
{
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t be_uint(const unsigned char *p, int width)
{
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v = v << 8 | p[i];
    return v;
}

/* Readers of one value of a row image at d[*pp], shared by json_rows and image_tuples: each
 * advances *pp and returns 0, or returns 1 (nothing read) when the value runs past stop. */

/* An integer of width bytes (1..8), sign-extended unless unsigned_. */
static int take_int(const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop, int width,
                    int unsigned_, uint64_t *u, long long *s)
{
    if (width < 1 || width > 8 || *pp + width > stop)
        return 1;
    uint64_t v = le_uint(d + *pp, width);
    *pp += width;
    *u = v;
    int shift = 64 - 8 * width;
    *s = unsigned_ ? 0 : shift ? (long long)(int64_t)(v << shift) >> shift : (long long)(int64_t)v;
    return 0;
}

/* A FLOAT (width 4) or DOUBLE (8) as a double. */
static int take_real(const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop, int width,
                     double *x)
{
    if (*pp + width > stop)
        return 1;
    uint64_t bits = le_uint(d + *pp, width);
    *pp += width;
    if (width == 4) {
        uint32_t b32 = (uint32_t)bits;
        float f;
        memcpy(&f, &b32, 4);
        *x = (double)f;
    } else {
        memcpy(x, &bits, 8);
    }
    return 0;
}

/* The bytes behind a little-endian length prefix of width bytes (1..4). */
static int take_prefixed(const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop, int width,
                         const unsigned char **s, size_t *n)
{
    Py_ssize_t p = *pp;
    if (width < 1 || width > 4 || p + width > stop)
        return 1;
    uint64_t len = le_uint(d + p, width);
    p += width;
    if (len > (uint64_t)(stop - p))
        return 1;
    *s = d + p;
    *n = (size_t)len;
    *pp = p + (Py_ssize_t)len;
    return 0;
}

/* The factor from a fraction of frac_len bytes to microseconds (temporal.py's _FRAC_SCALE). */
static const int64_t frac_scale[4] = {0, 10000, 100, 1};

/* "." and the first fsp digits of "%06lld" % micro (temporal.py's *_text), when fsp. */
static int put_fraction(jbuf *b, int64_t micro, int fsp)
{
    if (!fsp)
        return 0;
    char tmp[32];
    tmp[0] = '.';
    int n = (int)(digits(tmp + 1, (uint64_t)micro, 6) - (tmp + 1));
    JB_PUT(b, tmp, (size_t)(fsp < n ? fsp : n) + 1);
    return 0;
}

/* '"YYYY-MM-DD HH:MM:SS[.f]"' from calendar fields, as datetime_text prints them. */
static int put_datetime(jbuf *b, int64_t y, int64_t mo, int64_t d, int64_t h, int64_t mi,
                        int64_t s, int64_t micro, int fsp)
{
    /* every field >= 0 */
    if (jb_reserve(b, 6 * 24))
        return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    o = digits(o, (uint64_t)y, 4);
    *o++ = '-';
    o = digits(o, (uint64_t)mo, 2);
    *o++ = '-';
    o = digits(o, (uint64_t)d, 2);
    *o++ = ' ';
    o = digits(o, (uint64_t)h, 2);
    *o++ = ':';
    o = digits(o, (uint64_t)mi, 2);
    *o++ = ':';
    o = digits(o, (uint64_t)s, 2);
    b->len = (size_t)(o - b->p);
    if (put_fraction(b, micro, fsp))
        return -1;
    JB_LIT(b, "\"");
    return 0;
}

/* Days since 1970-01-01 (>= 0) to a civil date (H. Hinnant's days_from_civil, inverted). */
static void civil_from_days(int64_t z, int64_t *y, int64_t *m, int64_t *d)
{
    z += 719468;
    int64_t era = z / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = yoe + era * 400 + (*m <= 2);
}

/* A temporal value (temporal.py's readers and *_text): width = bytes of the fraction. */
static int put_temporal(jbuf *b, int kind, const unsigned char *v, int frac_len, int fsp)
{
    int64_t micro;
    switch (kind) {
    case JK_DATE: {
        uint64_t x = le_uint(v, 3);
        if (jb_reserve(b, 3 * 24))
            return -1;
        char *o = b->p + b->len;
        *o++ = '"';
        o = digits(o, x >> 9, 4);
        *o++ = '-';
        o = digits(o, x >> 5 & 15, 2);
        *o++ = '-';
        o = digits(o, x & 31, 2);
        *o++ = '"';
        b->len = (size_t)(o - b->p);
        return 0;
    }
    case JK_DATETIME2: {
        /* intpart - 0x8000000000 in two's complement: the masks below take bits < 42 */
        uint64_t x = be_uint(v, 5) - 0x8000000000ULL;
        uint64_t ym = x >> 22 & 0x1FFFF;
        micro = frac_len ? (int64_t)be_uint(v + 5, frac_len) * frac_scale[frac_len] : 0;
        return put_datetime(b, (int64_t)(ym / 13), (int64_t)(ym % 13), (int64_t)(x >> 17 & 31),
                            (int64_t)(x >> 12 & 31), (int64_t)(x >> 6 & 63), (int64_t)(x & 63),
                            micro, fsp);
    }
    case JK_TIMESTAMP2: {
        int64_t secs = (int64_t)be_uint(v, 4);
        micro = frac_len ? (int64_t)be_uint(v + 4, frac_len) * frac_scale[frac_len] : 0;
        if (secs == 0 && micro == 0)
            return put_datetime(b, 0, 0, 0, 0, 0, 0, 0, fsp);
        int64_t total = secs * 1000000 + micro;
        int64_t t = total / 1000000, y, mo, d;
        civil_from_days(t / 86400, &y, &mo, &d);
        int64_t r = t % 86400;
        return put_datetime(b, y, mo, d, r / 3600, r / 60 % 60, r % 60, total % 1000000, fsp);
    }
    case JK_TIME2: {
        int n = 3 + frac_len;
        int64_t value = (int64_t)be_uint(v, n) - ((int64_t)0x800000 << (8 * frac_len));
        int64_t sign = 1;
        if (value < 0) {
            sign = -1;
            value = -value;
        }
        int bits = 8 * frac_len;
        int64_t hms = value >> bits;
        micro = frac_len ? (value & (((int64_t)1 << bits) - 1)) * frac_scale[frac_len] : 0;
        int64_t secs = (hms >> 12 & 0x3FF) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63);
        int64_t total = sign * (secs * 1000000 + micro);
        if (jb_reserve(b, 4 * 24))
            return -1;
        char *o = b->p + b->len;
        *o++ = '"';
        if (total < 0) {
            *o++ = '-';
            total = -total;
        }
        int64_t s = total / 1000000, rest = s % 3600;
        o = digits(o, (uint64_t)(s / 3600), 2);
        *o++ = ':';
        o = digits(o, (uint64_t)(rest / 60), 2);
        *o++ = ':';
        o = digits(o, (uint64_t)(rest % 60), 2);
        b->len = (size_t)(o - b->p);
        if (put_fraction(b, total % 1000000, fsp))
            return -1;
        JB_LIT(b, "\"");
        return 0;
    }
    }
    return JSON_SLOW;
}

/* DECIMAL(precision, scale) as rows/decimal.py decodes it and format(value, "f") prints it:
 * groups of nine digits per four bytes (partial groups at both ends), the first bit the sign
 * (1 = positive), a negative number with every byte inverted.  A group holding more digits
 * than it may is left to Python, which raises. */
static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static int decimal_size(int precision, int scale)
{
    int intg = precision - scale;
    return dig2bytes[intg % 9] + intg / 9 * 4 + scale / 9 * 4 + dig2bytes[scale % 9];
}

static int put_decimal(jbuf *b, const unsigned char *v, int precision, int scale)
{
    static const uint32_t pow10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                       100000000, 1000000000};
    int size = decimal_size(precision, scale);
    unsigned char raw[80];
    if (size < 1 || size > (int)sizeof raw)
        return JSON_SLOW;
    int negative = !(v[0] & 0x80);
    for (int i = 0; i < size; i++)
        raw[i] = negative ? (unsigned char)~v[i] : v[i];
    raw[0] &= 0x7F;
    /* the groups in storage order: (bytes, digits) */
    int intg = precision - scale, pos = 0, started = 0;
    if (jb_reserve(b, (size_t)precision + 8))
        return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    if (negative)
        *o++ = '-';
    int ngroups = (intg % 9 ? 1 : 0) + intg / 9;
    for (int g = 0; g < ngroups; g++) {
        int ndigits = (g == 0 && intg % 9) ? intg % 9 : 9;
        int nbytes = dig2bytes[ndigits];
        uint32_t x = (uint32_t)be_uint(raw + pos, nbytes);
        pos += nbytes;
        if (x >= pow10[ndigits])
            return JSON_SLOW;
        if (started) {
            o = digits(o, x, 9);
        } else if (x) {
            o = digits(o, x, 1);
            started = 1;
        }
    }
    if (!started)
        *o++ = '0';
    if (scale) {
        *o++ = '.';
        for (int left = scale; left > 0; left -= 9) {
            int ndigits = left >= 9 ? 9 : left;
            int nbytes = dig2bytes[ndigits];
            uint32_t x = (uint32_t)be_uint(raw + pos, nbytes);
            pos += nbytes;
            if (x >= pow10[ndigits])
                return JSON_SLOW;
            o = digits(o, x, ndigits);
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* A plan (rows/plans.py): a 2-byte column count, then per column of the image its item. */
typedef struct {
    int kind, flags, width;
    size_t arg; /* BINARY's padded length, a temporal's fsp, a DECIMAL's precision << 8 | scale */
    const unsigned char *key; /* the column's JSON key */
    size_t klen;
} plan_item;

/* An image's start: the plan's column count and the image's NULL bitmap at d[*pp], which
 * it steps over; 0, or 1 when either is short. */
static int image_head(const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop,
                      const unsigned char *plan, Py_ssize_t plan_len, unsigned *ncols,
                      const unsigned char **nulls)
{
    if (plan_len < 2)
        return 1;
    *ncols = plan[0] | plan[1] << 8;
    Py_ssize_t nb = (*ncols + 7) / 8;
    if (*ncols == 0 || *pp + nb > stop)
        return 1;
    *nulls = d + *pp;
    *pp += nb;
    return 0;
}

/* The plan's item at *q, which it steps over (not ENUM's and SET's names); 0, or 1 when
 * the plan ends first. */
static int next_item(const unsigned char **q, const unsigned char *plan_end, plan_item *it)
{
    const unsigned char *c = *q;
    if (c + 7 > plan_end)
        return 1;
    it->kind = c[0];
    it->flags = c[1];
    it->width = c[2];
    it->arg = c[3] | (size_t)c[4] << 8;
    it->klen = c[5] | (size_t)c[6] << 8;
    it->key = c + 7;
    *q = c + 7 + it->klen;
    return *q > plan_end;
}

/* One image: '{"key": value, ...}'.  Returns 0, -1 (error set) or JSON_SLOW. */
static int put_image(jbuf *b, const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop,
                     const unsigned char *plan, Py_ssize_t plan_len)
{
    Py_ssize_t p = *pp;
    unsigned ncols;
    const unsigned char *nulls;
    if (image_head(d, &p, stop, plan, plan_len, &ncols, &nulls))
        return JSON_SLOW;
    const unsigned char *q = plan + 2, *plan_end = plan + plan_len;
    JB_LIT(b, "{");
    for (unsigned k = 0; k < ncols; k++) {
        plan_item it;
        if (next_item(&q, plan_end, &it))
            return JSON_SLOW;
        int kind = it.kind, flags = it.flags, width = it.width;
        size_t pad = it.arg, klen = it.klen;
        const unsigned char *key = it.key;
        /* ENUM and SET: the names follow, a 2-byte count, then a 2-byte length and the
         * name as JSON text without its quotes, each */
        const unsigned char *names = NULL;
        unsigned nnames = 0;
        if (kind == JK_ENUM || kind == JK_SET) {
            if (q + 2 > plan_end)
                return JSON_SLOW;
            nnames = q[0] | q[1] << 8;
            names = q + 2;
            q += 2;
            for (unsigned i = 0; i < nnames; i++) {
                if (q + 2 > plan_end)
                    return JSON_SLOW;
                q += 2 + (q[0] | q[1] << 8);
            }
        }
        if (q > plan_end)
            return JSON_SLOW;
        if (k)
            JB_LIT(b, ", ");
        JB_PUT(b, key, klen);
        if (nulls[k >> 3] >> (k & 7) & 1) {
            JB_LIT(b, "null");
            continue;
        }
        int rc = 0;
        switch (kind) {
        case JK_INT: {
            uint64_t u;
            long long v;
            if (take_int(d, &p, stop, width, flags & JF_UNSIGNED, &u, &v))
                return JSON_SLOW;
            rc = flags & JF_UNSIGNED ? put_uint(b, u) : put_int(b, v);
            break;
        }
        case JK_YEAR:
            if (p + 1 > stop)
                return JSON_SLOW;
            rc = put_int(b, d[p] ? d[p] + 1900 : 0);
            p += 1;
            break;
        case JK_FLOAT:
        case JK_DOUBLE: {
            double v;
            if (take_real(d, &p, stop, kind == JK_FLOAT ? 4 : 8, &v))
                return JSON_SLOW;
            rc = put_double(b, v);
            break;
        }
        case JK_UTF8:
        case JK_ASCII:
        case JK_HEX: {
            const unsigned char *s;
            size_t n;
            if (take_prefixed(d, &p, stop, width, &s, &n))
                return JSON_SLOW;
            if (kind == JK_HEX) {
                size_t total = n > pad ? n : pad;
                if (jb_reserve(b, 2 * total + 12))
                    return -1;
                char *o = b->p + b->len;
                memcpy(o, "{\"hex\": \"", 9);
                o += 9;
                for (size_t i = 0; i < total; i++) {
                    unsigned char c = i < n ? s[i] : 0;
                    *o++ = hexdigits[c >> 4];
                    *o++ = hexdigits[c & 15];
                }
                *o++ = '"';
                *o++ = '}';
                b->len = (size_t)(o - b->p);
                break;
            }
            if (flags & JF_RSTRIP)
                while (n && s[n - 1] == ' ')
                    n--;
            rc = put_json_text(b, s, (size_t)n, kind == JK_UTF8);
            break;
        }
        case JK_DATE:
        case JK_DATETIME2:
        case JK_TIMESTAMP2:
        case JK_TIME2: {
            /* width: bytes of the fraction; pad: the column's fsp */
            static const int base[] = {3, 5, 4, 3};
            int size = base[kind - JK_DATE] + (kind == JK_DATE ? 0 : width);
            if (width > 3 || pad > 6 || p + size > stop)
                return JSON_SLOW;
            rc = put_temporal(b, kind, d + p, width, (int)pad);
            p += size;
            break;
        }
        case JK_DECIMAL: {
            /* width: the value's bytes as the table map says; pad: precision << 8 | scale */
            int precision = (int)(pad >> 8), scale = (int)(pad & 0xFF);
            if (precision < 1 || precision > 65 || scale > precision ||
                decimal_size(precision, scale) > width || p + width > stop)
                return JSON_SLOW;
            rc = put_decimal(b, d + p, precision, scale);
            p += width;
            break;
        }
        case JK_BITS: /* BIT(n): big-endian, unsigned */
            if (width < 1 || width > 8 || p + width > stop)
                return JSON_SLOW;
            rc = put_uint(b, be_uint(d + p, width));
            p += width;
            break;
        case JK_ENUM:
        case JK_SET: {
            if (width < 1 || width > 8 || p + width > stop)
                return JSON_SLOW;
            uint64_t x = le_uint(d + p, width);
            p += width;
            if (kind == JK_ENUM ? x >= nnames : (nnames < 64 && x >> nnames))
                return JSON_SLOW; /* Python raises */
            JB_LIT(b, "\"");
            const unsigned char *n = names;
            int first = 1;
            for (unsigned i = 0; i < nnames; i++) {
                size_t len = n[0] | (size_t)n[1] << 8;
                if (kind == JK_ENUM ? i == x : (x >> i & 1)) {
                    if (!first)
                        JB_LIT(b, ",");
                    first = 0;
                    JB_PUT(b, n + 2, len);
                }
                n += 2 + len;
            }
            JB_LIT(b, "\"");
            break;
        }
        default:
            return JSON_SLOW;
        }
        if (rc)
            return rc;
    }
    JB_LIT(b, "}");
    *pp = p;
    return 0;
}

static int json_rows_into(jbuf *b, const unsigned char *d, Py_ssize_t p, Py_ssize_t stop,
                          long op, const char *prefix, Py_ssize_t prefix_len,
                          const unsigned char *plan, Py_ssize_t plan_len,
                          const unsigned char *plan2, Py_ssize_t plan2_len)
{
    int rc;
    while (p < stop) {
        JB_PUT(b, prefix, (size_t)prefix_len);
        if (op == 0) { /* insert */
            JB_LIT(b, "null, \"after\": ");
            if ((rc = put_image(b, d, &p, stop, plan, plan_len)))
                return rc;
            JB_LIT(b, "}\n");
        } else if (op == 2) { /* delete */
            if ((rc = put_image(b, d, &p, stop, plan, plan_len)))
                return rc;
            JB_LIT(b, ", \"after\": null}\n");
        } else {
            if (plan2 == NULL)
                return JSON_SLOW;
            if ((rc = put_image(b, d, &p, stop, plan, plan_len)))
                return rc;
            JB_LIT(b, ", \"after\": ");
            if ((rc = put_image(b, d, &p, stop, plan2, plan2_len)))
                return rc;
            JB_LIT(b, "}\n");
        }
    }
    return 0;
}

/* json_rows(out, data, pos, stop, op, prefix, plan, plan_after) -> stop, or -1 (do it in
 * Python); op: 0 insert, 1 update, 2 delete; plan_after None but for updates. */
static PyObject *json_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "json_rows takes 8 arguments");
        return NULL;
    }
    PyObject *out = args[0];
    if (!PyByteArray_Check(out) || !PyBytes_Check(args[5]) || !PyBytes_Check(args[6]) ||
        (args[7] != Py_None && !PyBytes_Check(args[7]))) {
        PyErr_SetString(PyExc_TypeError, "json_rows: bad argument types");
        return NULL;
    }
    Py_ssize_t p = PyLong_AsSsize_t(args[2]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[3]);
    long op = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[1], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    if (p < 0 || stop > data.len || p > stop) {
        PyBuffer_Release(&data);
        return PyLong_FromLong(-1);
    }
    jb.len = 0;
    int rc = json_rows_into(
        &jb, data.buf, p, stop, op, PyBytes_AS_STRING(args[5]), PyBytes_GET_SIZE(args[5]),
        (const unsigned char *)PyBytes_AS_STRING(args[6]), PyBytes_GET_SIZE(args[6]),
        args[7] == Py_None ? NULL : (const unsigned char *)PyBytes_AS_STRING(args[7]),
        args[7] == Py_None ? 0 : PyBytes_GET_SIZE(args[7]));
    PyBuffer_Release(&data);
    if (rc < 0)
        return NULL;
    if (rc == JSON_SLOW)
        return PyLong_FromLong(-1);
    Py_ssize_t n0 = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, n0 + (Py_ssize_t)jb.len) < 0)
        return NULL;
    memcpy(PyByteArray_AS_STRING(out) + n0, jb.p, jb.len);
    return PyLong_FromSsize_t(stop);
}

/* ---- row images as the decoders' tuples (rows/events.py's row_images is the specification:
 * the compiled decoders of rows/compiler.py).
 *
 * image_tuples(data, p, stop, op, plan, plan_after) -> the event's (before, after) pairs, or
 * None to leave the whole event to Python: a column kind other than integers, YEAR, FLOAT,
 * DOUBLE, BIT, text (UTF-8, or ASCII in an ASCII-compatible single-byte charset) and bytes;
 * text that is not ASCII in a single-byte charset; an image that runs past the event (whose
 * error the Python decoder raises).  The plans are json_plan's (rows/plans.py), of images of
 * every column of the table, so a tuple holds one value per column.
 */
#define TUPLE_SLOW ((PyObject *)1)

static PyObject *tuple_value(int kind, int flags, int width, size_t pad,
                             const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop)
{
    Py_ssize_t p = *pp;
    PyObject *v;
    switch (kind) {
    case JK_INT: {
        uint64_t u;
        long long x;
        if (take_int(d, &p, stop, width, flags & JF_UNSIGNED, &u, &x))
            return TUPLE_SLOW;
        v = flags & JF_UNSIGNED ? PyLong_FromUnsignedLongLong(u) : PyLong_FromLongLong(x);
        break;
    }
    case JK_YEAR:
        if (p + 1 > stop)
            return TUPLE_SLOW;
        v = PyLong_FromLong(d[p] ? d[p] + 1900 : 0);
        p += 1;
        break;
    case JK_FLOAT:
    case JK_DOUBLE: {
        double x;
        if (take_real(d, &p, stop, kind == JK_FLOAT ? 4 : 8, &x))
            return TUPLE_SLOW;
        v = PyFloat_FromDouble(x);
        break;
    }
    case JK_BITS:
        if (width < 1 || width > 8 || p + width > stop)
            return TUPLE_SLOW;
        v = PyLong_FromUnsignedLongLong(be_uint(d + p, width));
        p += width;
        break;
    case JK_UTF8:
    case JK_ASCII:
    case JK_HEX: {
        const unsigned char *s;
        size_t n;
        if (take_prefixed(d, &p, stop, width, &s, &n))
            return TUPLE_SLOW;
        if (kind == JK_HEX) {
            /* bytes; BINARY(n) padded back to n with 0x00 (pad) */
            size_t total = n > pad ? n : pad;
            v = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
            if (v != NULL) {
                memcpy(PyBytes_AS_STRING(v), s, n);
                memset(PyBytes_AS_STRING(v) + n, 0, total - n);
            }
            break;
        }
        /* CHAR: trailing spaces are not part of the value; 0x20 is a space in both */
        if (flags & JF_RSTRIP)
            while (n && s[n - 1] == ' ')
                n--;
        if (kind == JK_UTF8) {
            v = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogateescape");
            break;
        }
        for (size_t i = 0; i < n; i++)
            if (s[i] >= 0x80)
                return TUPLE_SLOW; /* the charset's own table: Python */
        v = PyUnicode_New((Py_ssize_t)n, 127);
        if (v != NULL)
            memcpy(PyUnicode_DATA(v), s, n);
        break;
    }
    default:
        return TUPLE_SLOW;
    }
    *pp = p;
    return v;
}

/* One image as a tuple, or NULL (error set) or TUPLE_SLOW. */
static PyObject *tuple_image(const unsigned char *d, Py_ssize_t *pp, Py_ssize_t stop,
                             const unsigned char *plan, Py_ssize_t plan_len)
{
    Py_ssize_t p = *pp;
    unsigned ncols;
    const unsigned char *nulls;
    if (image_head(d, &p, stop, plan, plan_len, &ncols, &nulls))
        return TUPLE_SLOW;
    const unsigned char *q = plan + 2, *plan_end = plan + plan_len;
    PyObject *row = PyTuple_New(ncols);
    if (row == NULL)
        return NULL;
    for (unsigned k = 0; k < ncols; k++) {
        plan_item it;
        if (next_item(&q, plan_end, &it) || it.kind == JK_ENUM || it.kind == JK_SET)
            goto slow; /* (their names are JSON text in the plan) */
        PyObject *v;
        if (nulls[k >> 3] >> (k & 7) & 1) {
            v = Py_None;
            Py_INCREF(v);
        } else {
            v = tuple_value(it.kind, it.flags, it.width, it.arg, d, &p, stop);
            if (v == TUPLE_SLOW)
                goto slow;
            if (v == NULL) {
                Py_DECREF(row);
                return NULL;
            }
        }
        PyTuple_SET_ITEM(row, k, v);
    }
    *pp = p;
    return row;
slow:
    Py_DECREF(row);
    return TUPLE_SLOW;
}

/* A rows event's (before, after) images in d[p:stop] (op 0 insert, 1 update, 2 delete):
 * a new list, Py_None (a new reference) when a value needs the Python decoders, or NULL with
 * an error set. */
static PyObject *images_of(const unsigned char *d, Py_ssize_t p, Py_ssize_t stop, int op,
                           PyObject *plan, PyObject *plan_after)
{
    const unsigned char *pl = (const unsigned char *)PyBytes_AS_STRING(plan);
    Py_ssize_t pl_len = PyBytes_GET_SIZE(plan);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (p < stop) {
        PyObject *first = tuple_image(d, &p, stop, pl, pl_len), *second = NULL, *pair;
        if (first == NULL || first == TUPLE_SLOW)
            goto give_up;
        if (op == 1) {
            second = tuple_image(d, &p, stop, (const unsigned char *)PyBytes_AS_STRING(plan_after),
                                 PyBytes_GET_SIZE(plan_after));
            if (second == NULL || second == TUPLE_SLOW) {
                Py_DECREF(first);
                first = second;
                goto give_up;
            }
            pair = PyTuple_Pack(2, first, second);
            Py_DECREF(second);
        } else if (op == 0) {
            pair = PyTuple_Pack(2, Py_None, first);
        } else {
            pair = PyTuple_Pack(2, first, Py_None);
        }
        Py_DECREF(first);
        if (pair == NULL || PyList_Append(out, pair) < 0) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
        continue;
    give_up:
        Py_DECREF(out);
        if (first == TUPLE_SLOW) {
            Py_INCREF(Py_None);
            return Py_None;
        }
        return NULL;
    }
    return out;
}

static PyObject *image_tuples(PyObject *self, PyObject *args)
{
    Py_buffer data;
    Py_ssize_t p, stop;
    int op;
    PyObject *plan, *plan_after;
    if (!PyArg_ParseTuple(args, "y*nniSO", &data, &p, &stop, &op, &plan, &plan_after))
        return NULL;
    PyObject *out;
    if (p < 0 || stop > data.len || p > stop || op < 0 || op > 2 ||
        (op == 1 && !PyBytes_Check(plan_after))) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = images_of(data.buf, p, stop, op, plan, plan_after);
    }
    PyBuffer_Release(&data);
    return out;
}

/* ---- the read tasks' compaction loop (spark/compact.py's fold_images_python is the
 * specification): each image's key, its last operation recorded per key. ---------------- */

/* 1: *out is the key's values; 0: not all int, str or bytes (or no such column): the
 * caller's Python takes the image; -1: an error is set. */
static int plain_key(PyObject *image, PyObject *key, PyObject **out)
{
    if (!PyTuple_CheckExact(image))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(key), size = PyTuple_GET_SIZE(image);
    PyObject *values = PyTuple_New(n);
    if (values == NULL)
        return -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *index = PyTuple_GET_ITEM(key, j);
        Py_ssize_t at = PyLong_CheckExact(index) ? PyLong_AsSsize_t(index) : -1;
        if (at == -1 && PyErr_Occurred())
            PyErr_Clear();
        PyObject *v = (at >= 0 && at < size) ? PyTuple_GET_ITEM(image, at) : NULL;
        if (v == NULL || !(PyLong_CheckExact(v) || PyUnicode_CheckExact(v) ||
                           PyBytes_CheckExact(v))) {
            Py_DECREF(values);
            return 0;
        }
        Py_INCREF(v);
        PyTuple_SET_ITEM(values, j, v);
    }
    *out = values;
    return 1;
}

/* last[key] = (position, image) */
static int record_last(PyObject *last, PyObject *key, PyObject *position, PyObject *image)
{
    PyObject *entry = PyTuple_Pack(2, position, image);
    if (entry == NULL)
        return -1;
    int rc = PyDict_SetItem(last, key, entry);
    Py_DECREF(entry);
    return rc;
}

static PyObject *absent_value(void)
{
    static PyObject *absent = NULL; /* rows/compiler.py's ABSENT: a singleton, kept */
    if (absent == NULL) {
        PyObject *compiler = PyImport_ImportModule("binrelay.rows.compiler");
        if (compiler == NULL)
            return NULL;
        absent = PyObject_GetAttrString(compiler, "ABSENT");
        Py_DECREF(compiler);
    }
    return absent;
}

/* The images pairs[0:n] folded into last; how many were taken, or -1 with an error set. */
static Py_ssize_t fold_pairs(PyObject *last, PyObject **pairs, Py_ssize_t n, int op,
                             PyObject *key, PyObject *seq, PyObject *file_no, PyObject *offset,
                             Py_ssize_t row)
{
    PyObject *absent = absent_value();
    if (absent == NULL)
        return -1;
    Py_ssize_t i;
    for (i = 0; i < n; i++) {
        PyObject *pair = pairs[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
            break;
        PyObject *before = PyTuple_GET_ITEM(pair, 0), *after = PyTuple_GET_ITEM(pair, 1);
        PyObject *ka = NULL, *kb = NULL;
        int r;
        if (op == 2) {
            r = plain_key(before, key, &kb);
        } else {
            if (!PyTuple_CheckExact(after))
                break;
            Py_ssize_t width = PyTuple_GET_SIZE(after), c;
            for (c = 0; c < width && PyTuple_GET_ITEM(after, c) != absent; c++)
                ;
            if (c < width)
                break;
            r = plain_key(after, key, &ka);
            if (r == 1 && op == 1) {
                r = plain_key(before, key, &kb);
                if (r != 1)
                    Py_CLEAR(ka);
            }
        }
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        PyObject *number = PyLong_FromSsize_t(row + i);
        PyObject *position = number ? PyTuple_Pack(4, seq, file_no, offset, number) : NULL;
        Py_XDECREF(number);
        int rc = position == NULL ? -1 : 0;
        if (rc == 0 && kb != NULL) {
            int moved = ka == NULL ? 1 : PyObject_RichCompareBool(ka, kb, Py_NE);
            rc = moved < 0 ? -1 : moved ? record_last(last, kb, position, Py_None) : 0;
        }
        if (rc == 0 && ka != NULL)
            rc = record_last(last, ka, position, after);
        Py_XDECREF(position);
        Py_XDECREF(ka);
        Py_XDECREF(kb);
        if (rc < 0)
            return -1;
    }
    return i;
}

static PyObject *fold_images(PyObject *self, PyObject *args)
{
    PyObject *last, *images, *key, *seq, *file_no, *offset;
    int op;
    Py_ssize_t row;
    if (!PyArg_ParseTuple(args, "O!OiO!OOOn", &PyDict_Type, &last, &images, &op,
                          &PyTuple_Type, &key, &seq, &file_no, &offset, &row))
        return NULL;
    if (op < 0 || op > 2)
        return PyLong_FromLong(0);
    PyObject *items = PySequence_Fast(images, "images must be a sequence");
    if (items == NULL)
        return NULL;
    Py_ssize_t taken = fold_pairs(last, PySequence_Fast_ITEMS(items),
                                  PySequence_Fast_GET_SIZE(items), op, key, seq, file_no,
                                  offset, row);
    Py_DECREF(items);
    return taken < 0 ? NULL : PyLong_FromSsize_t(taken);
}

/* fold_events(buf, events, i, upto, checksum_len, cache, tables, ended, fast, layouts, seq,
 *             file_no, file_offset, counts) -> (j, ended, gtid_at)
 *
 * The read task's per-event loop (rows/scanner.py's _scan with spark/compact.py's
 * compact_segment is the specification) for the events of a walk (walk_events' list) from
 * index i to upto (the caller lets other threads run between calls): a MariaDB GTID event
 * is noted (gtid_at: where the last one starts, else -1),
 * a TABLE_MAP whose body the decoder's cache holds (cache: body -> TableMap) is added to
 * the statement's tables (tables: table id -> TableMap; ended: a statement ended, so its
 * ids are forgotten first), and a rows event of a table in fast (id(TableMap) -> (TableMap,
 * last, key indexes, columns, plan)) with every column in its images, an event type in
 * layouts (type -> (op, v2, table id length, post-header bytes to skip)) and images the
 * plan decodes and fold_pairs takes whole, is folded into last and counted (counts[op]).
 * It stops at the first event it does not take (j): Python takes that one, as it would
 * have taken every event; what it already folded of it, folded again, ends the same. */
static int full_bitmap(const unsigned char *b, Py_ssize_t ncols)
{
    Py_ssize_t whole = ncols >> 3;
    for (Py_ssize_t k = 0; k < whole; k++)
        if (b[k] != 0xFF)
            return 0;
    return (ncols & 7) == 0 || b[whole] == (1u << (ncols & 7)) - 1;
}

static int list_add(PyObject *counts, int op, Py_ssize_t n)
{
    PyObject *was = PyList_GET_ITEM(counts, op);
    Py_ssize_t v = PyLong_AsSsize_t(was);
    if (v == -1 && PyErr_Occurred())
        return -1;
    PyObject *now = PyLong_FromSsize_t(v + n);
    if (now == NULL)
        return -1;
    PyList_SET_ITEM(counts, op, now);
    Py_DECREF(was);
    return 0;
}

/* dict[key] (borrowed) into *out, taking the reference to key (NULL: an error is set);
 * 1 found, 0 not there, -1 an error. */
static int get_taking_key(PyObject *dict, PyObject *key, PyObject **out)
{
    if (key == NULL)
        return -1;
    *out = PyDict_GetItemWithError(dict, key);
    Py_DECREF(key);
    return *out != NULL ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* 1: folded; 0: Python takes the event; -1: an error is set. */
static int fold_rows_event(const unsigned char *d, Py_ssize_t pos, Py_ssize_t body_end,
                           PyObject *layout, PyObject *tables, PyObject *fast, PyObject *seq,
                           PyObject *file_no, Py_ssize_t offset, PyObject *counts, int *ended)
{
    if (!PyTuple_CheckExact(layout) || PyTuple_GET_SIZE(layout) != 4)
        return 0;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(layout, 0));
    long v2 = PyLong_AsLong(PyTuple_GET_ITEM(layout, 1));
    long id_len = PyLong_AsLong(PyTuple_GET_ITEM(layout, 2));
    long skip = PyLong_AsLong(PyTuple_GET_ITEM(layout, 3));
    if (PyErr_Occurred())
        return -1;
    if (op < 0 || op > 2 || id_len < 1 || id_len > 8 || skip < 0)
        return 0;
    Py_ssize_t p0 = pos + 19, p = p0 + id_len + 2;
    if (p + 1 > body_end)
        return 0;
    uint64_t table_id = le_uint(d + p0, (int)id_len);
    unsigned flags = d[p - 2] | (unsigned)d[p - 1] << 8;
    if (v2) {
        if (p + 2 > body_end)
            return 0;
        unsigned extra_len = d[p] | (unsigned)d[p + 1] << 8;
        if (extra_len < 2 || p + (Py_ssize_t)extra_len > body_end)
            return 0;
        p += extra_len;
    }
    p += skip;
    if (p + 1 > body_end || d[p] >= 0xFB)
        return 0;
    Py_ssize_t ncols = d[p++], nbytes = (ncols + 7) >> 3;
    /* (An update logs two bitmaps: before and after.) */
    for (int bitmaps = op == 1 ? 2 : 1; bitmaps > 0; bitmaps--, p += nbytes)
        if (p + nbytes > body_end || !full_bitmap(d + p, ncols))
            return 0;
    PyObject *table, *entry;
    int found = get_taking_key(tables, PyLong_FromUnsignedLongLong(table_id), &table);
    if (found == 1)
        found = get_taking_key(fast, PyLong_FromVoidPtr(table), &entry);
    if (found != 1)
        return found;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 5 ||
        PyTuple_GET_ITEM(entry, 0) != table || !PyDict_CheckExact(PyTuple_GET_ITEM(entry, 1)) ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(entry, 2)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(entry, 4)))
        return 0;
    Py_ssize_t columns = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 3));
    if (columns == -1 && PyErr_Occurred())
        return -1;
    if (columns != ncols)
        return 0;
    Py_INCREF(entry); /* (held while the images are made: a collection may run meanwhile) */
    PyObject *plan = PyTuple_GET_ITEM(entry, 4);
    PyObject *images = images_of(d, p, body_end, (int)op, plan, plan);
    if (images == NULL || images == Py_None) {
        Py_DECREF(entry);
        if (images == Py_None) {
            Py_DECREF(images);
            return 0;
        }
        /* A corrupt image: Python reads it again and says what is wrong, and where. */
        if (PyErr_ExceptionMatches(PyExc_MemoryError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(images);
    PyObject *where = PyLong_FromSsize_t(offset);
    Py_ssize_t taken = where == NULL ? -1 :
        fold_pairs(PyTuple_GET_ITEM(entry, 1), PySequence_Fast_ITEMS(images), n, (int)op,
                   PyTuple_GET_ITEM(entry, 2), seq, file_no, where, 0);
    Py_XDECREF(where);
    Py_DECREF(images);
    Py_DECREF(entry);
    if (taken < 0)
        return -1;
    if (taken < n)
        return 0;
    if (list_add(counts, (int)op, n) < 0)
        return -1;
    if (flags & 1) /* STMT_END_F */
        *ended = 1;
    return 1;
}

static PyObject *fold_events(PyObject *self, PyObject *args)
{
    Py_buffer data;
    PyObject *events, *cache, *tables, *fast, *layouts, *seq, *file_no, *counts;
    Py_ssize_t i, upto, checksum_len, file_offset;
    int ended;
    if (!PyArg_ParseTuple(args, "y*O!nnnO!O!pO!O!OOnO!", &data, &PyList_Type, &events, &i,
                          &upto, &checksum_len, &PyDict_Type, &cache, &PyDict_Type, &tables,
                          &ended, &PyDict_Type, &fast, &PyDict_Type, &layouts, &seq, &file_no,
                          &file_offset, &PyList_Type, &counts))
        return NULL;
    static PyObject *table_id_name = NULL;
    if (table_id_name == NULL && (table_id_name = PyUnicode_InternFromString("table_id")) == NULL)
        goto error;
    if (PyList_GET_SIZE(counts) != 3 || i < 0 || checksum_len < 0 || checksum_len > 4) {
        PyErr_SetString(PyExc_ValueError, "bad counts, index or checksum length");
        goto error;
    }
    const unsigned char *d = data.buf;
    Py_ssize_t n = PyList_GET_SIZE(events), gtid_at = -1;
    if (upto < n)
        n = upto;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(events, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3)
            break;
        long type = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
        Py_ssize_t ev_end = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred())
            goto error;
        Py_ssize_t body_end = ev_end - checksum_len;
        if (pos < 0 || ev_end > data.len || body_end < pos + 19)
            break;
        if (type == GTID_EVENT) {
            if (body_end - pos < 19 + 13)
                break;
            gtid_at = pos;
            continue;
        }
        if (type == 19) { /* TABLE_MAP_EVENT */
            PyObject *body = PyBytes_FromStringAndSize((const char *)d + pos + 19,
                                                       body_end - pos - 19);
            if (body == NULL)
                goto error;
            PyObject *table = PyDict_GetItemWithError(cache, body);
            Py_XINCREF(table);
            Py_DECREF(body);
            if (table == NULL) {
                if (PyErr_Occurred())
                    goto error;
                break;
            }
            PyObject *id = PyObject_GetAttr(table, table_id_name);
            if (id == NULL) {
                Py_DECREF(table);
                goto error;
            }
            if (ended) {
                PyDict_Clear(tables);
                ended = 0;
            }
            int rc = PyDict_SetItem(tables, id, table);
            Py_DECREF(id);
            Py_DECREF(table);
            if (rc < 0)
                goto error;
            continue;
        }
        PyObject *layout;
        int found = get_taking_key(layouts, PyLong_FromLong(type), &layout);
        if (found < 0)
            goto error;
        if (found == 0)
            break;
        int r = fold_rows_event(d, pos, body_end, layout, tables, fast, seq, file_no,
                                file_offset + pos, counts, &ended);
        if (r < 0)
            goto error;
        if (r == 0)
            break;
    }
    PyBuffer_Release(&data);
    return Py_BuildValue("(nNn)", i, PyBool_FromLong(ended), gtid_at);
error:
    PyBuffer_Release(&data);
    return NULL;
}

/* ---- the keyed path's multi-row statements (apply/sql.py's render_rows_python is the
 * specification): rows rendered as SQL literals exactly as PyMySQL escapes parameters on a
 * session with backslash escapes, without a Python string per value.
 *
 * render_rows(rows, start, max_rows, max_bytes, bare) -> (end, text): rows[start:end] as
 * "(v, v), (v, v)" (bare: one-value rows as "v, v"), as many as fit in max_rows rows and
 * max_bytes bytes of UTF-8 (each row counted with the 2 bytes of its ", "), one at least.
 */
static jbuf rb;

static const unsigned char sql_escape[256] = {
    [0] = '0', ['\n'] = 'n', ['\r'] = 'r', [0x1a] = 'Z', ['\\'] = '\\', ['"'] = '"',
    ['\''] = '\'',
};

/* s[0:n] with each byte `escape` names as a backslash and that letter; room for 2n bytes
   reserved by the caller. */
static void put_escaped(jbuf *b, const unsigned char *s, Py_ssize_t n,
                        const unsigned char escape[256])
{
    char *o = b->p + b->len;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i], e = escape[c];
        if (e) {
            *o++ = '\\';
            *o++ = (char)e;
        } else {
            *o++ = (char)c;
        }
    }
    b->len = (size_t)(o - b->p);
}

/* decimal.Decimal and the format spec "f", looked up on first need. */
static PyObject *decimal_type, *decimal_spec;

/* 1 if v is a decimal.Decimal, 0 if not, -1 with an exception set. */
static int decimal_check(PyObject *v)
{
    if (decimal_type == NULL) {
        PyObject *mod = PyImport_ImportModule("decimal");
        if (mod == NULL)
            return -1;
        decimal_type = PyObject_GetAttrString(mod, "Decimal");
        Py_DECREF(mod);
        if (decimal_type == NULL)
            return -1;
        decimal_spec = PyUnicode_FromString("f");
        if (decimal_spec == NULL) {
            Py_CLEAR(decimal_type);
            return -1;
        }
    }
    return (PyObject *)Py_TYPE(v) == decimal_type;
}

/* A number's text (a new reference, released here: NULL if making it failed) written as
   it is, once it is seen to be digits, a point and a sign only.  0, or -1 with an
   exception set. */
static int put_number(jbuf *b, PyObject *text, PyObject *v)
{
    if (text == NULL)
        return -1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int rc = s == NULL ? -1 : 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-')) {
            PyErr_Format(PyExc_TypeError, "not a number a column holds: %R", v);
            rc = -1;
        }
    }
    if (rc == 0 && jb_reserve(b, (size_t)n))
        rc = -1;
    if (rc == 0) {
        memcpy(b->p + b->len, s, (size_t)n);
        b->len += (size_t)n;
    }
    Py_DECREF(text);
    return rc;
}

/* A bool or an int as its digits: 0, -1 with an exception set, or 1 (not one of them). */
static int put_integer(jbuf *b, PyObject *v)
{
    if (v == Py_True || v == Py_False) {
        JB_PUT(b, v == Py_True ? "1" : "0", 1);
        return 0;
    }
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (!overflow) {
            char tmp[24];
            int n = snprintf(tmp, sizeof tmp, "%lld", x);
            JB_PUT(b, tmp, (size_t)n);
            return 0;
        }
        return put_number(b, PyObject_Str(v), v);
    }
    return 1;
}

/* 0, or -1 with an exception set; *ascii cleared when a byte >= 0x80 went out. */
static int put_sql_value(jbuf *b, PyObject *v, int *ascii)
{
    if (v == Py_None) {
        JB_LIT(b, "NULL");
        return 0;
    }
    int done = put_integer(b, v);
    if (done != 1)
        return done;
    if (PyUnicode_CheckExact(v)) {
        PyObject *encoded = NULL;
        const unsigned char *s;
        Py_ssize_t n;
        if (PyUnicode_IS_ASCII(v)) {
            s = PyUnicode_DATA(v);
            n = PyUnicode_GET_LENGTH(v);
        } else {
            encoded = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
            if (encoded == NULL)
                return -1;
            s = (const unsigned char *)PyBytes_AS_STRING(encoded);
            n = PyBytes_GET_SIZE(encoded);
            *ascii = 0;
        }
        int rc = jb_reserve(b, 2 * (size_t)n + 2);
        if (rc == 0) {
            b->p[b->len++] = '\'';
            put_escaped(b, s, n, sql_escape);
            b->p[b->len++] = '\'';
        }
        Py_XDECREF(encoded);
        return rc;
    }
    if (PyBytes_CheckExact(v) || PyByteArray_CheckExact(v)) {
        const unsigned char *s = (const unsigned char *)(PyBytes_CheckExact(v)
            ? PyBytes_AS_STRING(v) : PyByteArray_AS_STRING(v));
        Py_ssize_t n = PyBytes_CheckExact(v) ? PyBytes_GET_SIZE(v) : PyByteArray_GET_SIZE(v);
        if (jb_reserve(b, 2 * (size_t)n + 3))
            return -1;
        char *o = b->p + b->len;
        *o++ = 'X';
        *o++ = '\'';
        for (Py_ssize_t i = 0; i < n; i++) {
            *o++ = hexdigits[s[i] >> 4];
            *o++ = hexdigits[s[i] & 15];
        }
        *o++ = '\'';
        b->len = (size_t)(o - b->p);
        return 0;
    }
    int is_decimal = decimal_check(v);
    if (is_decimal < 0)
        return -1;
    if (is_decimal) /* bare, as sql_literal writes it: quoted, compared as doubles */
        return put_number(b, PyObject_Format(v, decimal_spec), v);
    PyErr_Format(PyExc_TypeError, "not a row value for a multi-row statement: %s",
                 Py_TYPE(v)->tp_name);
    return -1;
}

static int rb_put(const char *s, size_t n)
{
    JB_PUT(&rb, s, n);
    return 0;
}

static PyObject *render_rows(PyObject *self, PyObject *args)
{
    PyObject *rows;
    Py_ssize_t start, max_rows, max_bytes;
    int bare;
    if (!PyArg_ParseTuple(args, "O!nnnp", &PyList_Type, &rows, &start, &max_rows, &max_bytes,
                          &bare))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(rows);
    if (start < 0 || start > count) {
        PyErr_SetString(PyExc_IndexError, "render_rows: start out of range");
        return NULL;
    }
    rb.len = 0;
    int ascii = 1;
    Py_ssize_t i = start;
    size_t size = 0;
    for (; i < count; i++) {
        if (i > start && i - start >= max_rows)
            break;
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "render_rows: a row is not a tuple");
            return NULL;
        }
        size_t mark = rb.len;
        if (i > start && rb_put(", ", 2))
            return NULL;
        size_t begin = rb.len;
        Py_ssize_t width = bare ? 1 : PyTuple_GET_SIZE(row);
        if (!bare && rb_put("(", 1))
            return NULL;
        for (Py_ssize_t j = 0; j < width; j++) {
            if (j && rb_put(", ", 2))
                return NULL;
            if (put_sql_value(&rb, PyTuple_GET_ITEM(row, j), &ascii))
                return NULL;
        }
        if (!bare && rb_put(")", 1))
            return NULL;
        size_t row_size = 2 + (rb.len - begin);
        if (i > start && size + row_size > (size_t)(max_bytes < 0 ? 0 : max_bytes)) {
            rb.len = mark; /* the next statement's first row */
            break;
        }
        size += row_size;
    }
    PyObject *text = ascii ? PyUnicode_New((Py_ssize_t)rb.len, 127)
                           : PyUnicode_DecodeUTF8(rb.p, (Py_ssize_t)rb.len, "surrogateescape");
    if (text == NULL)
        return NULL;
    if (ascii)
        memcpy(PyUnicode_DATA(text), rb.p, rb.len);
    return Py_BuildValue("(nN)", i, text);
}

/* --- LOAD DATA rows (render_tsv; apply/sql.py's render_tsv_python is its specification) --- */

static const unsigned char tsv_escape[256] = {
    [0] = '0', ['\t'] = 't', ['\n'] = 'n', ['\r'] = 'r', ['\\'] = '\\',
};

static int put_tsv_text(jbuf *b, const unsigned char *s, Py_ssize_t n)
{
    if (jb_reserve(b, 2 * (size_t)n))
        return -1;
    put_escaped(b, s, n, tsv_escape);
    return 0;
}

#define TSV_UNFIT 1 /* status: the value is not what its column's kind takes */

/* One value as a LOAD DATA field for a column of `kind` ('i' integer, 'n' DECIMAL, 's' text
   read by the column's type, 'b' binary string; in upper case: NULL not taken).  0,
   TSV_UNFIT, or -1 with an exception. */
static int put_tsv_value(jbuf *b, PyObject *v, char kind)
{
    if (v == Py_None) {
        if (kind >= 'A' && kind <= 'Z')
            return TSV_UNFIT;
        JB_LIT(b, "\\N");
        return 0;
    }
    if (kind >= 'A' && kind <= 'Z')
        kind = (char)(kind - 'A' + 'a');
    if (kind == 'i' || kind == 'n') {
        int done = put_integer(b, v);
        if (done != 1)
            return done;
        if (kind == 'i')
            return TSV_UNFIT;
        int is_decimal = decimal_check(v);
        if (is_decimal <= 0)
            return is_decimal < 0 ? -1 : TSV_UNFIT;
        if (put_number(b, PyObject_Format(v, decimal_spec), v) == 0)
            return 0;
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear(); /* not finite */
        return TSV_UNFIT;
    }
    if (PyUnicode_CheckExact(v) && (kind == 's' || kind == 'b')) {
        if (PyUnicode_IS_ASCII(v))
            return put_tsv_text(b, PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v));
        PyObject *encoded = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
        if (encoded == NULL)
            return -1;
        int rc = put_tsv_text(b, (const unsigned char *)PyBytes_AS_STRING(encoded),
                              PyBytes_GET_SIZE(encoded));
        Py_DECREF(encoded);
        return rc;
    }
    if (kind == 'b' && PyBytes_CheckExact(v))
        return put_tsv_text(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if (kind == 'b' && PyByteArray_CheckExact(v))
        return put_tsv_text(b, (const unsigned char *)PyByteArray_AS_STRING(v),
                            PyByteArray_GET_SIZE(v));
    return TSV_UNFIT;
}

static PyObject *render_tsv(PyObject *self, PyObject *args)
{
    PyObject *rows;
    Py_ssize_t start, max_rows, max_bytes, width;
    const char *kinds;
    if (!PyArg_ParseTuple(args, "O!nnns#", &PyList_Type, &rows, &start, &max_rows, &max_bytes,
                          &kinds, &width))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(rows);
    if (start < 0 || start > count) {
        PyErr_SetString(PyExc_IndexError, "render_tsv: start out of range");
        return NULL;
    }
    /* A buffer of its own: apply threads call this concurrently (the GIL is held
       throughout, but a codec could in principle let another thread in). */
    jbuf b = {NULL, 0, 0};
    int status = 0;
    Py_ssize_t i = start;
    for (; i < count; i++) {
        if (i > start && i - start >= max_rows)
            break;
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != width) {
            status = TSV_UNFIT;
            break;
        }
        size_t mark = b.len;
        for (Py_ssize_t j = 0; j < width && status == 0; j++) {
            if (j && jb_reserve(&b, 1) == 0)
                b.p[b.len++] = '\t';
            else if (j)
                status = -1;
            if (status == 0)
                status = put_tsv_value(&b, PyTuple_GET_ITEM(row, j), kinds[j]);
        }
        if (status == 0 && jb_reserve(&b, 1) == 0)
            b.p[b.len++] = '\n';
        else if (status == 0)
            status = -1;
        if (status != 0)
            break;
        if (b.len > (size_t)(max_bytes < 0 ? 0 : max_bytes)) {
            if (i == start)
                status = TSV_UNFIT; /* a row bigger than a statement's bound */
            else
                b.len = mark; /* the next statement's first row */
            break;
        }
    }
    PyObject *out = NULL;
    if (status == 0) {
        PyObject *data = PyBytes_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.len);
        if (data != NULL)
            out = Py_BuildValue("(nN)", i, data);
    } else if (status == TSV_UNFIT) {
        out = Py_NewRef(Py_None);
    }
    free(b.p);
    return out;
}

static PyObject *py_crc32(PyObject *self, PyObject *args)
{
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    uint32_t c = crc32_buf(data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"take_run", take_run, METH_VARARGS, "Take the run of ordinary events (see module doc)."},
    {"walk_events", walk_events, METH_VARARGS,
     "Walk whole events, checking CRC32s, returning the ones to look at (rows/walk.py)."},
    {"hop_frames", hop_frames, METH_VARARGS,
     "The planner's walk over one buffer (binlog/framing.py's hop_frames_python)."},
    {"crc32", py_crc32, METH_VARARGS, "CRC32 (IEEE), as zlib.crc32(data)."},
    {"image_tuples", image_tuples, METH_VARARGS,
     "A rows event's (before, after) images as the row decoders make them, or None."},
    {"fold_images", fold_images, METH_VARARGS,
     "The read tasks' compaction loop (spark/compact.py's fold_images_python)."},
    {"fold_events", fold_events, METH_VARARGS,
     "The read task's per-event loop for keyed tables (rows/scanner.py, spark/compact.py)."},
    {"render_rows", render_rows, METH_VARARGS,
     "Rows as SQL literals for a multi-row statement (apply/sql.py's render_rows_python)."},
    {"render_tsv", render_tsv, METH_VARARGS,
     "Rows as LOAD DATA lines, or None (apply/sql.py's render_tsv_python)."},
    {"json_rows", (PyCFunction)(void (*)(void))json_rows, METH_FASTCALL,
     "The JSON lines of one rows event's rows (rows/jsondump.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "binrelay._speedups",
    "Hot loops in C; relay/hotloop.py, rows/walk.py, rows/jsondump.py, binlog/framing.py and "
    "apply/sql.py hold the Python specifications.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib != NULL) {
        zlib_crc32 = PyObject_GetAttrString(zlib, "crc32");
        Py_DECREF(zlib);
    }
    PyErr_Clear(); /* without zlib the table loop does all the work */
    return PyModule_Create(&module);
}

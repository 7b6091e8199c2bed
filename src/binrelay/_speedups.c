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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
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

/* take_run(data, pos, offset, check_crc, boring, out) -> (pos, offset, count, bad_crc) */
static PyObject *take_run(PyObject *self, PyObject *args)
{
    Py_buffer data, boring;
    Py_ssize_t pos;
    long long offset;
    int check_crc;
    PyObject *out;
    if (!PyArg_ParseTuple(args, "y*nLpy*O!", &data, &pos, &offset, &check_crc, &boring,
                          &PyByteArray_Type, &out))
        return NULL;
    if (boring.len < 256) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&boring);
        PyErr_SetString(PyExc_ValueError, "boring must have 256 entries");
        return NULL;
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
        if (!flags[type] || (eflags & 0x20) || size != length - 1 ||
            (long long)log_pos - (long long)size != off)
            break;
        if (check_crc) {
            int error = 0;
            if (size < 23 || !event_crc_ok(ev, size, &error)) {
                if (error) {
                    PyBuffer_Release(&data);
                    PyBuffer_Release(&boring);
                    return NULL;
                }
                bad_crc = 1;
                break;
            }
        }
        off = log_pos;
        total += size;
        count++;
        pos = end;
    }
    if (total) {
        Py_ssize_t old = PyByteArray_GET_SIZE(out);
        if (PyByteArray_Resize(out, old + total) < 0) {
            PyBuffer_Release(&data);
            PyBuffer_Release(&boring);
            return NULL;
        }
        char *dst = PyByteArray_AS_STRING(out) + old;
        Py_ssize_t p = start_pos;
        while (p < pos) {
            uint32_t length = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16;
            memcpy(dst, buf + p + 5, length - 1);
            dst += length - 1;
            p += 4 + (Py_ssize_t)length;
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&boring);
    return Py_BuildValue("nLni", pos, off, count, bad_crc);
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
    {"crc32", py_crc32, METH_VARARGS, "CRC32 (IEEE), as zlib.crc32(data)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "binrelay._speedups",
    "Hot loops in C; relay/hotloop.py and rows/walk.py hold the Python specifications.", -1, methods,
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

/* Newline offsets of a chunk in one pass: agent/ingest/columnar/lines.py's newline_positions.
 *
 * newlines(chunk, out) -> (n, stop): writes the offsets of the b"\n" of chunk (any
 * C-contiguous buffer), in order, into out (a writable C-contiguous buffer of int64 slots)
 * until out is full; n is how many it wrote, stop the offset it scanned up to: len(chunk)
 * when every newline is in out, otherwise the offset just past the last one written (the
 * caller then finds the rest another way). It never writes past out. The GIL is released
 * while it scans (both buffers are held).
 *
 * Why: numpy's flatnonzero(chunk == 10) writes a byte per chunk byte, then reads that mask
 * twice (count, then fill); this reads the chunk once, 16 bytes at a time (SSE2, part of
 * every x86-64; elsewhere memchr). A tenth of the JSON columnar path's time went to the numpy
 * way (docs/ingest.md, "Kernels, and why these"). Only the CPython C API: no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static PyObject *newlines(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *chunk_o, *out_o;
    if (!PyArg_ParseTuple(args, "OO", &chunk_o, &out_o)) return NULL;
    Py_buffer chunk, out;
    if (PyObject_GetBuffer(chunk_o, &chunk, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(out_o, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&chunk);
        return NULL;
    }
    if (out.len % 8) {
        PyBuffer_Release(&chunk);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "out: int64 slots");
        return NULL;
    }
    const uint8_t *base = chunk.buf;
    Py_ssize_t len = chunk.len, i = 0, n = 0, cap = out.len / 8, stop = len;
    int64_t *slots = out.buf;
    Py_BEGIN_ALLOW_THREADS;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n');
    for (; i + 16 <= len; i += 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)(base + i));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(block, nl));
        while (m) {
            if (n == cap) {
                stop = n ? slots[n - 1] + 1 : 0;
                goto full;
            }
            slots[n++] = (int64_t)(i + __builtin_ctz(m));
            m &= m - 1;
        }
    }
#endif
    while (i < len) {
        const uint8_t *hit = memchr(base + i, '\n', (size_t)(len - i));
        if (!hit) break;
        if (n == cap) {
            stop = i;
            goto full;
        }
        slots[n++] = (int64_t)(hit - base);
        i = (hit - base) + 1;
    }
full:
    Py_END_ALLOW_THREADS;
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&out);
    return Py_BuildValue("(nn)", n, stop);
}

static PyMethodDef METHODS[] = {
    {"newlines", newlines, METH_VARARGS, "Offsets of a chunk's newlines (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "newlines_c",
                                    "Newline offsets of a chunk in one pass.", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_newlines_c(void) { return PyModule_Create(&MODULE); }

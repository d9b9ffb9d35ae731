/* What the gateway's C extensions share: protobuf varints, decimal text and a growing output
 * buffer. One copy, included by the C files beside the modules they speed up (each gateway/.../_module.c; setup.py
 * names this directory as their include directory and its headers as what they depend on).
 * Only the CPython C API is used. */
#ifndef GATEWAY_OUTBUF_H
#define GATEWAY_OUTBUF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- varints ------------------------------------------------------------------------------------------- */

static inline Py_ssize_t varint_size(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline char *put_varint(char *out, uint64_t v) {
    while (v >= 0x80) {
        *out++ = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out++ = (char)v;
    return out;
}

/* --- decimal text ------------------------------------------------------------------------------------ */

/* v's decimal digits (as Python's str(int) writes them: at most 20 characters) at out; returns the position
 * after them */
static inline char *put_decimal(char *out, long long v) {
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *out++ = '-';
    while (n) *out++ = digits[--n];
    return out;
}

/* --- sequences walked --------------------------------------------------------------------------------- */

/* The items of seq as a tuple (a new reference; TypeError(message) when seq is not iterable). A list is
 * copied: the loops over it call Python code (getattr, __eq__, callbacks such as frame_one or head_of) that
 * could shrink the list and free the item being read; a tuple's items live as long as the tuple. */
static inline PyObject *items_of(PyObject *seq, const char *message) {
    PyObject *fast = PySequence_Fast(seq, message);
    if (fast == NULL || PyTuple_CheckExact(fast)) return fast;
    PyObject *items = PyList_AsTuple(fast);
    Py_DECREF(fast);
    return items;
}

/* --- a growing output buffer (PyMem; free data with PyMem_Free) --------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} buffer;

/* Room for `more` bytes after len; -1 with MemoryError set when it cannot be had. */
static inline int reserve(buffer *b, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX - b->len) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            cap = b->len + more;
            break;
        }
        cap *= 2;
    }
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

/* appends that cannot fail: the caller reserved the room */
static inline void add(buffer *b, const void *src, Py_ssize_t n) {
    if (n == 0) return; /* src may be an empty buffer's NULL */
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

static inline void add_byte(buffer *b, char c) { b->data[b->len++] = c; }

static inline void add_varint(buffer *b, uint64_t v) { b->len = put_varint(b->data + b->len, v) - b->data; }

#endif

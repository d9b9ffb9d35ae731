/* Protobuf fields of the gateway's gRPC answers written from Python values, as the references in
 * gateway/grpc/consumed_wire.py and publish_wire.py write them: ints as int64 two's complement or uint64
 * varints, text as UTF-8; UNSUPPORTED for a value the reference writes otherwise (gateway/grpc/_consumed_wire.c,
 * _publish_wire.c). Only the CPython C API is used. */
#ifndef GATEWAY_PB_FIELDS_H
#define GATEWAY_PB_FIELDS_H

#include "delivered.h"

/* An int field as the reference's _varint encodes it: int64 as two's complement, or uint64. */
static inline int int_value(PyObject *value, uint64_t *out) {
    if (!PyLong_Check(value)) return UNSUPPORTED;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        *out = (uint64_t)v;
        return 0;
    }
    if (overflow < 0) return UNSUPPORTED;
    unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return UNSUPPORTED;
    }
    *out = u;
    return 0;
}

/* The UTF-8 of a str (the reference's text.encode()). */
static inline int text_value(PyObject *value, const char **raw, Py_ssize_t *size) {
    if (!PyUnicode_Check(value)) return UNSUPPORTED;
    *raw = PyUnicode_AsUTF8AndSize(value, size);
    if (*raw == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return UNSUPPORTED;
    }
    return 0;
}

/* tag + length + text; *size of the field */
static inline int add_text(buffer *b, char tag, PyObject *value) {
    const char *raw;
    Py_ssize_t size;
    int rc = text_value(value, &raw, &size);
    if (rc) return rc;
    if (reserve(b, 1 + 10 + size) < 0) return -1;
    add_byte(b, tag);
    add_varint(b, (uint64_t)size);
    add(b, raw, size);
    return 0;
}

static inline int add_int(buffer *b, char tag, PyObject *value, int skip_zero) {
    uint64_t v;
    int rc = int_value(value, &v);
    if (rc) return rc;
    if (skip_zero && v == 0) return 0;
    if (reserve(b, 11) < 0) return -1;
    add_byte(b, tag);
    add_varint(b, v);
    return 0;
}

#endif

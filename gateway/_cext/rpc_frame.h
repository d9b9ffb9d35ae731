/* What the RPC frame loops share: the frame header's begin token, reading a protobuf varint, and the usual
 * success answer's envelope (gateway/tubemq/wire/_rpc.c, _send_answers.c, _frame_decoder.c).
 * Only the CPython C API is used. */
#ifndef GATEWAY_RPC_FRAME_H
#define GATEWAY_RPC_FRAME_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* the first int32 of every frame header (frame.py TOKEN_SIGNED) */
#define TOKEN_SIGNED ((int32_t)0xFF7FF4FEu)

/* A varint at *p (before end): 0 and the value, or -1 for anything the reference may read otherwise (cut
 * off, longer than ten bytes, or a tenth byte above 1). */
static inline int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= end) return -1;
        unsigned char byte = *(*p)++;
        if (shift == 63 && byte > 1) return -1;
        v |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return -1;
}

/* The usual success answer's envelope (rpc.py decode_response's fast path): prefix, varint(body size), then
 * a body that is exactly 08 <method, one byte> 12 varint(n) <n data bytes>. 0 with the method and the data's
 * bounds when payload is that (decode_response then reads it without error, to the same method and data),
 * -1 for anything else (decode_response reads it its own way). */
static inline int usual_envelope(const unsigned char *p, Py_ssize_t len, const unsigned char *prefix, Py_ssize_t prefix_len,
                          long *method, const unsigned char **data, const unsigned char **end) {
    if (len < prefix_len || memcmp(p, prefix, prefix_len)) return -1;
    const unsigned char *q = p + prefix_len, *stop = p + len;
    uint64_t size, data_size;
    if (read_varint(&q, stop, &size) < 0 || size > (uint64_t)(stop - q) || size < 4) return -1;
    const unsigned char *body_end = q + size;
    if (q[0] != 0x08 || q[1] >= 0x80 || q[2] != 0x12) return -1;
    *method = q[1];
    q += 3;
    if (read_varint(&q, body_end, &data_size) < 0 || data_size != (uint64_t)(body_end - q)) return -1;
    *data = q;
    *end = body_end;
    return 0;
}

#endif

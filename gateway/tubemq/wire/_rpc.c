/* The RPC frames of a batch of requests written, and the usual success answer recognised, in C: the loops
 * of gateway/tubemq/wire/rpc.py (encode_requests and decode_response's fast path), chosen by that module
 * (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure ones).
 *
 * frame_requests gives the frames encode_request gives for each request; usual_answer says whether a frame's
 * payload is the envelope decode_response reads on its fast path (tests/tubemq/test_speedups.py and
 * tests/tubemq/test_speedups_send.py hold them to the reference).
 *
 * Only the CPython C API is used: the module builds wherever Python's own headers and a C compiler are, and
 * setup.py marks it optional, so a machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rpc_frame.h"

/* --- frame_requests: the RPC frames of serialized requests (wire/rpc.py encode_requests) --------------- */

#define BLOCK_SIZE 8192

static void put_int32(char *out, int32_t v) {
    uint32_t u = (uint32_t)v;
    out[0] = (char)(u >> 24);
    out[1] = (char)(u >> 16);
    out[2] = (char)(u >> 8);
    out[3] = (char)u;
}

/* frame_requests(serials, prefix, body_head, requests, frame_one) -> [bytes]: for a bytes request whose
 * frame fits one block and whose serial fits int32, the frame header, prefix, varint(body length),
 * body_head, varint(len(request)), request; anything else is frame_one(serial, request)'s. */
static PyObject *py_frame_requests(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *serials, *requests, *frame_one;
    Py_buffer prefix, head;
    if (!PyArg_ParseTuple(args, "Oy*y*OO", &serials, &prefix, &head, &requests, &frame_one)) return NULL;
    PyObject *out = NULL, *sseq = NULL, *rseq = NULL;
    sseq = items_of(serials, "serials must be a sequence");
    if (sseq == NULL) goto done;
    rseq = items_of(requests, "requests must be a sequence");
    if (rseq == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(rseq);
    if (PySequence_Fast_GET_SIZE(sseq) != count) {
        PyErr_SetString(PyExc_ValueError, "one serial per request");
        goto done;
    }
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *serial_obj = PySequence_Fast_GET_ITEM(sseq, i), *request = PySequence_Fast_GET_ITEM(rseq, i);
        PyObject *frame = NULL;
        int overflow = 0;
        long long serial = PyLong_Check(serial_obj) ? PyLong_AsLongLongAndOverflow(serial_obj, &overflow) : 0;
        if (serial == -1 && PyErr_Occurred()) goto fail;
        if (PyBytes_CheckExact(request) && PyLong_Check(serial_obj) && !overflow && serial >= INT32_MIN &&
            serial <= INT32_MAX) {
            Py_ssize_t inner = PyBytes_GET_SIZE(request);
            Py_ssize_t inner_len = varint_size((unsigned long long)inner);
            Py_ssize_t body = head.len + inner_len + inner;
            Py_ssize_t size = prefix.len + varint_size((unsigned long long)body) + body;
            if (size <= BLOCK_SIZE) {
                frame = PyBytes_FromStringAndSize(NULL, 16 + size);
                if (frame == NULL) goto fail;
                char *w = PyBytes_AS_STRING(frame);
                put_int32(w, TOKEN_SIGNED);
                put_int32(w + 4, (int32_t)serial);
                put_int32(w + 8, 1);
                put_int32(w + 12, (int32_t)size);
                w += 16;
                memcpy(w, prefix.buf, prefix.len);
                w = put_varint(w + prefix.len, (unsigned long long)body);
                memcpy(w, head.buf, head.len);
                w = put_varint(w + head.len, (unsigned long long)inner);
                memcpy(w, PyBytes_AS_STRING(request), inner);
            }
        }
        if (frame == NULL) {
            frame = PyObject_CallFunctionObjArgs(frame_one, serial_obj, request, NULL);
            if (frame == NULL) goto fail;
        }
        PyList_SET_ITEM(out, i, frame);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(sseq);
    Py_XDECREF(rseq);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&head);
    return out;
}

/* usual_answer(payload, prefix) -> bool: whether payload is the usual success envelope (usual_envelope). */
static PyObject *py_usual_answer(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *payload;
    Py_buffer prefix;
    if (!PyArg_ParseTuple(args, "Sy*", &payload, &prefix)) return NULL;
    long method;
    const unsigned char *data, *end;
    int usual = usual_envelope((const unsigned char *)PyBytes_AS_STRING(payload), PyBytes_GET_SIZE(payload),
                               prefix.buf, prefix.len, &method, &data, &end) == 0;
    PyBuffer_Release(&prefix);
    return PyBool_FromLong(usual);
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"frame_requests", py_frame_requests, METH_VARARGS,
     "frame_requests(serials, prefix, body_head, requests, frame_one) -> [request frame bytes]"},
    {"usual_answer", py_usual_answer, METH_VARARGS,
     "usual_answer(payload, prefix) -> whether payload is the usual success envelope"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.wire._rpc", "The RPC frames of a batch of requests, and the usual answer, in C (see rpc.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__rpc(void) {
    return PyModule_Create(&module);
}

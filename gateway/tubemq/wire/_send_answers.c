/* The SendMessage answers of a batch read in C: gateway.tubemq.wire.send_answers.decode_send_answers_py's
 * loop, chosen by gateway/tubemq/wire/send_answers.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure one).
 *
 * send_answers reads the SendMessageResponseB2P fields of each answer of a request_many batch; an answer it
 * does not read exactly as protobuf does is None, for the reference to read (tests/tubemq/test_speedups_send.py).
 *
 * Only the CPython C API is used: the module builds wherever Python's own headers and a C compiler are, and
 * setup.py marks it optional, so a machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rpc_frame.h"

static PyObject *str_data;
static PyObject *str_method, *str_payload_field;

/* SendMessageResponseB2P{success=1 bool, errCode=2 int32, errMsg=3 string, requireAuth=4 bool, messageId=5,
 * appendTime=6, appendOffset=7 int64} as (success, errCode, errMsg, messageId|None, appendTime|None,
 * appendOffset|None); None (not an error) for anything else than those fields with their wire types, the
 * three required ones present and errMsg ASCII: the reference reads such an answer. A repeated field's
 * last value counts, as protobuf's. */
static PyObject *send_answer(const unsigned char *p, const unsigned char *end) {
    uint64_t success = 0, code = 0, ints[3] = {0, 0, 0};
    int seen = 0; /* bit n-1: field n */
    const unsigned char *text = NULL;
    Py_ssize_t text_len = 0;
    while (p < end) {
        uint64_t tag, value;
        if (read_varint(&p, end, &tag) < 0) Py_RETURN_NONE;
        uint64_t field = tag >> 3, wire_type = tag & 7;
        if (field < 1 || field > 7) Py_RETURN_NONE;
        if (field == 3) {
            if (wire_type != 2 || read_varint(&p, end, &value) < 0 || value > (uint64_t)(end - p)) Py_RETURN_NONE;
            for (uint64_t i = 0; i < value; i++)
                if (p[i] & 0x80) Py_RETURN_NONE;
            text = p;
            text_len = (Py_ssize_t)value;
            p += value;
        } else {
            if (wire_type != 0 || read_varint(&p, end, &value) < 0) Py_RETURN_NONE;
            if (field == 1) success = value;
            else if (field == 2) code = value;
            else if (field >= 5) ints[field - 5] = value;
        }
        seen |= 1 << (field - 1);
    }
    if ((seen & 7) != 7) Py_RETURN_NONE;
    PyObject *items[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    items[0] = PyBool_FromLong(success != 0);
    items[1] = PyLong_FromLong((long)(int32_t)(uint32_t)code);
    items[2] = PyUnicode_DecodeASCII((const char *)text, text_len, "strict");
    for (int i = 0; i < 3; i++)
        items[3 + i] = (seen >> (4 + i)) & 1 ? PyLong_FromLongLong((long long)ints[i]) : Py_NewRef(Py_None);
    PyObject *answer = PyTuple_New(6);
    for (int i = 0; i < 6; i++) {
        if (items[i] == NULL || answer == NULL) {
            for (int j = 0; j < 6; j++) Py_XDECREF(items[j]);
            Py_XDECREF(answer);
            return NULL;
        }
    }
    for (int i = 0; i < 6; i++) PyTuple_SET_ITEM(answer, i, items[i]);
    return answer;
}

/* send_answers(answers, method, response_type, frame_type, prefix) -> [tuple | None]: for each answer that
 * is exactly a response_type (an RpcResponse) of method, or a frame_type (a Frame) whose payload is the
 * usual success envelope of method, its data read by send_answer; None for any other answer. */
static PyObject *py_send_answers(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *answers, *method, *response_type, *frame_type;
    Py_buffer prefix;
    if (!PyArg_ParseTuple(args, "OO!O!O!y*", &answers, &PyLong_Type, &method, &PyType_Type, &response_type,
                          &PyType_Type, &frame_type, &prefix))
        return NULL;
    PyObject *out = NULL, *seq = items_of(answers, "answers must be a sequence");
    if (seq == NULL) goto done;
    int overflow;
    long wanted = PyLong_AsLongAndOverflow(method, &overflow);
    if (wanted == -1 && PyErr_Occurred()) goto done;
    if (overflow) wanted = -1; /* no answer's method is that */
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *parsed = NULL, *field = NULL;
        PyObject *type = (PyObject *)Py_TYPE(item);
        if (type == frame_type) {
            field = PyObject_GetAttr(item, str_payload_field);
            if (field == NULL) goto fail;
            long got;
            const unsigned char *data, *end;
            if (PyBytes_Check(field) &&
                usual_envelope((const unsigned char *)PyBytes_AS_STRING(field), PyBytes_GET_SIZE(field), prefix.buf,
                               prefix.len, &got, &data, &end) == 0 &&
                got == wanted)
                parsed = send_answer(data, end);
            else
                parsed = Py_NewRef(Py_None);
        } else if (type == response_type) {
            PyObject *got = PyObject_GetAttr(item, str_method);
            if (got == NULL) goto fail;
            int same = PyObject_RichCompareBool(got, method, Py_EQ);
            Py_DECREF(got);
            if (same < 0) goto fail;
            if (same && (field = PyObject_GetAttr(item, str_data)) == NULL) goto fail;
            if (same && PyBytes_Check(field)) {
                const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(field);
                parsed = send_answer(raw, raw + PyBytes_GET_SIZE(field));
            } else {
                parsed = Py_NewRef(Py_None);
            }
        } else {
            parsed = Py_NewRef(Py_None);
        }
        Py_XDECREF(field);
        if (parsed == NULL) goto fail;
        PyList_SET_ITEM(out, i, parsed);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&prefix);
    return out;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"send_answers", py_send_answers, METH_VARARGS,
     "send_answers(answers, method, response_type, frame_type, prefix) -> [SendMessageResponseB2P fields or None]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.wire._send_answers", "The SendMessage answers of a batch read in C (see send_answers.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__send_answers(void) {
    if ((str_data = PyUnicode_InternFromString("data")) == NULL ||
        (str_method = PyUnicode_InternFromString("method")) == NULL ||
        (str_payload_field = PyUnicode_InternFromString("payload")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}

/* The SendMessage request of each message written in C: gateway.tubemq.producer.send_request's
 * SendRequestTemplate.encode_many_py, chosen by that module (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure
 * one). encode_sends gives the bytes the reference gives and the same errors (tests/tubemq/test_speedups.py holds
 * them together with hypothesis).
 *
 * Only the CPython C API is used: the module builds wherever Python's own headers and a C compiler are, and
 * setup.py marks it optional, so a machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The UTF-8 of an optional text field: *size -1 when absent (None or empty, as `if text:` says). */
static int optional_text(PyObject *text, const char **raw, Py_ssize_t *size) {
    *size = -1;
    if (text == Py_None) return 0;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "msg_type and msg_time must be str or None");
        return -1;
    }
    if (PyUnicode_GET_LENGTH(text) == 0) return 0;
    *raw = PyUnicode_AsUTF8AndSize(text, size);
    return *raw == NULL ? -1 : 0;
}

/* --- encode_sends: SendMessageRequestP2B of each message (producer/send_request.py SendRequestTemplate) ---- */

static PyObject *str_data, *str_flag, *str_msg_type, *str_msg_time;

/* encode_sends(prefix, fields, auth, partition_ids, messages) -> [bytes]: for each message
 * prefix + varint(partition) + 0x22 + varint(len(data)) + data + 0x28 + varint(flag) + fields
 * [+ 0x42 msg_type] [+ 0x4a msg_time] + auth (ints as int64 two's complement varints). */
static PyObject *py_encode_sends(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer prefix, fields, auth;
    PyObject *partitions, *messages;
    if (!PyArg_ParseTuple(args, "y*y*y*OO", &prefix, &fields, &auth, &partitions, &messages)) return NULL;
    PyObject *out = NULL, *pseq = NULL, *mseq = NULL;
    pseq = items_of(partitions, "partition_ids must be a sequence");
    if (pseq == NULL) goto done;
    mseq = items_of(messages, "messages must be a sequence");
    if (mseq == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(mseq);
    if (PySequence_Fast_GET_SIZE(pseq) != count) {
        PyErr_SetString(PyExc_ValueError, "one partition id per message");
        goto done;
    }
    out = PyList_New(count);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *message = PySequence_Fast_GET_ITEM(mseq, i);
        PyObject *data = NULL, *flag_obj = NULL, *msg_type = NULL, *msg_time = NULL;
        Py_buffer body = {0};
        int ok = 0;
        unsigned long long partition = PyLong_AsUnsignedLongLongMask(PySequence_Fast_GET_ITEM(pseq, i));
        if (partition == (unsigned long long)-1 && PyErr_Occurred()) goto item_done;
        if ((data = PyObject_GetAttr(message, str_data)) == NULL ||
            (flag_obj = PyObject_GetAttr(message, str_flag)) == NULL ||
            (msg_type = PyObject_GetAttr(message, str_msg_type)) == NULL ||
            (msg_time = PyObject_GetAttr(message, str_msg_time)) == NULL)
            goto item_done;
        unsigned long long flag = PyLong_AsUnsignedLongLongMask(flag_obj);
        if (flag == (unsigned long long)-1 && PyErr_Occurred()) goto item_done;
        if (PyObject_GetBuffer(data, &body, PyBUF_SIMPLE) < 0) goto item_done;
        const char *type_raw = NULL, *time_raw = NULL;
        Py_ssize_t type_size, time_size;
        if (optional_text(msg_type, &type_raw, &type_size) < 0 || optional_text(msg_time, &time_raw, &time_size) < 0)
            goto item_done;
        Py_ssize_t size = prefix.len + varint_size(partition) + 1 + varint_size((unsigned long long)body.len) +
                          body.len + 1 + varint_size(flag) + fields.len + auth.len;
        if (type_size >= 0) size += 1 + varint_size((unsigned long long)type_size) + type_size;
        if (time_size >= 0) size += 1 + varint_size((unsigned long long)time_size) + time_size;
        PyObject *request = PyBytes_FromStringAndSize(NULL, size);
        if (request == NULL) goto item_done;
        char *w = PyBytes_AS_STRING(request);
        memcpy(w, prefix.buf, prefix.len);
        w = put_varint(w + prefix.len, partition);
        *w++ = 0x22;
        w = put_varint(w, (unsigned long long)body.len);
        memcpy(w, body.buf, body.len);
        w += body.len;
        *w++ = 0x28;
        w = put_varint(w, flag);
        memcpy(w, fields.buf, fields.len);
        w += fields.len;
        if (type_size >= 0) {
            *w++ = 0x42;
            w = put_varint(w, (unsigned long long)type_size);
            memcpy(w, type_raw, type_size);
            w += type_size;
        }
        if (time_size >= 0) {
            *w++ = 0x4a;
            w = put_varint(w, (unsigned long long)time_size);
            memcpy(w, time_raw, time_size);
            w += time_size;
        }
        memcpy(w, auth.buf, auth.len);
        w += auth.len;
        assert(w == PyBytes_AS_STRING(request) + size);
        PyList_SET_ITEM(out, i, request);
        ok = 1;
    item_done:
        if (body.obj != NULL) PyBuffer_Release(&body);
        Py_XDECREF(data);
        Py_XDECREF(flag_obj);
        Py_XDECREF(msg_type);
        Py_XDECREF(msg_time);
        if (!ok) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    Py_XDECREF(pseq);
    Py_XDECREF(mseq);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&fields);
    PyBuffer_Release(&auth);
    return out;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"encode_sends", py_encode_sends, METH_VARARGS,
     "encode_sends(prefix, fields, auth, partition_ids, messages) -> [SendMessageRequestP2B bytes]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.producer._send_request", "The SendMessage request of each message written in C (see send_request.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__send_request(void) {
    if ((str_data = PyUnicode_InternFromString("data")) == NULL ||
        (str_flag = PyUnicode_InternFromString("flag")) == NULL ||
        (str_msg_type = PyUnicode_InternFromString("msg_type")) == NULL ||
        (str_msg_time = PyUnicode_InternFromString("msg_time")) == NULL)
        return NULL;
    return PyModule_Create(&module);
}

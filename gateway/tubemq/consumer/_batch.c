/* A GetMessage answer's messages decoded in C: gateway.tubemq.consumer.batch.decode_messages_py's loop,
 * chosen at import by gateway/tubemq/consumer/batch.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure one).
 *
 * decode_messages walks the TransferedMessage list: CRC check, attribute prefix split (each distinct prefix
 * parsed once, by the Python parse_prefix it is given), client filter, one ConsumedMessage per kept message.
 * It gives byte-identical results and the same errors as its reference (tests/test_speedups.py holds them
 * together with hypothesis, malformed input included).
 *
 * Only the CPython C API is used (no third-party headers, no zlib headers): the module builds wherever
 * Python's own headers and a C compiler are, and setup.py marks it optional, so a machine without a
 * compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "slots.h"

#define INDEX_ENTRY_SIZE 28
#define PREFIX_LEN 4
#define MESSAGE_FIELDS 9

/* --- CRC-32 ------------------------------------------------------------------------------------------ */

/* zlib.crc32, called through Python: zlib's braided CRC is faster per KiB than a slicing-by-8 table compiled
 * here, by more than the call through Python costs, and it needs no zlib headers. */
static PyObject *zlib_crc32 = NULL;

/* crc32(data) & 0x7FFFFFFF == checksum: 1 yes, 0 no, -1 error. A checksum that is not an int (or is
 * outside int64) never matches, as Python's != says. */
static int checksum_matches(PyObject *data, PyObject *checksum) {
    PyObject *crc = PyObject_CallOneArg(zlib_crc32, data);
    if (crc == NULL) return -1;
    unsigned long value = PyLong_AsUnsignedLongMask(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (!PyLong_Check(checksum)) return 0;
    int overflow;
    long long expected = PyLong_AsLongLongAndOverflow(checksum, &overflow);
    if (expected == -1 && PyErr_Occurred()) return -1;
    return !overflow && (long long)(value & 0x7FFFFFFFul) == expected;
}

/* --- the message class: its slots, written directly ------------------------------------------------ */

/* ConsumedMessage is a slots dataclass whose __init__ only assigns its nine fields in order; building it
 * through __init__ costs a Python call per message, so the object is allocated and its slots stored here.
 * set_message_type checks the class is that shape (writable object slots, no __post_init__) and refuses
 * anything else, so a change of the class fails loudly at import instead of building wrong objects. */
static PyTypeObject *message_type = NULL;
static Py_ssize_t message_offsets[MESSAGE_FIELDS];

static PyObject *py_set_message_type(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyTuple_Type, &names)) return NULL;
    if (PyTuple_GET_SIZE(names) != MESSAGE_FIELDS) {
        PyErr_Format(PyExc_TypeError, "the message class needs %d fields", MESSAGE_FIELDS);
        return NULL;
    }
    Py_ssize_t offsets[MESSAGE_FIELDS];
    if (slot_offsets((PyTypeObject *)cls, names, offsets) < 0) return NULL;
    memcpy(message_offsets, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_XSETREF(message_type, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

/* A new message owning the references in values (stolen, also on failure). */
static PyObject *new_message(PyObject **values) {
    PyObject *obj = message_type->tp_alloc(message_type, 0);
    if (obj == NULL) {
        for (int i = 0; i < MESSAGE_FIELDS; i++) Py_DECREF(values[i]);
        return NULL;
    }
    for (int i = 0; i < MESSAGE_FIELDS; i++) *(PyObject **)((char *)obj + message_offsets[i]) = values[i];
    return obj;
}

/* --- decode_messages --------------------------------------------------------------------------------- */

static PyObject *str_payload, *str_flag, *str_checksum, *str_message_id, *one;

/* Python's data[:end] for a slice end that may be negative or past the end. */
static Py_ssize_t slice_end(Py_ssize_t end, Py_ssize_t len) {
    if (end < 0) end += len;
    if (end < 0) return 0;
    return end > len ? len : end;
}

typedef struct {
    PyObject *messages, *prefixes, *last_key, *last;
} decode_state;

static void decode_state_clear(decode_state *s) {
    Py_XDECREF(s->messages);
    Py_XDECREF(s->prefixes);
    Py_XDECREF(s->last_key);
    Py_XDECREF(s->last);
}

/* decode_messages(wire, filters, curr_offset, exact, parse_prefix) ->
 *     (messages, kept_bytes, bad_checksum, bad_payload, filtered)
 * parse_prefix(data, flag) is the reference's: (body start, attributes, msg_type, msg_time, key), or None
 * when the payload cannot be split. */
static PyObject *py_decode_messages(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *wire, *filters, *curr_obj, *parse_prefix;
    int exact;
    if (!PyArg_ParseTuple(args, "OOO!pO", &wire, &filters, &PyLong_Type, &curr_obj, &exact, &parse_prefix))
        return NULL;
    if (message_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_message_type was not called");
        return NULL;
    }
    int filtering = filters == Py_None ? 0 : PyObject_IsTrue(filters);
    if (filtering < 0) return NULL;
    if (filtering && !PyAnySet_Check(filters)) {
        PyErr_SetString(PyExc_TypeError, "filters must be a set or frozenset");
        return NULL;
    }
    decode_state s = {PyList_New(0), PyDict_New(), NULL, NULL};
    PyObject *iter = NULL;
    long long kept_bytes = 0, bad_checksum = 0, bad_payload = 0, filtered = 0;
    int failed = 0;
    if (s.messages == NULL || s.prefixes == NULL) goto fail;
    iter = PyObject_GetIter(wire);
    if (iter == NULL) goto fail;
    PyObject *item;
    for (Py_ssize_t index = 0; (item = PyIter_Next(iter)) != NULL; index++) {
        PyObject *data = NULL, *flag_obj = NULL, *body = NULL, *attributes = NULL, *msg_type = NULL,
                 *msg_time = NULL, *msg_key = NULL, *values[MESSAGE_FIELDS];
        data = PyObject_GetAttr(item, str_payload);
        if (data == NULL) goto item_fail;
        flag_obj = PyObject_GetAttr(item, str_flag);
        if (flag_obj == NULL) goto item_fail;
        PyObject *checksum = PyObject_GetAttr(item, str_checksum);
        if (checksum == NULL) goto item_fail;
        int matches = checksum_matches(data, checksum);
        Py_DECREF(checksum);
        if (matches < 0) goto item_fail;
        if (!matches) {
            bad_checksum++;
            goto item_next;
        }
        if (!PyBytes_Check(data)) {
            /* crc32 took it (a bytearray, a memoryview): the fast path below reads bytes only */
            PyErr_SetString(PyExc_TypeError, "payLoadData must be bytes");
            goto item_fail;
        }
        const char *raw = PyBytes_AS_STRING(data);
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        /* flag & 1, as Python computes it (any int, negative ones in two's complement) */
        PyObject *low_bit = PyNumber_And(flag_obj, one);
        if (low_bit == NULL) goto item_fail;
        int has_attributes = PyObject_IsTrue(low_bit);
        Py_DECREF(low_bit);
        if (has_attributes < 0) goto item_fail;
        if (has_attributes) {
            Py_ssize_t last_len = s.last_key == NULL ? 0 : PyBytes_GET_SIZE(s.last_key);
            if (s.last == NULL || last_len > size || memcmp(raw, PyBytes_AS_STRING(s.last_key), last_len)) {
                PyObject *key;
                if (size >= PREFIX_LEN) {
                    const unsigned char *u = (const unsigned char *)raw;
                    int32_t attr_len = (int32_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 |
                                                 (uint32_t)u[2] << 8 | (uint32_t)u[3]);
                    key = PyBytes_FromStringAndSize(raw, slice_end((Py_ssize_t)PREFIX_LEN + attr_len, size));
                } else {
                    key = PyBytes_FromStringAndSize(NULL, 0);
                }
                if (key == NULL) goto item_fail;
                PyObject *known = PyDict_GetItemWithError(s.prefixes, key); /* borrowed */
                if (known != NULL) {
                    Py_INCREF(known);
                } else if (PyErr_Occurred()) {
                    Py_DECREF(key);
                    goto item_fail;
                } else {
                    known = PyObject_CallFunctionObjArgs(parse_prefix, data, flag_obj, NULL);
                    if (known == NULL) {
                        Py_DECREF(key);
                        goto item_fail;
                    }
                    if (known == Py_None) {
                        Py_DECREF(known);
                        Py_DECREF(key);
                        bad_payload++;
                        goto item_next;
                    }
                    if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 5 ||
                        !PyLong_CheckExact(PyTuple_GET_ITEM(known, 0))) {
                        Py_DECREF(known);
                        Py_DECREF(key);
                        PyErr_SetString(PyExc_TypeError, "parse_prefix must return a 5-tuple or None");
                        goto item_fail;
                    }
                    if (PyDict_SetItem(s.prefixes, key, known) < 0) {
                        Py_DECREF(known);
                        Py_DECREF(key);
                        goto item_fail;
                    }
                }
                Py_XSETREF(s.last_key, key);
                Py_XSETREF(s.last, known);
            }
            Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(s.last, 0));
            if (start == -1 && PyErr_Occurred()) goto item_fail;
            if (start < 0 || start > size) {
                /* The reference slices data[start:] the way Python does; a prefix parser never gives a
                 * start outside the payload it parsed, and a cached prefix matches this payload's start. */
                PyErr_SetString(PyExc_ValueError, "prefix start outside the payload");
                goto item_fail;
            }
            body = PyBytes_FromStringAndSize(raw + start, size - start);
            if (body == NULL) goto item_fail;
            attributes = Py_NewRef(PyTuple_GET_ITEM(s.last, 1));
            msg_type = Py_NewRef(PyTuple_GET_ITEM(s.last, 2));
            msg_time = Py_NewRef(PyTuple_GET_ITEM(s.last, 3));
            msg_key = Py_NewRef(PyTuple_GET_ITEM(s.last, 4));
        } else {
            body = Py_NewRef(data);
            attributes = PyDict_New();
            if (attributes == NULL) goto item_fail;
            msg_type = Py_NewRef(Py_None);
            msg_time = Py_NewRef(Py_None);
            msg_key = Py_NewRef(Py_None);
        }
        if (filtering) {
            int wanted = 0;
            if (msg_type != Py_None && PyObject_IsTrue(msg_type) == 1) {
                wanted = PySet_Contains(filters, msg_type);
                if (wanted < 0) goto item_fail;
            } else if (PyErr_Occurred()) {
                goto item_fail;
            }
            if (!wanted) {
                filtered++;
                goto item_next;
            }
        }
        Py_ssize_t body_len = PyBytes_GET_SIZE(body);
        values[0] = PyObject_GetAttr(item, str_message_id);
        if (values[0] == NULL) goto item_fail;
        values[1] = body;
        values[2] = attributes;
        values[3] = msg_type;
        values[4] = msg_time;
        values[5] = flag_obj;
        values[6] = PyLong_FromSsize_t(index);
        if (exact) {
            PyObject *step = PyLong_FromLongLong((long long)INDEX_ENTRY_SIZE * index);
            values[7] = step == NULL ? NULL : PyNumber_Add(curr_obj, step);
            Py_XDECREF(step);
        } else {
            values[7] = Py_NewRef(Py_None);
        }
        values[8] = msg_key;
        body = attributes = msg_type = msg_time = msg_key = flag_obj = NULL; /* owned by values now */
        if (values[6] == NULL || values[7] == NULL) {
            for (int i = 0; i < MESSAGE_FIELDS; i++) Py_XDECREF(values[i]);
            goto item_fail;
        }
        PyObject *message = new_message(values);
        if (message == NULL) goto item_fail;
        int appended = PyList_Append(s.messages, message);
        Py_DECREF(message);
        if (appended < 0) goto item_fail;
        kept_bytes += body_len;
        goto item_next;
    item_fail:
        failed = 1;
    item_next: /* a message kept, dropped, or the error that ends the call */
        Py_XDECREF(data);
        Py_XDECREF(flag_obj);
        Py_XDECREF(body);
        Py_XDECREF(attributes);
        Py_XDECREF(msg_type);
        Py_XDECREF(msg_time);
        Py_XDECREF(msg_key);
        Py_DECREF(item);
        if (failed) goto fail;
    }
    if (PyErr_Occurred()) goto fail;
    Py_DECREF(iter);
    PyObject *result = Py_BuildValue("(OLLLL)", s.messages, kept_bytes, bad_checksum, bad_payload, filtered);
    decode_state_clear(&s);
    return result;
fail:
    Py_XDECREF(iter);
    decode_state_clear(&s);
    return NULL;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"set_message_type", py_set_message_type, METH_VARARGS,
     "set_message_type(cls, field_names): the slots dataclass decode_messages builds."},
    {"decode_messages", py_decode_messages, METH_VARARGS,
     "decode_messages(wire, filters, curr_offset, exact, parse_prefix) -> (messages, kept_bytes, "
     "bad_checksum, bad_payload, filtered)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.consumer._batch", "A GetMessage answer's messages decoded in C (see batch.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__batch(void) {
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL) return NULL;
    zlib_crc32 = PyObject_GetAttrString(zlib, "crc32");
    Py_DECREF(zlib);
    if (zlib_crc32 == NULL) return NULL;
    if ((str_payload = PyUnicode_InternFromString("payLoadData")) == NULL ||
        (str_flag = PyUnicode_InternFromString("flag")) == NULL ||
        (str_checksum = PyUnicode_InternFromString("checkSum")) == NULL ||
        (str_message_id = PyUnicode_InternFromString("messageId")) == NULL || (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}

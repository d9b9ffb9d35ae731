/* Publish requests read, and their receipts written, in C: the loops of gateway/grpc/publish_wire.py
 * (decode_publish for its _decode, encode_receipts for encode_stored_py), chosen by that module
 * (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure ones).
 *
 * Each returns NotImplemented for anything it does not take, and the caller then runs the Python reference,
 * so the two give the same results and the same errors (tests/tubemq/test_speedups.py and tests/grpc/test_publish_wire.py
 * hold them together). Only MemoryError is raised here.
 */
#include <limits.h>

#include "pb_fields.h" /* gateway/_cext: the delivered message's fields, varints, the growing buffer */

/* --- encode_receipts (gateway/grpc/publish_wire.py) ------------------------------------------------------- */

static PyObject *s_index, *s_result, *s_append_offset, *s_append_time_ms;

/* One stored outcome as `tag` + length + PublishResult/PublishAck: 1 its position, 2 its Receipt (1 the
 * partition key, 2 broker id, 3 partition id, 4 offset, 5 message id, 6 append time; each left out at its
 * default, as publish_wire._Receipts does). */
static int encode_receipt(buffer *out, char tag, long long first, PyObject *outcome, buffer *rec) {
    int rc = 0;
    PyObject *index = NULL, *result = NULL, *v[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    PyObject *names[6] = {s_partition_key, s_broker_id, s_partition_id, s_append_offset, s_message_id,
                          s_append_time_ms};
    if ((index = PyObject_GetAttr(outcome, s_index)) == NULL || (result = PyObject_GetAttr(outcome, s_result)) == NULL) {
        rc = -1;
        goto done;
    }
    if (result == Py_None || !PyLong_Check(index)) {
        rc = UNSUPPORTED;
        goto done;
    }
    for (int k = 0; k < 6; k++)
        if ((v[k] = PyObject_GetAttr(result, names[k])) == NULL) {
            rc = -1;
            goto done;
        }
    int overflow;
    long long position = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (position == -1 && PyErr_Occurred()) {
        rc = -1;
        goto done;
    }
    if (overflow || position < 0 || position > LLONG_MAX - first) {
        rc = UNSUPPORTED;
        goto done;
    }
    position += first;
    rec->len = 0;
    int empty = PyUnicode_Check(v[0]) && PyUnicode_GET_LENGTH(v[0]) == 0;
    if (!empty && (rc = add_text(rec, 0x0a, v[0]))) goto done;
    char tags[5] = {0x10, 0x18, 0x20, 0x28, 0x30};
    for (int k = 1; k < 6; k++)
        if ((rc = add_int(rec, tags[k - 1], v[k], 1))) goto done;
    Py_ssize_t stored = rec->len;
    Py_ssize_t body = (position ? 1 + varint_size((uint64_t)position) : 0) + 1 + varint_size((uint64_t)stored) + stored;
    if (reserve(out, 1 + 10 + body) < 0) {
        rc = -1;
        goto done;
    }
    add_byte(out, tag);
    add_varint(out, (uint64_t)body);
    if (position) {
        add_byte(out, 0x08);
        add_varint(out, (uint64_t)position);
    }
    add_byte(out, 0x12);
    add_varint(out, (uint64_t)stored);
    add(out, rec->data, stored);
done:
    Py_XDECREF(index);
    Py_XDECREF(result);
    for (int k = 0; k < 6; k++) Py_XDECREF(v[k]);
    return rc;
}

static PyObject *py_encode_receipts(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "encode_receipts(outcomes, first, tag) takes 3 arguments");
        return NULL;
    }
    int overflow;
    long long first = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (first == -1 && PyErr_Occurred()) return NULL;
    long tag = PyLong_AsLong(args[2]);
    if (tag == -1 && PyErr_Occurred()) return NULL;
    if (overflow || first < 0 || tag < 0 || tag > 0x7F) Py_RETURN_NOTIMPLEMENTED;
    PyObject *seq = items_of(args[0], "outcomes must be a sequence");
    if (seq == NULL) return NULL;
    buffer out = {0}, rec = {0};
    int rc = 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count && rc == 0; i++)
        rc = encode_receipt(&out, (char)tag, first, PySequence_Fast_GET_ITEM(seq, i), &rec);
    Py_DECREF(seq);
    PyObject *result = NULL;
    if (rc == 0)
        result = PyBytes_FromStringAndSize(out.data ? out.data : "", out.len);
    else if (rc == UNSUPPORTED || !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear(); /* the reference encodes them, or raises what it raises */
        result = Py_NewRef(Py_NotImplemented);
    }
    PyMem_Free(out.data);
    PyMem_Free(rec.data);
    return result;
}

/* --- decode_publish (gateway/grpc/publish_wire.py) ------------------------------------------------------- */

/* The reader of publish_wire._decode in C: the same fields in the same plain encoding, and UNSUPPORTED for
 * anything else (the Python reader then reads the request, or hands it to the protobuf library), so a result
 * from here is always the one the reference gives. */

static int get_varint(const unsigned char *raw, Py_ssize_t end, Py_ssize_t *pos, uint64_t *out) {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= end) return UNSUPPORTED;
        unsigned char byte = raw[(*pos)++];
        if (shift == 63 && byte > 1) return UNSUPPORTED; /* past 64 bits */
        value |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = value;
            return 0;
        }
    }
    return UNSUPPORTED;
}

/* a length prefix at raw[*pos]: the bytes it announces are raw[*start:*stop], within end */
static int get_length(const unsigned char *raw, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t *start, Py_ssize_t *stop) {
    uint64_t size;
    int rc = get_varint(raw, end, &pos, &size);
    if (rc) return rc;
    if (size > (uint64_t)(end - pos)) return UNSUPPORTED;
    *start = pos;
    *stop = pos + (Py_ssize_t)size;
    return 0;
}

static PyObject *utf8(const unsigned char *raw, Py_ssize_t start, Py_ssize_t stop) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)raw + start, stop - start, "strict");
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear(); /* UNSUPPORTED */
    return text;
}

/* the map entries (fields 4) in raw[pos:end] into a new dict; NULL with no error: UNSUPPORTED */
static PyObject *read_attributes(const unsigned char *raw, Py_ssize_t pos, Py_ssize_t end) {
    PyObject *attributes = PyDict_New();
    if (attributes == NULL) return NULL;
    while (pos < end) {
        Py_ssize_t start, stop;
        if (get_length(raw, end, pos + 1, &start, &stop)) goto unsupported;
        PyObject *name = NULL, *text = NULL;
        Py_ssize_t at = start;
        while (at < stop) {
            unsigned char tag = raw[at];
            Py_ssize_t first, last;
            if (get_length(raw, stop, at + 1, &first, &last) || (tag != 0x0A && tag != 0x12)) {
                Py_XDECREF(name);
                Py_XDECREF(text);
                goto unsupported;
            }
            PyObject *read = utf8(raw, first, last);
            if (read == NULL) {
                Py_XDECREF(name);
                Py_XDECREF(text);
                goto failed;
            }
            if (tag == 0x0A)
                Py_XSETREF(name, read);
            else
                Py_XSETREF(text, read);
            at = last;
        }
        if (name == NULL && (name = PyUnicode_FromStringAndSize("", 0)) == NULL) {
            Py_XDECREF(text);
            goto failed;
        }
        if (text == NULL && (text = PyUnicode_FromStringAndSize("", 0)) == NULL) {
            Py_DECREF(name);
            goto failed;
        }
        int set = PyDict_SetItem(attributes, name, text);
        Py_DECREF(name);
        Py_DECREF(text);
        if (set < 0) goto failed;
        pos = stop;
    }
    return attributes;
unsupported:
failed:
    Py_DECREF(attributes);
    return NULL;
}

/* one Message in raw[pos:end]: a new message_class instance; NULL with no error: UNSUPPORTED */
static PyObject *read_message(const unsigned char *raw, Py_ssize_t pos, Py_ssize_t end, PyObject *raw_obj,
                              PyObject *maps, PyObject *message_class) {
    PyObject *value = NULL, *key = NULL, *partition = NULL, *attributes = NULL, *stream_id = NULL,
             *msg_time = NULL, *message = NULL;
    int seen = 0;
    while (pos < end) {
        unsigned char tag = raw[pos];
        if (tag == 0x18) { /* partition (3): int32 */
            if (seen & 8) goto done;
            seen |= 8;
            uint64_t v;
            pos += 1;
            if (get_varint(raw, end, &pos, &v)) goto done;
            long long p = v > 0x7FFFFFFF ? (long long)((v + 0x80000000u) & 0xFFFFFFFFu) - 0x80000000LL : (long long)v;
            if ((partition = PyLong_FromLongLong(p)) == NULL) goto done;
            continue;
        }
        Py_ssize_t start, stop;
        if (get_length(raw, end, pos + 1, &start, &stop)) goto done;
        if (tag == 0x0A && !(seen & 2)) { /* value (1) */
            seen |= 2;
            if ((value = PyBytes_FromStringAndSize((const char *)raw + start, stop - start)) == NULL) goto done;
        } else if (tag == 0x22) { /* attributes (4): a message's entries are adjacent */
            if (seen & 16) goto done;
            seen |= 16;
            while (stop < end && raw[stop] == 0x22) {
                Py_ssize_t s2, e2;
                if (get_length(raw, end, stop + 1, &s2, &e2)) goto done;
                stop = e2;
            }
            PyObject *entries = PyBytes_FromStringAndSize((const char *)raw + pos, stop - pos);
            if (entries == NULL) goto done;
            attributes = PyDict_GetItemWithError(maps, entries);
            if (attributes != NULL)
                Py_INCREF(attributes);
            else if (!PyErr_Occurred() && (attributes = read_attributes(raw, pos, stop)) != NULL &&
                     PyDict_SetItem(maps, entries, attributes) < 0)
                Py_CLEAR(attributes);
            Py_DECREF(entries);
            if (attributes == NULL) goto done;
        } else if (tag == 0x12 && !(seen & 4)) { /* key (2) */
            seen |= 4;
            if ((key = utf8(raw, start, stop)) == NULL) goto done;
        } else if (tag == 0x2A && !(seen & 32)) { /* stream_id (5) */
            seen |= 32;
            if ((stream_id = utf8(raw, start, stop)) == NULL) goto done;
        } else if (tag == 0x32 && !(seen & 64)) { /* msg_time (6) */
            seen |= 64;
            if ((msg_time = utf8(raw, start, stop)) == NULL) goto done;
        } else
            goto done;
        pos = stop;
    }
    if (value == NULL && (value = PyBytes_FromStringAndSize("", 0)) == NULL) goto done;
    if (attributes != NULL && PyDict_GET_SIZE(attributes) == 0) Py_CLEAR(attributes); /* `attributes or None` */
    message = PyObject_CallFunctionObjArgs(message_class, value, key ? key : Py_None, partition ? partition : Py_None,
                                           attributes ? attributes : Py_None, stream_id ? stream_id : Py_None,
                                           msg_time ? msg_time : Py_None, NULL);
done:
    Py_XDECREF(value);
    Py_XDECREF(key);
    Py_XDECREF(partition);
    Py_XDECREF(attributes);
    Py_XDECREF(stream_id);
    Py_XDECREF(msg_time);
    (void)raw_obj;
    return message;
}

static PyObject *py_decode_publish(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode_publish(raw, message_class) takes 2 arguments");
        return NULL;
    }
    PyObject *raw_obj = args[0], *message_class = args[1];
    if (!PyBytes_CheckExact(raw_obj)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *raw = (const unsigned char *)PyBytes_AS_STRING(raw_obj);
    Py_ssize_t end = PyBytes_GET_SIZE(raw_obj), pos = 0;
    PyObject *topic = NULL, *messages = PyList_New(0), *maps = PyDict_New(), *result = NULL;
    if (messages == NULL || maps == NULL) goto done;
    while (pos < end) {
        unsigned char tag = raw[pos];
        Py_ssize_t start, stop;
        if (get_length(raw, end, pos + 1, &start, &stop)) goto unsupported;
        if (tag == 0x12) { /* messages (2) */
            PyObject *message = read_message(raw, start, stop, raw_obj, maps, message_class);
            if (message == NULL) goto failed;
            int appended = PyList_Append(messages, message);
            Py_DECREF(message);
            if (appended < 0) goto done;
        } else if (tag == 0x0A && topic == NULL) { /* topic (1) */
            if ((topic = utf8(raw, start, stop)) == NULL) goto failed;
        } else
            goto unsupported;
        pos = stop;
    }
    if (topic == NULL && (topic = PyUnicode_FromStringAndSize("", 0)) == NULL) goto done;
    result = PyTuple_Pack(2, topic, messages);
    goto done;
failed:
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) goto done;
    PyErr_Clear(); /* whatever a field raised: the reference reads the request, or raises what it raises */
unsupported:
    result = Py_NewRef(Py_NotImplemented);
done:
    Py_XDECREF(topic);
    Py_XDECREF(messages);
    Py_XDECREF(maps);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_receipts", (PyCFunction)(void (*)(void))py_encode_receipts, METH_FASTCALL,
     "encode_receipts(outcomes, first, tag) -> the stored outcomes' results/acks, or NotImplemented"},
    {"decode_publish", (PyCFunction)(void (*)(void))py_decode_publish, METH_FASTCALL,
     "decode_publish(raw, message_class) -> (topic, messages), or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.grpc._publish_wire", "Publish requests read, and their receipts written, in C (see publish_wire.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__publish_wire(void) {
    if (delivered_init() < 0) return NULL;
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_index, "index")
    INTERN(s_result, "result")
    INTERN(s_append_offset, "append_offset")
    INTERN(s_append_time_ms, "append_time_ms")
#undef INTERN
    return PyModule_Create(&module);
}

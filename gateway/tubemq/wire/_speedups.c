/* Compiled per-message loops of the client core: the C twins of pure-Python reference
 * functions, chosen at import by gateway/tubemq/wire/speedups.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the
 * pure ones). Each function here must give byte-identical results and the same errors as its reference
 * (tests/test_speedups.py holds them together with hypothesis, malformed input included).
 *
 * decode_messages: gateway.tubemq.consumer.batch.decode_messages_py's loop over a GetMessage answer's
 *   TransferedMessage list: CRC check, attribute prefix split (each distinct prefix parsed once, by the
 *   Python parse_prefix it is given), client filter, one ConsumedMessage per kept message.
 * send_answers: gateway.tubemq.wire.send_answers.decode_send_answers_py: the SendMessageResponseB2P fields
 *   of each answer of a request_many batch (an answer it does not read exactly as protobuf does is None);
 *   usual_answer: whether a frame's payload is the envelope rpc.decode_response reads on its fast path.
 * whole_frames: gateway.tubemq.wire.frame_decoder.FrameDecoder._whole_frames_py's loop over the complete
 *   one-block frames of a read (a Frame each).
 *
 * Only the CPython C API is used (no third-party headers, no zlib headers): the module builds wherever
 * Python's own headers and a C compiler are, and setup.py marks it optional, so a machine without a
 * compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints */
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define INDEX_ENTRY_SIZE 28
#define PREFIX_LEN 4
#define FLAG_HAS_ATTRIBUTES 1
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

/* The offsets of the fields `names` of a plain slots dataclass (writable object slots of its own, no
 * __post_init__, allocated by the generic allocator), in order; -1 with TypeError naming what is not so. */
static int slot_offsets(PyTypeObject *type, PyObject *names, Py_ssize_t *offsets) {
    if (type->tp_alloc != PyType_GenericAlloc || type->tp_itemsize != 0 ||
        PyObject_HasAttrString((PyObject *)type, "__post_init__")) {
        PyErr_Format(PyExc_TypeError, "%s must be a plain slots dataclass", type->tp_name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *descr = PyDict_GetItemWithError(type->tp_dict, PyTuple_GET_ITEM(names, i));
        if (descr == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s has no slot %R", type->tp_name, PyTuple_GET_ITEM(names, i));
            return -1;
        }
        if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyErr_Format(PyExc_TypeError, "%R is not a slot", PyTuple_GET_ITEM(names, i));
            return -1;
        }
        if (PyDescr_TYPE(descr) != type) { /* copied from another class: an offset of that class's layout */
            PyErr_Format(PyExc_TypeError, "%R is not a slot of %s", PyTuple_GET_ITEM(names, i), type->tp_name);
            return -1;
        }
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY) || member->offset <= 0 ||
            member->offset + (Py_ssize_t)sizeof(PyObject *) > type->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "%R is not a writable object slot", PyTuple_GET_ITEM(names, i));
            return -1;
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (offsets[j] == member->offset) { /* a second value stored there would drop the first's reference */
                PyErr_Format(PyExc_TypeError, "%R is named twice", PyTuple_GET_ITEM(names, i));
                return -1;
            }
        offsets[i] = member->offset;
    }
    return 0;
}

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

/* --- slots_maker: cls(*values) without running __init__ ------------------------------------------------ */

/* A plain slots dataclass's __init__ only stores its arguments; a maker stores them into the new object's
 * slots directly (no Python frame per message, which __init__ would run). Called with
 * exactly one positional value per field it builds; any other call goes to the class, which then says what
 * is wrong or fills the defaults. */
#define MAX_MAKER_FIELDS 16

typedef struct {
    PyObject_HEAD vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t n;
    Py_ssize_t offsets[MAX_MAKER_FIELDS];
} Maker;

static PyObject *maker_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Maker *m = (Maker *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != m->n || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0))
        return PyObject_Vectorcall((PyObject *)m->cls, args, nargsf, kwnames);
    PyObject *obj = m->cls->tp_alloc(m->cls, 0);
    if (obj == NULL) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) *(PyObject **)((char *)obj + m->offsets[i]) = Py_NewRef(args[i]);
    return obj;
}

static void maker_dealloc(PyObject *self) {
    Py_XDECREF(((Maker *)self)->cls);
    PyObject_Free(self);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.tubemq.wire._speedups.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = maker_dealloc,
    .tp_doc = "cls(*values) of a plain slots dataclass, its slots stored directly (see slots_maker)",
};

static PyObject *py_slots_maker(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyType_Type, &cls, &PyTuple_Type, &names)) return NULL;
    if (PyTuple_GET_SIZE(names) > MAX_MAKER_FIELDS) {
        PyErr_Format(PyExc_TypeError, "a maker builds at most %d fields", MAX_MAKER_FIELDS);
        return NULL;
    }
    Py_ssize_t offsets[MAX_MAKER_FIELDS];
    if (slot_offsets((PyTypeObject *)cls, names, offsets) < 0) return NULL;
    Maker *m = PyObject_New(Maker, &MakerType);
    if (m == NULL) return NULL;
    m->vectorcall = maker_call;
    m->cls = (PyTypeObject *)Py_NewRef(cls);
    m->n = PyTuple_GET_SIZE(names);
    memcpy(m->offsets, offsets, sizeof offsets);
    return (PyObject *)m;
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

static PyObject *str_data, *str_msg_type, *str_msg_time;

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

/* --- frame_requests: the RPC frames of serialized requests (wire/rpc.py encode_requests) --------------- */

#define BLOCK_SIZE 8192
#define TOKEN_SIGNED ((int32_t)0xFF7FF4FEu)

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

/* --- send_answers: SendMessageResponseB2P of each answer of a batch (wire/send_answers.py) ------------- */

static PyObject *str_method, *str_payload_field;

/* A varint at *p (before end): 0 and the value, or -1 for anything the reference may read otherwise (cut
 * off, longer than ten bytes, or a tenth byte above 1). */
static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *value) {
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

/* The usual success answer's envelope (rpc.py decode_response's fast path): prefix, varint(body size), then
 * a body that is exactly 08 <method, one byte> 12 varint(n) <n data bytes>. 0 with the method and the data's
 * bounds when payload is that (decode_response then reads it without error, to the same method and data),
 * -1 for anything else (decode_response reads it its own way). */
static int usual_envelope(const unsigned char *p, Py_ssize_t len, const unsigned char *prefix, Py_ssize_t prefix_len,
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

/* --- whole_frames: complete one-block frames of a read (wire/frame_decoder.py FrameDecoder._whole_frames) -- */

/* The Frame class (a slots dataclass of serial and payload), its two slots written directly as for the
 * message class above: set_frame_type checks its shape and refuses anything else. */
static PyTypeObject *frame_type = NULL;
static Py_ssize_t frame_offsets[2];

static PyObject *py_set_frame_type(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *cls;
    if (!PyArg_ParseTuple(args, "O!", &PyType_Type, &cls)) return NULL;
    PyObject *names = Py_BuildValue("(ss)", "serial", "payload");
    if (names == NULL) return NULL;
    Py_ssize_t offsets[2];
    int found = slot_offsets((PyTypeObject *)cls, names, offsets);
    Py_DECREF(names);
    if (found < 0) return NULL;
    memcpy(frame_offsets, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_XSETREF(frame_type, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

static int32_t get_int32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

/* whole_frames(data, pos, limit, frames) -> pos: from pos, each complete frame of one block whose header is
 * the begin token, listSize 1 and a block length in 0..limit that fits the data is appended to frames as
 * Frame(serial, payload); returns where the first other frame (or the end) starts. */
static PyObject *py_whole_frames(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos, limit;
    PyObject *frames;
    if (!PyArg_ParseTuple(args, "y*nnO!", &data, &pos, &limit, &PyList_Type, &frames)) return NULL;
    if (frame_type == NULL) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_RuntimeError, "set_frame_type was not called");
        return NULL;
    }
    const unsigned char *raw = data.buf;
    Py_ssize_t end = data.len;
    if (pos < 0) pos = 0;
    while (pos <= end && end - pos >= 16) {
        const unsigned char *h = raw + pos;
        int32_t length = get_int32(h + 12);
        Py_ssize_t start = pos + 16;
        if (get_int32(h) != TOKEN_SIGNED || get_int32(h + 8) != 1 || length < 0 || length > limit ||
            length > end - start)
            break;
        PyObject *payload = PyBytes_FromStringAndSize((const char *)raw + start, length);
        if (payload == NULL) goto fail;
        PyObject *serial = PyLong_FromLong((long)get_int32(h + 4));
        if (serial == NULL) {
            Py_DECREF(payload);
            goto fail;
        }
        PyObject *frame = frame_type->tp_alloc(frame_type, 0);
        if (frame == NULL) {
            Py_DECREF(payload);
            Py_DECREF(serial);
            goto fail;
        }
        *(PyObject **)((char *)frame + frame_offsets[0]) = serial;
        *(PyObject **)((char *)frame + frame_offsets[1]) = payload;
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0) goto fail;
        pos = start + length;
    }
    PyBuffer_Release(&data);
    return PyLong_FromSsize_t(pos);
fail:
    PyBuffer_Release(&data);
    return NULL;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"set_message_type", py_set_message_type, METH_VARARGS,
     "set_message_type(cls, field_names): the slots dataclass decode_messages builds."},
    {"slots_maker", py_slots_maker, METH_VARARGS,
     "slots_maker(cls, field_names) -> a callable building cls from one positional value per field"},
    {"decode_messages", py_decode_messages, METH_VARARGS,
     "decode_messages(wire, filters, curr_offset, exact, parse_prefix) -> (messages, kept_bytes, "
     "bad_checksum, bad_payload, filtered)"},
    {"encode_sends", py_encode_sends, METH_VARARGS,
     "encode_sends(prefix, fields, auth, partition_ids, messages) -> [SendMessageRequestP2B bytes]"},
    {"frame_requests", py_frame_requests, METH_VARARGS,
     "frame_requests(serials, prefix, body_head, requests, frame_one) -> [request frame bytes]"},
    {"send_answers", py_send_answers, METH_VARARGS,
     "send_answers(answers, method, response_type, frame_type, prefix) -> [SendMessageResponseB2P fields or None]"},
    {"set_frame_type", py_set_frame_type, METH_VARARGS, "set_frame_type(cls): the Frame class whole_frames builds."},
    {"whole_frames", py_whole_frames, METH_VARARGS,
     "whole_frames(data, pos, limit, frames) -> pos: the complete one-block frames from pos, appended"},
    {"usual_answer", py_usual_answer, METH_VARARGS,
     "usual_answer(payload, prefix) -> whether payload is the usual success envelope"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.wire._speedups",
                                    "Compiled per-message loops of the client core (see speedups.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__speedups(void) {
    if (PyType_Ready(&MakerType) < 0) return NULL;
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (zlib == NULL) return NULL;
    zlib_crc32 = PyObject_GetAttrString(zlib, "crc32");
    Py_DECREF(zlib);
    if (zlib_crc32 == NULL) return NULL;
    if ((str_payload = PyUnicode_InternFromString("payLoadData")) == NULL ||
        (str_flag = PyUnicode_InternFromString("flag")) == NULL ||
        (str_checksum = PyUnicode_InternFromString("checkSum")) == NULL ||
        (str_message_id = PyUnicode_InternFromString("messageId")) == NULL ||
        (str_data = PyUnicode_InternFromString("data")) == NULL ||
        (str_msg_type = PyUnicode_InternFromString("msg_type")) == NULL ||
        (str_msg_time = PyUnicode_InternFromString("msg_time")) == NULL ||
        (str_method = PyUnicode_InternFromString("method")) == NULL ||
        (str_payload_field = PyUnicode_InternFromString("payload")) == NULL ||
        (one = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}

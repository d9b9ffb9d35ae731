/* A GetMessage answer's messages decoded in C: gateway.tubemq.consumer.batch's decode_messages_py loop and
 * read_answer, chosen at import by gateway/tubemq/consumer/batch.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the
 * pure ones).
 *
 * decode_messages walks the TransferedMessage list of a parsed answer: CRC check, attribute prefix split
 * (each distinct prefix parsed once, by the Python parse_prefix it is given), client filter, one
 * ConsumedMessage per kept message. decode_answer does the same in one pass over the answer's bytes (the
 * frame's payload as it came off the socket), without a protobuf message: the answer's own fields, then
 * each message's, its CRC computed on the bytes in place and its body copied once. Each gives what its
 * reference gives, or (decode_answer) hands the answer to it (tests/tubemq/test_speedups.py holds them together
 * with hypothesis, malformed input included).
 *
 * Only the CPython C API is used (no third-party headers, no zlib headers: the CRC-32 is a Python callable):
 * the module builds wherever Python's own headers and a C compiler are, and setup.py marks it optional, so a
 * machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "slots.h"
#include "rpc_frame.h" /* gateway/_cext: varints, the usual answer's envelope */

#define INDEX_ENTRY_SIZE 28
#define PREFIX_LEN 4
#define MESSAGE_FIELDS 9

/* --- CRC-32 ------------------------------------------------------------------------------------------ */

/* The CRC-32 function batch.py chooses (payload.crc32, ISA-L's), called through Python: its carry-less
 * multiply folding is faster per KiB than a table loop compiled here, by far more than the call through
 * Python costs, and it needs no headers. set_crc32 sets it. */
static PyObject *crc32_func = NULL;

static PyObject *py_set_crc32(PyObject *Py_UNUSED(self), PyObject *func) {
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "set_crc32 needs a callable");
        return NULL;
    }
    Py_XSETREF(crc32_func, Py_NewRef(func));
    Py_RETURN_NONE;
}

/* crc32(data) & 0x7FFFFFFF == checksum: 1 yes, 0 no, -1 error. A checksum that is not an int (or is
 * outside int64) never matches, as Python's != says. */
static int checksum_matches(PyObject *data, PyObject *checksum) {
    PyObject *crc = PyObject_CallOneArg(crc32_func, data);
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

/* --- decode_messages and decode_answer: what they share ------------------------------------------------ */

static PyObject *str_payload, *str_flag, *str_checksum, *str_message_id, *one, *empty_bytes;

/* Python's data[:end] for a slice end that may be negative or past the end. */
static Py_ssize_t slice_end(Py_ssize_t end, Py_ssize_t len) {
    if (end < 0) end += len;
    if (end < 0) return 0;
    return end > len ? len : end;
}

/* One call's state: its arguments, what it built so far and what it counted. */
typedef struct {
    PyObject *filters, *curr_obj, *parse_prefix; /* borrowed */
    int filtering, exact;
    PyObject *messages, *prefixes, *last_key, *last, *no_attributes;
    long long kept_bytes, bad_checksum, bad_payload, filtered;
} decoder;

/* 0, or -1 with the error set; filters must be None or a set (the reference's `if filters`) */
static int decoder_init(decoder *d, PyObject *filters, PyObject *curr_obj, int exact, PyObject *parse_prefix) {
    memset(d, 0, sizeof *d);
    if (message_type == NULL || crc32_func == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "set_message_type and set_crc32 must be called first");
        return -1;
    }
    d->filtering = filters == Py_None ? 0 : PyObject_IsTrue(filters);
    if (d->filtering < 0) return -1;
    if (d->filtering && !PyAnySet_Check(filters)) {
        PyErr_SetString(PyExc_TypeError, "filters must be a set or frozenset");
        return -1;
    }
    d->filters = filters;
    d->curr_obj = curr_obj;
    d->exact = exact;
    d->parse_prefix = parse_prefix;
    d->messages = PyList_New(0);
    d->prefixes = PyDict_New();
    d->no_attributes = PyDict_New();
    return d->messages && d->prefixes && d->no_attributes ? 0 : -1;
}

static void decoder_clear(decoder *d) {
    Py_CLEAR(d->messages);
    Py_CLEAR(d->prefixes);
    Py_CLEAR(d->last_key);
    Py_CLEAR(d->last);
    Py_CLEAR(d->no_attributes);
}

/* (messages, kept_bytes, bad_checksum, bad_payload, filtered) */
static PyObject *decoder_result(decoder *d) {
    return Py_BuildValue("(OLLLL)", d->messages, d->kept_bytes, d->bad_checksum, d->bad_payload, d->filtered);
}

/* The attribute prefix of a payload: d->last, parsed by parse_prefix once per distinct prefix bytes (the
 * previous message's compared first). *data is the payload as bytes, or NULL: then made from raw[0:size]
 * when parse_prefix needs it (a new reference left in *data). 1 found, 0 unparseable (bad_payload), -1
 * error. */
static int prefix_of(decoder *d, PyObject **data, const char *raw, Py_ssize_t size, PyObject *flag_obj) {
    Py_ssize_t last_len = d->last_key == NULL ? 0 : PyBytes_GET_SIZE(d->last_key);
    if (d->last != NULL && last_len <= size && !memcmp(raw, PyBytes_AS_STRING(d->last_key), last_len)) return 1;
    PyObject *key;
    if (size >= PREFIX_LEN) {
        const unsigned char *u = (const unsigned char *)raw;
        int32_t attr_len =
            (int32_t)((uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | (uint32_t)u[3]);
        key = PyBytes_FromStringAndSize(raw, slice_end((Py_ssize_t)PREFIX_LEN + attr_len, size));
    } else {
        key = Py_NewRef(empty_bytes);
    }
    if (key == NULL) return -1;
    PyObject *known = PyDict_GetItemWithError(d->prefixes, key); /* borrowed */
    if (known != NULL) {
        Py_INCREF(known);
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    } else {
        if (*data == NULL && (*data = PyBytes_FromStringAndSize(raw, size)) == NULL) {
            Py_DECREF(key);
            return -1;
        }
        known = PyObject_CallFunctionObjArgs(d->parse_prefix, *data, flag_obj, NULL);
        if (known == NULL || known == Py_None) {
            Py_XDECREF(known);
            Py_DECREF(key);
            return known == NULL ? -1 : 0;
        }
        if (!PyTuple_CheckExact(known) || PyTuple_GET_SIZE(known) != 5 ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(known, 0))) {
            Py_DECREF(known);
            Py_DECREF(key);
            PyErr_SetString(PyExc_TypeError, "parse_prefix must return a 5-tuple or None");
            return -1;
        }
        if (PyDict_SetItem(d->prefixes, key, known) < 0) {
            Py_DECREF(known);
            Py_DECREF(key);
            return -1;
        }
    }
    Py_XSETREF(d->last_key, key);
    Py_XSETREF(d->last, known);
    return 1;
}

/* A message whose CRC matched: split its attribute prefix, apply the client filter, build its
 * ConsumedMessage and append it (or count it dropped). data is the payload as bytes or NULL (made from
 * raw[0:size] where a body or parse_prefix needs it); flag_obj and message_id are borrowed, message_id NULL
 * to read item.messageId (as the reference does, only for a message it keeps). 0, or -1 with the error
 * set. */
static int keep(decoder *d, PyObject *data, const char *raw, Py_ssize_t size, PyObject *flag_obj,
                int has_attributes, PyObject *item, PyObject *message_id, Py_ssize_t index) {
    PyObject *owned = NULL, *body = NULL, *attributes, *msg_type, *msg_time, *msg_key, *values[MESSAGE_FIELDS];
    int rc = -1;
    if (has_attributes) {
        int found = prefix_of(d, data != NULL ? &data : &owned, raw, size, flag_obj);
        if (found <= 0) {
            if (found == 0) d->bad_payload++;
            rc = found;
            goto done;
        }
        Py_ssize_t start = PyLong_AsSsize_t(PyTuple_GET_ITEM(d->last, 0));
        if (start == -1 && PyErr_Occurred()) goto done;
        if (start < 0 || start > size) {
            /* The reference slices data[start:] the way Python does; a prefix parser never gives a
             * start outside the payload it parsed, and a cached prefix matches this payload's start. */
            PyErr_SetString(PyExc_ValueError, "prefix start outside the payload");
            goto done;
        }
        attributes = PyTuple_GET_ITEM(d->last, 1);
        msg_type = PyTuple_GET_ITEM(d->last, 2);
        msg_time = PyTuple_GET_ITEM(d->last, 3);
        msg_key = PyTuple_GET_ITEM(d->last, 4);
        if (d->filtering) {
            int wanted = 0;
            if (msg_type != Py_None && (wanted = PyObject_IsTrue(msg_type)) == 1)
                wanted = PySet_Contains(d->filters, msg_type);
            if (wanted < 0) goto done;
            if (!wanted) {
                d->filtered++;
                rc = 0;
                goto done;
            }
        }
        body = start == 0 && data != NULL && PyBytes_CheckExact(data)
                   ? Py_NewRef(data)
                   : PyBytes_FromStringAndSize(raw + start, size - start);
    } else {
        attributes = d->no_attributes;
        msg_type = msg_time = msg_key = Py_None;
        if (d->filtering) { /* no $msgType$: the filter rejects it */
            d->filtered++;
            rc = 0;
            goto done;
        }
        body = data != NULL ? Py_NewRef(data) : PyBytes_FromStringAndSize(raw, size);
    }
    if (body == NULL) goto done;
    Py_ssize_t body_len = PyBytes_GET_SIZE(body);
    values[0] = message_id != NULL ? Py_NewRef(message_id) : PyObject_GetAttr(item, str_message_id);
    if (values[0] == NULL) goto done;
    values[1] = body;
    values[2] = Py_NewRef(attributes);
    values[3] = Py_NewRef(msg_type);
    values[4] = Py_NewRef(msg_time);
    values[5] = Py_NewRef(flag_obj);
    values[6] = PyLong_FromSsize_t(index);
    if (d->exact) {
        PyObject *step = PyLong_FromLongLong((long long)INDEX_ENTRY_SIZE * index);
        values[7] = step == NULL ? NULL : PyNumber_Add(d->curr_obj, step);
        Py_XDECREF(step);
    } else {
        values[7] = Py_NewRef(Py_None);
    }
    values[8] = Py_NewRef(msg_key);
    body = NULL; /* owned by values now */
    if (values[6] == NULL || values[7] == NULL) {
        for (int i = 0; i < MESSAGE_FIELDS; i++) Py_XDECREF(values[i]);
        goto done;
    }
    PyObject *message = new_message(values);
    if (message == NULL) goto done;
    int appended = PyList_Append(d->messages, message);
    Py_DECREF(message);
    if (appended < 0) goto done;
    d->kept_bytes += body_len;
    rc = 0;
done:
    Py_XDECREF(body);
    Py_XDECREF(owned);
    return rc;
}

/* --- decode_messages ----------------------------------------------------------------------------------- */

/* decode_messages(wire, filters, curr_offset, exact, parse_prefix) ->
 *     (messages, kept_bytes, bad_checksum, bad_payload, filtered)
 * parse_prefix(data, flag) is the reference's: (body start, attributes, msg_type, msg_time, key), or None
 * when the payload cannot be split. */
static PyObject *py_decode_messages(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *wire, *filters, *curr_obj, *parse_prefix;
    int exact;
    if (!PyArg_ParseTuple(args, "OOO!pO", &wire, &filters, &PyLong_Type, &curr_obj, &exact, &parse_prefix))
        return NULL;
    decoder d;
    if (decoder_init(&d, filters, curr_obj, exact, parse_prefix) < 0) {
        decoder_clear(&d);
        return NULL;
    }
    PyObject *iter = PyObject_GetIter(wire);
    if (iter == NULL) goto fail;
    PyObject *item;
    for (Py_ssize_t index = 0; (item = PyIter_Next(iter)) != NULL; index++) {
        PyObject *data = NULL, *flag_obj = NULL, *checksum = NULL;
        int failed = 1;
        if ((data = PyObject_GetAttr(item, str_payload)) == NULL ||
            (flag_obj = PyObject_GetAttr(item, str_flag)) == NULL ||
            (checksum = PyObject_GetAttr(item, str_checksum)) == NULL)
            goto item_done;
        int matches = checksum_matches(data, checksum);
        if (matches < 0) goto item_done;
        if (!matches) {
            d.bad_checksum++;
            failed = 0;
            goto item_done;
        }
        if (!PyBytes_Check(data)) {
            /* crc32 took it (a bytearray, a memoryview): the fast path below reads bytes only */
            PyErr_SetString(PyExc_TypeError, "payLoadData must be bytes");
            goto item_done;
        }
        /* flag & 1, as Python computes it (any int, negative ones in two's complement) */
        PyObject *low_bit = PyNumber_And(flag_obj, one);
        if (low_bit == NULL) goto item_done;
        int has_attributes = PyObject_IsTrue(low_bit);
        Py_DECREF(low_bit);
        if (has_attributes < 0) goto item_done;
        failed = keep(&d, data, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), flag_obj, has_attributes, item,
                      NULL, index) < 0;
    item_done:
        Py_XDECREF(data);
        Py_XDECREF(flag_obj);
        Py_XDECREF(checksum);
        Py_DECREF(item);
        if (failed) goto fail;
    }
    if (PyErr_Occurred()) goto fail;
    Py_DECREF(iter);
    PyObject *result = decoder_result(&d);
    decoder_clear(&d);
    return result;
fail:
    Py_XDECREF(iter);
    decoder_clear(&d);
    return NULL;
}

/* --- decode_answer ------------------------------------------------------------------------------------ */

/* A read-only buffer over bytes of an answer the caller keeps alive: the CRC-32 reads a payload through it,
 * so a message whose CRC fails is never copied, and one that is kept is copied once, into its body. */
typedef struct {
    PyObject_HEAD const char *raw;
    Py_ssize_t size;
} RawView;

static int rawview_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    RawView *v = (RawView *)self;
    return PyBuffer_FillInfo(view, self, (void *)v->raw, v->size, 1, flags);
}

static PyBufferProcs rawview_as_buffer = {rawview_getbuffer, NULL};

static PyTypeObject RawViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.tubemq.consumer._batch.RawView",
    .tp_basicsize = sizeof(RawView),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_buffer = &rawview_as_buffer,
    .tp_doc = "bytes of an answer, lent to the CRC-32 function (see decode_answer)",
};

/* crc32(raw[0:size]) & 0x7FFFFFFF == checksum: 1 yes, 0 no, -1 error; *view is reused while only this
 * call holds it */
static int raw_checksum_matches(RawView **view, const char *raw, Py_ssize_t size, long long checksum) {
    if (*view == NULL || Py_REFCNT(*view) != 1) {
        Py_XDECREF(*view);
        if ((*view = PyObject_New(RawView, &RawViewType)) == NULL) return -1;
    }
    (*view)->raw = raw;
    (*view)->size = size;
    PyObject *crc = PyObject_CallOneArg(crc32_func, (PyObject *)*view);
    if (crc == NULL) return -1;
    unsigned long value = PyLong_AsUnsignedLongMask(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred()) return -1;
    return (long long)(value & 0x7FFFFFFFul) == checksum;
}

#define UNUSUAL 1 /* not an error: the answer goes the general way (the protobuf library, the reference) */

/* an int32 field as protobuf reads it, for its canonical encodings (up to 0x7FFFFFFF, or a negative value
 * sign-extended to ten bytes); UNUSUAL for any other */
static int int32_of(uint64_t v, long long *out) {
    if (v <= 0x7FFFFFFFull || v >= 0xFFFFFFFF80000000ull) {
        *out = (long long)(int64_t)v;
        return 0;
    }
    return UNUSUAL;
}

/* the field at *p: its tag, and its value (varint) or its bytes' bounds (length-delimited); UNUSUAL for
 * another wire type, a tag above one byte or a field cut off */
static int next_field(const unsigned char **p, const unsigned char *end, int *tag, uint64_t *value,
                      const unsigned char **start, const unsigned char **stop) {
    *tag = *(*p)++;
    if (*tag & 0x80) return UNUSUAL;
    if ((*tag & 7) == 0) return read_varint(p, end, value) < 0 ? UNUSUAL : 0;
    if ((*tag & 7) != 2) return UNUSUAL;
    uint64_t size;
    if (read_varint(p, end, &size) < 0 || size > (uint64_t)(end - *p)) return UNUSUAL;
    *start = *p;
    *stop = *p += size;
    return 0;
}

/* one TransferedMessage in [p, end): CRC, then keep() */
static int decode_transfered(decoder *d, RawView **view, const unsigned char *p, const unsigned char *end,
                             Py_ssize_t index) {
    int seen = 0, tag;
    long long message_id = 0, checksum = 0, flag = 0;
    const unsigned char *payload = NULL, *payload_end = NULL;
    while (p < end) {
        uint64_t v = 0;
        const unsigned char *start = NULL, *stop = NULL;
        if (next_field(&p, end, &tag, &v, &start, &stop)) return UNUSUAL;
        int bit = 1 << (tag >> 3);
        if ((tag >> 3) > 4 || (seen & bit)) return UNUSUAL; /* unknown, or repeated (the last would count) */
        seen |= bit;
        switch (tag) {
        case 0x08: message_id = (long long)(int64_t)v; break;
        case 0x10: if (int32_of(v, &checksum)) return UNUSUAL; break;
        case 0x1a: payload = start; payload_end = stop; break;
        case 0x20: if (int32_of(v, &flag)) return UNUSUAL; break;
        default: return UNUSUAL; /* a known number with another wire type */
        }
    }
    if ((seen & 0x1e) != 0x1e) return UNUSUAL; /* a required field missing: the reference refuses it */
    const char *raw = (const char *)payload;
    Py_ssize_t size = payload_end - payload;
    int matches = raw_checksum_matches(view, raw, size, checksum);
    if (matches <= 0) {
        if (matches == 0) d->bad_checksum++;
        return matches;
    }
    PyObject *id_obj = PyLong_FromLongLong(message_id), *flag_obj = PyLong_FromLongLong(flag);
    int rc = id_obj && flag_obj ? keep(d, NULL, raw, size, flag_obj, (int)(flag & 1), NULL, id_obj, index) : -1;
    Py_XDECREF(id_obj);
    Py_XDECREF(flag_obj);
    return rc;
}

/* decode_answer(buffer, enveloped, prefix, method, filters, parse_prefix) ->
 *     (curr_offset, max_offset, lag_bytes, fetched, messages, kept_bytes, bad_checksum, bad_payload,
 *      filtered), or None
 * A GetMessageResponseB2C read and its messages decoded in one pass over its bytes, without a protobuf
 * message: buffer is the answer's data, or with enveloped the frame payload of the usual success answer
 * (prefix, then the body holding method and data). None when the answer is anything else than a 200 laid
 * out as the broker writes it (another code, an unknown or repeated field, another encoding of a number, a
 * required field missing, a frame of another envelope or method): the caller then parses it with the
 * protobuf library and decodes it with the reference, which gives the same result or its own error.
 * Offsets absent from the answer are -1; messages get exact offsets when the batch is dense to the end. */
static PyObject *py_decode_answer(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *buffer, *prefix, *filters, *parse_prefix;
    int enveloped;
    long method;
    if (!PyArg_ParseTuple(args, "O!pO!lOO", &PyBytes_Type, &buffer, &enveloped, &PyBytes_Type, &prefix, &method,
                          &filters, &parse_prefix))
        return NULL;
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buffer);
    const unsigned char *end = data + PyBytes_GET_SIZE(buffer);
    if (enveloped) {
        long got;
        if (usual_envelope(data, PyBytes_GET_SIZE(buffer), (const unsigned char *)PyBytes_AS_STRING(prefix),
                           PyBytes_GET_SIZE(prefix), &got, &data, &end) < 0 ||
            got != method)
            Py_RETURN_NONE;
    }
    /* the answer's own fields, and how many messages it holds */
    int seen = 0, tag;
    long long code = 0, curr = -1, max = -1, lag = -1, ignored;
    Py_ssize_t fetched = 0;
    const unsigned char *p = data;
    while (p < end) {
        uint64_t v = 0;
        const unsigned char *start = NULL, *stop = NULL;
        if (next_field(&p, end, &tag, &v, &start, &stop)) Py_RETURN_NONE;
        if (tag == 0x22) {
            fetched++;
            continue;
        }
        int bit = 1 << (tag >> 3);
        if ((tag >> 3) > 10 || (seen & bit)) Py_RETURN_NONE;
        seen |= bit;
        switch (tag) {
        case 0x08: case 0x38: case 0x48: break; /* success, escFlowCtrl, requireSlow */
        case 0x10: if (int32_of(v, &code)) Py_RETURN_NONE; break;
        case 0x1a: { /* errMsg: text the reference would refuse is refused here too */
            PyObject *text = PyUnicode_DecodeUTF8((const char *)start, stop - start, "strict");
            if (text == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            Py_DECREF(text);
            break;
        }
        case 0x28: curr = (long long)(int64_t)v; break;
        case 0x30: if (int32_of(v, &ignored)) Py_RETURN_NONE; break;
        case 0x40: lag = (long long)(int64_t)v; break;
        case 0x50: max = (long long)(int64_t)v; break;
        default: Py_RETURN_NONE;
        }
    }
    if ((seen & 0x6) != 0x6 || code != 200) Py_RETURN_NONE;
    /* batch.is_dense_to_end */
    int exact = curr >= 0 && fetched > 0 && max >= curr && (uint64_t)(max - curr) == (uint64_t)INDEX_ENTRY_SIZE * (uint64_t)fetched;
    PyObject *curr_obj = PyLong_FromLongLong(curr);
    if (curr_obj == NULL) return NULL;
    decoder d;
    RawView *view = NULL;
    PyObject *result = NULL;
    int rc = decoder_init(&d, filters, curr_obj, exact, parse_prefix);
    Py_ssize_t index = 0;
    for (p = data; rc == 0 && p < end;) {
        uint64_t v = 0;
        const unsigned char *start = NULL, *stop = NULL;
        next_field(&p, end, &tag, &v, &start, &stop); /* read once already */
        if (tag == 0x22) rc = decode_transfered(&d, &view, start, stop, index++);
    }
    if (rc == 0) {
        PyObject *decoded = decoder_result(&d);
        if (decoded != NULL) {
            result = Py_BuildValue("(LLLnOOOOO)", curr, max, lag, fetched, PyTuple_GET_ITEM(decoded, 0),
                                   PyTuple_GET_ITEM(decoded, 1), PyTuple_GET_ITEM(decoded, 2),
                                   PyTuple_GET_ITEM(decoded, 3), PyTuple_GET_ITEM(decoded, 4));
            Py_DECREF(decoded);
        }
    } else if (rc == UNUSUAL) {
        result = Py_NewRef(Py_None);
    }
    Py_XDECREF(view);
    Py_DECREF(curr_obj);
    decoder_clear(&d);
    return result;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"set_message_type", py_set_message_type, METH_VARARGS,
     "set_message_type(cls, field_names): the slots dataclass decode_messages builds."},
    {"set_crc32", py_set_crc32, METH_O, "set_crc32(func): the CRC-32 function payloads are checked with."},
    {"decode_messages", py_decode_messages, METH_VARARGS,
     "decode_messages(wire, filters, curr_offset, exact, parse_prefix) -> (messages, kept_bytes, "
     "bad_checksum, bad_payload, filtered)"},
    {"decode_answer", py_decode_answer, METH_VARARGS,
     "decode_answer(buffer, enveloped, prefix, method, filters, parse_prefix) -> (curr_offset, max_offset, "
     "lag_bytes, fetched, messages, kept_bytes, bad_checksum, bad_payload, filtered), or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.consumer._batch", "A GetMessage answer's messages decoded in C (see batch.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__batch(void) {
    if ((str_payload = PyUnicode_InternFromString("payLoadData")) == NULL ||
        (str_flag = PyUnicode_InternFromString("flag")) == NULL ||
        (str_checksum = PyUnicode_InternFromString("checkSum")) == NULL ||
        (str_message_id = PyUnicode_InternFromString("messageId")) == NULL || (one = PyLong_FromLong(1)) == NULL ||
        (empty_bytes = PyBytes_FromStringAndSize(NULL, 0)) == NULL || PyType_Ready(&RawViewType) < 0)
        return NULL;
    return PyModule_Create(&module);
}

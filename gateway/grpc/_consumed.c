/* The gRPC answer of delivered messages (issue #26): gateway.grpc.consumed_wire.encode_consumed_py's loop in C,
 * chosen at import by gateway/grpc/consumed_wire.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure one); and
 * the receipts of stored publishes, publish_wire.encode_stored_py's loop (encode_receipts), and the reading
 * of publish requests, publish_wire._decode (decode_publish), at the end.
 *
 * encode_consumed(messages) -> bytes, or NotImplemented when a message holds something the fast path does
 * not take (a value outside int64/uint64, text that is not a str or not encodable, attributes that are not
 * a dict, a body that is not bytes) or a field raised: the caller then runs the Python reference on the
 * whole batch, so the two give the same bytes and the same errors (tests/test_speedups.py holds them
 * together). Only MemoryError is raised here.
 *
 * Each ConsumedMessage record (proto/tubemq/gateway/v1/gateway.proto) is written in field-number order:
 * 1 token, 2-5 the partition (encoded once per run of one partition), 6 offset, 7 message_id, 8-10 stream id,
 * msg time and attributes (encoded once per run of the same objects), 13 delivery_attempt, 14 deadline,
 * 11 value, 12 key; proto3 fields at their default are left out, as the reference does.
 */
#include <limits.h>

#include "delivered.h" /* gateway/_cext: the delivered message's fields, varints, the growing buffer */

/* --- reading the messages -------------------------------------------------------------------------------- */


/* An int field as the reference's _varint encodes it: int64 as two's complement, or uint64. */
static int int_value(PyObject *value, uint64_t *out) {
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
static int text_value(PyObject *value, const char **raw, Py_ssize_t *size) {
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
static int add_text(buffer *b, char tag, PyObject *value) {
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

static int add_int(buffer *b, char tag, PyObject *value, int skip_zero) {
    uint64_t v;
    int rc = int_value(value, &v);
    if (rc) return rc;
    if (skip_zero && v == 0) return 0;
    if (reserve(b, 11) < 0) return -1;
    add_byte(b, tag);
    add_varint(b, v);
    return 0;
}


/* fields 2-5 of a partition run */
static int encode_head(buffer *b, PyObject *topic, PyObject *partition_key, PyObject *broker_id,
                       PyObject *partition_id) {
    int rc;
    int empty = PyUnicode_Check(topic) && PyUnicode_GET_LENGTH(topic) == 0;
    if (!empty && (rc = add_text(b, 0x12, topic))) return rc;
    empty = PyUnicode_Check(partition_key) && PyUnicode_GET_LENGTH(partition_key) == 0;
    if (!empty && (rc = add_text(b, 0x1a, partition_key))) return rc;
    if ((rc = add_int(b, 0x20, broker_id, 1))) return rc;
    return add_int(b, 0x28, partition_id, 1);
}

/* fields 8-10 */
static int encode_meta(buffer *b, PyObject *stream_id, PyObject *msg_time, PyObject *attributes) {
    int rc;
    if (stream_id != Py_None && (rc = add_text(b, 0x42, stream_id))) return rc;
    if (msg_time != Py_None && (rc = add_text(b, 0x4a, msg_time))) return rc;
    if (!PyDict_CheckExact(attributes)) return UNSUPPORTED;
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(attributes, &pos, &name, &value)) {
        const char *n, *v;
        Py_ssize_t n_size, v_size;
        if ((rc = text_value(name, &n, &n_size)) || (rc = text_value(value, &v, &v_size))) return rc;
        Py_ssize_t entry = 1 + varint_size((uint64_t)n_size) + n_size + 1 + varint_size((uint64_t)v_size) + v_size;
        if (reserve(b, 1 + 10 + entry) < 0) return -1;
        add_byte(b, 0x52);
        add_varint(b, (uint64_t)entry);
        add_byte(b, 0x0a);
        add_varint(b, (uint64_t)n_size);
        add(b, n, n_size);
        add_byte(b, 0x12);
        add_varint(b, (uint64_t)v_size);
        add(b, v, v_size);
    }
    return 0;
}

/* --- encode_consumed ---------------------------------------------------------------------------------- */


static PyObject *py_encode_consumed(PyObject *Py_UNUSED(self), PyObject *arg) {
    PyObject *seq = items_of(arg, "messages must be a sequence");
    if (seq == NULL) return NULL;
    buffer out = {0}, head = {0}, meta = {0}, rec = {0};
    fields prev, cur;
    memset(&prev, 0, sizeof prev);
    memset(&cur, 0, sizeof cur);
    int rc = 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < count && rc == 0; i++) {
        if ((rc = fields_read(PySequence_Fast_GET_ITEM(seq, i), &cur))) break;
        PyObject *token_seq = cur.outer[0], *attempt = cur.outer[6], *deadline = cur.outer[7];
        PyObject *message_id = cur.inner[0], *body = cur.inner[1], *attributes = cur.inner[2],
                 *stream_id = cur.inner[3], *msg_time = cur.inner[4], *offset = cur.inner[5], *key = cur.inner[6];
        /* the partition's fields, again when it changed (the reference's partition_runs) */
        int run = new_run(&cur, &prev, i == 0);
        if (run < 0) {
            rc = -1;
            break;
        }
        if (run) {
            head.len = 0;
            if ((rc = encode_head(&head, cur.outer[1], cur.outer[2], cur.outer[3], cur.outer[4]))) break;
        }
        /* the attribute fields, again when their objects changed */
        if (i == 0 || attributes != prev.inner[2] || stream_id != prev.inner[3] || msg_time != prev.inner[4]) {
            meta.len = 0;
            if ((rc = encode_meta(&meta, stream_id, msg_time, attributes))) break;
        }
        if (!PyBytes_Check(body) || !PyLong_Check(token_seq)) {
            rc = UNSUPPORTED;
            break;
        }
        int overflow;
        long long token = PyLong_AsLongLongAndOverflow(token_seq, &overflow);
        if (token == -1 && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        if (overflow) {
            rc = UNSUPPORTED;
            break;
        }
        char digits[24];
        int digits_len = snprintf(digits, sizeof digits, "%lld", token);
        /* the record's fields before the value */
        rec.len = 0;
        if (reserve(&rec, 2 + digits_len + head.len) < 0) {
            rc = -1;
            break;
        }
        add_byte(&rec, 0x0a);
        add_byte(&rec, (char)digits_len);
        add(&rec, digits, digits_len);
        add(&rec, head.data, head.len);
        if (offset != Py_None && (rc = add_int(&rec, 0x30, offset, 0))) break;
        if ((rc = add_int(&rec, 0x38, message_id, 1))) break;
        if (reserve(&rec, meta.len) < 0) {
            rc = -1;
            break;
        }
        add(&rec, meta.data, meta.len);
        if ((rc = add_int(&rec, 0x68, attempt, 1)) || (rc = add_int(&rec, 0x70, deadline, 1))) break;
        Py_ssize_t size = PyBytes_GET_SIZE(body);
        if (reserve(&rec, 11) < 0) {
            rc = -1;
            break;
        }
        if (size) { /* an empty value is left out, as proto3 does */
            add_byte(&rec, 0x5a);
            add_varint(&rec, (uint64_t)size);
        }
        const char *key_raw = NULL;
        Py_ssize_t key_size = 0, key_len = 0;
        if (key != Py_None) {
            if ((rc = text_value(key, &key_raw, &key_size))) break;
            key_len = 1 + varint_size((uint64_t)key_size) + key_size;
        }
        Py_ssize_t total = rec.len + size + key_len;
        if (reserve(&out, 1 + 10 + total) < 0) {
            rc = -1;
            break;
        }
        add_byte(&out, 0x0a);
        add_varint(&out, (uint64_t)total);
        add(&out, rec.data, rec.len);
        add(&out, PyBytes_AS_STRING(body), size);
        if (key != Py_None) {
            add_byte(&out, 0x62);
            add_varint(&out, (uint64_t)key_size);
            add(&out, key_raw, key_size);
        }
        fields_clear(&prev);
        prev = cur;
        memset(&cur, 0, sizeof cur);
    }
    fields_clear(&prev);
    fields_clear(&cur);
    Py_DECREF(seq);
    PyObject *result = answer_or_reference(rc, &out);
    PyMem_Free(out.data);
    PyMem_Free(head.data);
    PyMem_Free(meta.data);
    PyMem_Free(rec.data);
    return result;
}

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
    {"encode_consumed", py_encode_consumed, METH_O,
     "encode_consumed(messages) -> the serialized PollResponse/SubscribeResponse, or NotImplemented"},
    {"encode_receipts", (PyCFunction)(void (*)(void))py_encode_receipts, METH_FASTCALL,
     "encode_receipts(outcomes, first, tag) -> the stored outcomes' results/acks, or NotImplemented"},
    {"decode_publish", (PyCFunction)(void (*)(void))py_decode_publish, METH_FASTCALL,
     "decode_publish(raw, message_class) -> (topic, messages), or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.grpc._consumed",
                                    "The gRPC answers of delivered messages and of stored publishes in C (consumed_wire.py, publish_wire.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__consumed(void) {
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

/* The gRPC answer of delivered messages: gateway.grpc.consumed_wire.encode_consumed_py's loop in C, chosen
 * at import by gateway/grpc/consumed_wire.py (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure one).
 *
 * encode_consumed(runs) -> bytes, or NotImplemented when a run or a message holds something the fast path
 * does not take (a value outside int64/uint64, text that is not a str or not encodable, attributes that are
 * not a dict, a body that is not bytes, a run whose messages are not a list holding its count from its
 * start) or a field raised: the caller then runs the Python reference on the
 * whole batch, so the two give the same bytes and the same errors (tests/tubemq/test_speedups.py holds them
 * together). Only MemoryError is raised here.
 *
 * Each ConsumedMessage record (proto/tubemq/gateway/v1/gateway.proto) is written in field-number order:
 * 1 token (the run's first plus the message's place in it), 2-5 the partition (encoded once per run),
 * 6 offset, 7 message_id, 8-10 stream id, msg time and attributes (encoded once per stretch of the same
 * objects), 13 delivery_attempt, 14 deadline (once per run), 11 value, 12 key; proto3 fields at their default are left out, as the reference does.
 */
#include <limits.h>

#include "pb_fields.h" /* gateway/_cext: the delivered message's fields, varints, the growing buffer */

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
    PyObject *seq = items_of(arg, "runs must be a sequence");
    if (seq == NULL) return NULL;
    buffer out = {0}, head = {0}, meta = {0}, extra = {0}, rec = {0};
    run_fields run;
    fields prev, cur;
    memset(&run, 0, sizeof run);
    memset(&prev, 0, sizeof prev);
    memset(&cur, 0, sizeof cur);
    int rc = 0, any = 0;
    Py_ssize_t n_runs = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t k = 0; k < n_runs && rc == 0; k++) {
        run_clear(&run);
        if ((rc = run_read(PySequence_Fast_GET_ITEM(seq, k), &run))) break;
        if (run.count == 0) continue;
        /* once per run: the partition's fields (2-5), delivery_attempt and deadline (13, 14) */
        head.len = 0;
        if ((rc = encode_head(&head, run.run[1], run.run[2], run.run[3], run.run[4]))) break;
        extra.len = 0;
        if ((rc = add_int(&extra, 0x68, run.run[8], 1)) || (rc = add_int(&extra, 0x70, run.run[9], 1))) break;
        for (Py_ssize_t i = 0; i < run.count; i++) {
            if ((rc = message_read(&run, i, &cur))) break;
            PyObject *message_id = cur.inner[0], *body = cur.inner[1], *attributes = cur.inner[2],
                     *stream_id = cur.inner[3], *msg_time = cur.inner[4], *offset = cur.inner[5], *key = cur.inner[6];
            /* the attribute fields, again when their objects changed */
            if (!any || attributes != prev.inner[2] || stream_id != prev.inner[3] || msg_time != prev.inner[4]) {
                meta.len = 0;
                if ((rc = encode_meta(&meta, stream_id, msg_time, attributes))) break;
            }
            if (!PyBytes_Check(body)) {
                rc = UNSUPPORTED;
                break;
            }
            char digits[24];
            int digits_len = (int)(put_decimal(digits, run.first + i) - digits);
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
            if (reserve(&rec, meta.len + extra.len + 11) < 0) {
                rc = -1;
                break;
            }
            add(&rec, meta.data, meta.len);
            add(&rec, extra.data, extra.len);
            Py_ssize_t size = PyBytes_GET_SIZE(body);
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
            any = 1;
            fields_clear(&prev);
            prev = cur;
            memset(&cur, 0, sizeof cur);
        }
    }
    run_clear(&run);
    fields_clear(&prev);
    fields_clear(&cur);
    Py_DECREF(seq);
    PyObject *result = answer_or_reference(rc, &out);
    PyMem_Free(out.data);
    PyMem_Free(head.data);
    PyMem_Free(meta.data);
    PyMem_Free(extra.data);
    PyMem_Free(rec.data);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_consumed", py_encode_consumed, METH_O,
     "encode_consumed(runs) -> the serialized PollResponse/SubscribeResponse, or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.grpc._consumed_wire", "The gRPC answer of delivered messages in C (see consumed_wire.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__consumed_wire(void) {
    if (delivered_init() < 0) return NULL;
    return PyModule_Create(&module);
}

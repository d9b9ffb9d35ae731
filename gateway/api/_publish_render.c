/* The answer of a REST publish batch whose every message was stored, written in C:
 * gateway/api/publish_render.py's render_stored_py in one call (render_stored), chosen once by that module
 * (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure reference).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "outbuf.h"

/* render_stored(topic_json, outcomes): the bytes gateway/api/publish_render.render_stored_py writes for
 * outcomes that all hold a result (topic_json: the topic as JSON text), or None when one holds none or holds
 * what the reference writes differently (a partition key that is not plain ASCII text, a number that is not
 * an int within int64): the reference then writes it. tests/api/test_publish_render.py holds the two alike. */

static PyObject *str_index, *str_result, *str_partition_key, *str_partition_index, *str_broker_id,
    *str_partition_id, *str_append_offset, *str_message_id, *str_append_time_ms;

/* An int attribute of obj within int64 into *v: 1, 0 when it is not an exact int within int64 (the
 * reference writes it), -1 with an error set. */
static int int_field(PyObject *obj, PyObject *name, long long *v) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) return -1;
    int usual = PyLong_CheckExact(value);
    if (usual) {
        int overflow;
        *v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (*v == -1 && PyErr_Occurred()) {
            Py_DECREF(value);
            return -1;
        }
        usual = !overflow;
    }
    Py_DECREF(value);
    return usual;
}

#define ADD_TEXT(b, text) add(b, text, (Py_ssize_t)sizeof(text) - 1)

static void add_int(buffer *b, long long v) { b->len = put_decimal(b->data + b->len, v) - b->data; }

/* One stored outcome's JSON object appended to b: 1, 0 when the reference must write it (no result, a
 * partition key that is not plain ASCII text, a number that is not an int within int64), -1 on failure. */
static int render_outcome(buffer *b, PyObject *outcome) {
    long long index, partition, broker_id, partition_id, offset, message_id, append_time;
    int usual = int_field(outcome, str_index, &index);
    if (usual != 1) return usual;
    PyObject *result = PyObject_GetAttr(outcome, str_result);
    if (result == NULL) return -1;
    if (result == Py_None) {
        Py_DECREF(result);
        return 0;
    }
    PyObject *key = NULL;
    struct {
        PyObject *name;
        long long *v;
    } ints[] = {{str_partition_index, &partition}, {str_broker_id, &broker_id}, {str_partition_id, &partition_id},
                {str_append_offset, &offset},      {str_message_id, &message_id}, {str_append_time_ms, &append_time}};
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++) {
        usual = int_field(result, ints[k].name, ints[k].v);
        if (usual != 1) goto done;
    }
    key = PyObject_GetAttr(result, str_partition_key);
    if (key == NULL) {
        usual = -1;
        goto done;
    }
    usual = 0;
    if (!PyUnicode_CheckExact(key) || !PyUnicode_IS_ASCII(key)) goto done;
    Py_ssize_t key_len = PyUnicode_GET_LENGTH(key);
    const char *key_text = (const char *)PyUnicode_DATA(key);
    for (Py_ssize_t i = 0; i < key_len; i++)
        if ((unsigned char)key_text[i] < 0x20 || key_text[i] == '"' || key_text[i] == '\\') goto done;
    /* the fixed text, seven numbers of at most 20 characters each, the key */
    if (reserve(b, 160 + 7 * 20 + key_len) < 0) {
        usual = -1;
        goto done;
    }
    ADD_TEXT(b, "{\"index\":");
    add_int(b, index);
    ADD_TEXT(b, ",\"status\":200,\"partition\":");
    add_int(b, partition);
    ADD_TEXT(b, ",\"partitionKey\":\"");
    add(b, key_text, key_len);
    ADD_TEXT(b, "\",\"brokerId\":");
    add_int(b, broker_id);
    ADD_TEXT(b, ",\"partitionId\":");
    add_int(b, partition_id);
    ADD_TEXT(b, ",\"offset\":");
    add_int(b, offset);
    ADD_TEXT(b, ",\"messageId\":\"");
    add_int(b, message_id);
    ADD_TEXT(b, "\",\"appendTime\":");
    add_int(b, append_time);
    add_byte(b, '}');
    usual = 1;
done:
    Py_XDECREF(key);
    Py_DECREF(result);
    return usual;
}

static PyObject *py_render_stored(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *topic_json, *outcomes;
    if (!PyArg_ParseTuple(args, "SO:render_stored", &topic_json, &outcomes)) return NULL;
    PyObject *items = items_of(outcomes, "outcomes must be a sequence");
    if (items == NULL) return NULL;
    buffer b = {NULL, 0, 0};
    Py_ssize_t n = PyTuple_GET_SIZE(items), topic_len = PyBytes_GET_SIZE(topic_json);
    PyObject *answer = NULL;
    if (reserve(&b, topic_len + 32) < 0) goto done;
    ADD_TEXT(&b, "{\"topic\":");
    add(&b, PyBytes_AS_STRING(topic_json), topic_len);
    ADD_TEXT(&b, ",\"results\":[");
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) {
            if (reserve(&b, 1) < 0) goto done;
            add_byte(&b, ',');
        }
        int usual = render_outcome(&b, PyTuple_GET_ITEM(items, i));
        if (usual < 0) goto done;
        if (usual == 0) {
            answer = Py_NewRef(Py_None);
            goto done;
        }
    }
    if (reserve(&b, 2) < 0) goto done;
    ADD_TEXT(&b, "]}");
    answer = PyBytes_FromStringAndSize(b.data, b.len);
done:
    PyMem_Free(b.data);
    Py_DECREF(items);
    return answer;
}

static PyMethodDef methods[] = {
    {"render_stored", py_render_stored, METH_VARARGS,
     "render_stored(topic_json, outcomes) -> bytes | None: the 200 answer of a batch whose every message was "
     "stored, or None when the reference must write it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.api._publish_render",
                                    "The answer of a publish batch whose every message was stored, in one call (see routes_topics.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__publish_render(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(str_index, "index");
    INTERN(str_result, "result");
    INTERN(str_partition_key, "partition_key");
    INTERN(str_partition_index, "partition_index");
    INTERN(str_broker_id, "broker_id");
    INTERN(str_partition_id, "partition_id");
    INTERN(str_append_offset, "append_offset");
    INTERN(str_message_id, "message_id");
    INTERN(str_append_time_ms, "append_time_ms");
#undef INTERN
    return PyModule_Create(&module);
}

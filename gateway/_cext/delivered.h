/* Reading a gateway.service.delivered.DeliveredRun and its ConsumedMessages from C: the fields the answers
 * of delivered messages are written from (a run's once, then each message's), shared by
 * gateway/grpc/_consumed_wire.c (the gRPC answer), gateway/api/_consumer_render.c (the poll JSON and SSE
 * events) and, for the field names, gateway/grpc/_publish_wire.c (the receipts). Call delivered_init() once
 * from the module's init function. */
#ifndef GATEWAY_DELIVERED_H
#define GATEWAY_DELIVERED_H

#include "outbuf.h"
#include <limits.h>
#include <structmember.h>

static PyObject *s_first, *s_messages, *s_start, *s_count, *s_topic, *s_partition_key, *s_broker_id,
    *s_partition_id, *s_attempt, *s_deadline_ms, *s_message_id, *s_body, *s_attributes, *s_stream_id, *s_msg_time, *s_offset, *s_key;

#define UNSUPPORTED 1 /* not an error: hand the batch to the Python reference */

/* What a fast path returns: the bytes it wrote (rc 0); NotImplemented for anything it does not take and any
 * error a message's fields raised (the caller then runs the reference on the whole batch, which gives the
 * same bytes or raises its own error); NULL with MemoryError. */
/* The answer is copied once, into a new bytes object, on purpose: writing it into a bytes object grown in
 * place (_PyBytes_Resize) and cut to its length measured slower with glibc (bench/bench_render.py's 1000
 * messages of 1 KiB: 0.76 against 0.50 us per message for the poll JSON, 0.36 against 0.20 for gRPC): each
 * answer is then a fresh block past the mmap threshold whose pages all fault in (about 400 minor faults
 * per answer), where the PyMem buffer lives in heap memory already mapped, its doublings move large blocks
 * by mremap without copying, and the one memcpy at the end costs less than the faults. Sizing the buffer
 * once from the first message did not change the figures either. */
static inline PyObject *answer_or_reference(int rc, const buffer *out) {
    if (rc == 0) return PyBytes_FromStringAndSize(out->data ? out->data : "", out->len);
    if (rc != UNSUPPORTED && PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
    PyErr_Clear();
    return Py_NewRef(Py_NotImplemented);
}

#define N_RUN 10
#define N_INNER 7

/* A run's fields (new references), and its first token, start and count as C integers. */
typedef struct {
    PyObject *run[N_RUN]; /* first, topic, partition_key, broker_id, partition_id, messages, start, count,
                             attempt, deadline_ms */
    long long first;
    Py_ssize_t start, count;
} run_fields;

typedef struct {
    PyObject *inner[N_INNER]; /* message_id, body, attributes, stream_id, msg_time, offset, key */
} fields;

static inline void fields_clear(fields *f) {
    for (int i = 0; i < N_INNER; i++) Py_CLEAR(f->inner[i]);
}

static inline void run_clear(run_fields *r) {
    for (int i = 0; i < N_RUN; i++) Py_CLEAR(r->run[i]);
}

/* Where a class keeps each of the named fields: the offsets of its writable object slots (a slots
 * dataclass), learnt from the class's member descriptors the first time an object of it comes; 0 for a name
 * that is not such a slot there (that field is then read with getattr). Reading a slot directly saves a
 * getattr per field, 15 per message (a third of the C renderers' time). */
typedef struct {
    PyTypeObject *type; /* a strong reference: the address cannot come back as another class */
    unsigned int version; /* the class's tp_version_tag when learnt: a changed class is learnt again */
    Py_ssize_t offsets[N_RUN > N_INNER ? N_RUN : N_INNER];
} slot_map;

static inline void slots_learn(slot_map *map, PyTypeObject *type, PyObject **names, int n) {
    Py_INCREF(type);
    Py_XSETREF(map->type, type);
    map->version = 0;
    /* a class that reads its attributes its own way is always asked through getattr */
    int generic = type->tp_getattro == PyObject_GenericGetAttr;
    for (int i = 0; i < n; i++) {
        map->offsets[i] = 0;
        if (!generic) continue;
        PyObject *descr = _PyType_Lookup(type, names[i]); /* borrowed, no error raised */
        /* a slot of this class or of a base: a descriptor copied from an unrelated class has an offset of
         * that class's layout (Python refuses such a read with TypeError; getattr below says so) */
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type) || !PyType_IsSubtype(type, PyDescr_TYPE(descr)))
            continue;
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX && member->offset > 0 &&
            member->offset + (Py_ssize_t)sizeof(PyObject *) <= type->tp_basicsize)
            map->offsets[i] = member->offset;
    }
    /* the lookups above gave the class a valid tag unless it cannot have one: then it is learnt each time */
    if (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) map->version = type->tp_version_tag;
}

/* new references to the named fields of obj into out; -1 with the error set */
static inline int slots_read(slot_map *map, PyObject *obj, PyObject **names, int n, PyObject **out) {
    PyTypeObject *type = Py_TYPE(obj);
    if (map->type != type || map->version == 0 || map->version != type->tp_version_tag ||
        !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
        slots_learn(map, type, names, n);
    for (int i = 0; i < n; i++) {
        PyObject *value = map->offsets[i] ? *(PyObject **)((char *)obj + map->offsets[i]) : NULL;
        if (value != NULL)
            out[i] = Py_NewRef(value);
        else if ((out[i] = PyObject_GetAttr(obj, names[i])) == NULL) /* not a slot, or unset: getattr says */
            return -1;
    }
    return 0;
}

static slot_map run_slots, inner_slots;

/* a Python int as a Py_ssize_t into *out: UNSUPPORTED for anything else or out of range */
static inline int size_value(PyObject *value, Py_ssize_t *out) {
    if (!PyLong_Check(value)) return UNSUPPORTED;
    *out = PyLong_AsSsize_t(value);
    if (*out == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return UNSUPPORTED;
    }
    return 0;
}

/* new references to the fields of run into r; UNSUPPORTED when its messages are not a list holding
 * messages[start:start + count] or its first token and the last are not within int64; -1 with the error
 * set (r is cleared by run_clear) */
static inline int run_read(PyObject *run, run_fields *r) {
    PyObject *names[N_RUN] = {s_first,    s_topic, s_partition_key, s_broker_id, s_partition_id,
                              s_messages, s_start, s_count,         s_attempt,   s_deadline_ms};
    if (slots_read(&run_slots, run, names, N_RUN, r->run) < 0) return -1;
    PyObject *messages = r->run[5];
    if (!PyList_Check(messages) || !PyLong_Check(r->run[0])) return UNSUPPORTED;
    int rc, overflow;
    if ((rc = size_value(r->run[6], &r->start)) || (rc = size_value(r->run[7], &r->count))) return rc;
    if (r->start < 0 || r->count < 0 || r->start > PyList_GET_SIZE(messages) - r->count) return UNSUPPORTED;
    r->first = PyLong_AsLongLongAndOverflow(r->run[0], &overflow);
    if (r->first == -1 && PyErr_Occurred()) return -1;
    if (overflow || r->first < 0 || r->first > LLONG_MAX - r->count) return UNSUPPORTED;
    return 0;
}

/* new references to the fields of the run's i-th message; UNSUPPORTED when the list changed under the
 * loop, -1 with the error set (f is cleared by fields_clear) */
static inline int message_read(run_fields *r, Py_ssize_t i, fields *f) {
    PyObject *messages = r->run[5];
    if (r->start + i >= PyList_GET_SIZE(messages)) return UNSUPPORTED;
    PyObject *names[N_INNER] = {s_message_id, s_body, s_attributes, s_stream_id, s_msg_time, s_offset, s_key};
    PyObject *message = Py_NewRef(PyList_GET_ITEM(messages, r->start + i)); /* a getattr may change the list */
    int rc = slots_read(&inner_slots, message, names, N_INNER, f->inner);
    Py_DECREF(message);
    return rc;
}

static inline int delivered_init(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return -1;
    INTERN(s_first, "first")
    INTERN(s_messages, "messages")
    INTERN(s_start, "start")
    INTERN(s_count, "count")
    INTERN(s_topic, "topic")
    INTERN(s_partition_key, "partition_key")
    INTERN(s_broker_id, "broker_id")
    INTERN(s_partition_id, "partition_id")
    INTERN(s_attempt, "attempt")
    INTERN(s_deadline_ms, "deadline_ms")
    INTERN(s_message_id, "message_id")
    INTERN(s_body, "body")
    INTERN(s_attributes, "attributes")
    INTERN(s_stream_id, "stream_id")
    INTERN(s_msg_time, "msg_time")
    INTERN(s_offset, "offset")
    INTERN(s_key, "key")
#undef INTERN
    return 0;
}

#endif

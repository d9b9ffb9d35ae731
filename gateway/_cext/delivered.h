/* Reading a gateway.service.delivered.DeliveredMessage and its ConsumedMessage from C: the
 * fields the answers of delivered messages are written from, shared by gateway/grpc/_consumed_wire.c (the
 * gRPC answer), gateway/api/_consumer_render.c (the poll JSON and SSE events) and, for the field names,
 * gateway/grpc/_publish_wire.c (the receipts). Call delivered_init() once from the
 * module's init function. */
#ifndef GATEWAY_DELIVERED_H
#define GATEWAY_DELIVERED_H

#include "outbuf.h"
#include <structmember.h>

static PyObject *s_seq, *s_topic, *s_partition_key, *s_broker_id, *s_partition_id, *s_message, *s_attempt,
    *s_deadline_ms, *s_message_id, *s_body, *s_attributes, *s_stream_id, *s_msg_time, *s_offset, *s_key;

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

#define N_OUTER 8
#define N_INNER 7

typedef struct {
    PyObject *outer[N_OUTER]; /* seq, topic, partition_key, broker_id, partition_id, message, attempt, deadline_ms */
    PyObject *inner[N_INNER]; /* message_id, body, attributes, stream_id, msg_time, offset, key */
} fields;

static inline void fields_clear(fields *f) {
    for (int i = 0; i < N_OUTER; i++) Py_CLEAR(f->outer[i]);
    for (int i = 0; i < N_INNER; i++) Py_CLEAR(f->inner[i]);
}

/* Where a class keeps each of the named fields: the offsets of its writable object slots (a slots
 * dataclass), learnt from the class's member descriptors the first time an object of it comes; 0 for a name
 * that is not such a slot there (that field is then read with getattr). Reading a slot directly saves a
 * getattr per field, 15 per message (a third of the C renderers' time). */
typedef struct {
    PyTypeObject *type; /* a strong reference: the address cannot come back as another class */
    unsigned int version; /* the class's tp_version_tag when learnt: a changed class is learnt again */
    Py_ssize_t offsets[N_OUTER > N_INNER ? N_OUTER : N_INNER];
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

static slot_map outer_slots, inner_slots;

/* new references to every field of message m; -1 with the error set (f is cleared by fields_clear) */
static inline int fields_read(PyObject *m, fields *f) {
    PyObject *outer_names[N_OUTER] = {s_seq,          s_topic,   s_partition_key, s_broker_id,
                                      s_partition_id, s_message, s_attempt,       s_deadline_ms};
    PyObject *inner_names[N_INNER] = {s_message_id, s_body, s_attributes, s_stream_id, s_msg_time, s_offset, s_key};
    if (slots_read(&outer_slots, m, outer_names, N_OUTER, f->outer) < 0) return -1;
    return slots_read(&inner_slots, f->outer[5], inner_names, N_INNER, f->inner);
}

/* whether a and b are equal (the references compare with !=); -1 on error */
static inline int same(PyObject *a, PyObject *b) { return a == b ? 1 : PyObject_RichCompareBool(a, b, Py_EQ); }

/* 1 when message f starts a new run of one partition after prev (the references' partition_runs) */
static inline int new_run(fields *f, fields *prev, int first) {
    if (first) return 1;
    for (int k = 1; k <= 4; k++) {
        int eq = same(f->outer[k], prev->outer[k]);
        if (eq <= 0) return eq < 0 ? -1 : 1;
    }
    return 0;
}

static inline int delivered_init(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return -1;
    INTERN(s_seq, "seq")
    INTERN(s_topic, "topic")
    INTERN(s_partition_key, "partition_key")
    INTERN(s_broker_id, "broker_id")
    INTERN(s_partition_id, "partition_id")
    INTERN(s_message, "message")
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

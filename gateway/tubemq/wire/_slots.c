/* The compiled maker of plain slots dataclasses: gateway/tubemq/wire/slots.py's slots_constructor gives
 * one where this module is built (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the class itself, its reference).
 *
 * slots_maker(cls, field_names) checks that cls is a plain slots dataclass (writable object slots of its
 * own, no __post_init__) and returns a callable that stores one positional value per field into a new
 * object's slots; any other call goes to cls (tests/service/test_slots_maker.py holds the two alike).
 *
 * Only the CPython C API is used: the module builds wherever Python's own headers and a C compiler are, and
 * setup.py marks it optional, so a machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "slots.h"

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
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gateway.tubemq.wire._slots.Maker",
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

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"slots_maker", py_slots_maker, METH_VARARGS,
     "slots_maker(cls, field_names) -> a callable building cls from one positional value per field"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.wire._slots", "The compiled maker of plain slots dataclasses (see slots.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__slots(void) {
    if (PyType_Ready(&MakerType) < 0) return NULL;
    return PyModule_Create(&module);
}

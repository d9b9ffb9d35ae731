/* Where a plain slots dataclass keeps its fields: the offsets of its writable object slots, for the loops
 * that build such objects without running __init__ (gateway/tubemq/wire/_slots.c, the consumer's message
 * in gateway/tubemq/consumer/_batch.c, the Frame in gateway/tubemq/wire/_frame_decoder.c).
 * Only the CPython C API is used. */
#ifndef GATEWAY_SLOTS_H
#define GATEWAY_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* The offsets of the fields `names` of a plain slots dataclass (writable object slots of its own, no
 * __post_init__, allocated by the generic allocator), in order; -1 with TypeError naming what is not so. */
static inline int slot_offsets(PyTypeObject *type, PyObject *names, Py_ssize_t *offsets) {
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

#endif

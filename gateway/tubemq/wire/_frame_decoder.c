/* The complete one-block frames of a read, and the complete blocks of a frame in progress, cut in C: the
 * loops of gateway/tubemq/wire/frame_decoder.py's _Python twin, chosen by that module
 * (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure ones).
 *
 * whole_frames appends a Frame for each complete frame of one block and returns where the first other frame
 * starts; whole_blocks appends the bytes of each block lying whole in a read to the payload's pieces
 * (tests/tubemq/test_speedups_frames.py holds both to the reference).
 *
 * Only the CPython C API is used: the module builds wherever Python's own headers and a C compiler are, and
 * setup.py marks it optional, so a machine without a compiler installs the pure path.
 */
#include "outbuf.h" /* gateway/_cext: varints, sequences walked */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "rpc_frame.h"
#include "slots.h"

/* --- whole_frames: complete one-block frames of a read (wire/frame_decoder.py FrameDecoder._whole_frames) -- */

/* The Frame class (a slots dataclass of serial and payload), its two slots written directly as for the
 * consumer's message class in gateway/tubemq/consumer/_batch.c: set_frame_type checks its shape and refuses anything else. */
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

/* --- whole_blocks: the complete blocks of a frame in progress (FrameDecoder._whole_blocks) -------------- */

/* whole_blocks(data, pos, blocks_left, room, pieces) -> (pos, blocks_left, room): from pos (where a block
 * length is due), up to blocks_left blocks lying whole in data, each of a length in 0..the data left whose
 * prefix and bytes fit room, are taken: each block's bytes (its prefix left out) appended to pieces as a bytes
 * object. Returns where the first other block starts, the blocks still due and the room left. */
static PyObject *py_whole_blocks(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer data;
    Py_ssize_t pos, blocks_left, room;
    PyObject *pieces;
    if (!PyArg_ParseTuple(args, "y*nnnO!", &data, &pos, &blocks_left, &room, &PyList_Type, &pieces)) return NULL;
    const unsigned char *raw = data.buf;
    Py_ssize_t end = data.len;
    if (pos < 0) pos = 0;
    while (blocks_left > 0 && pos <= end && end - pos >= 4) {
        int32_t length = get_int32(raw + pos);
        Py_ssize_t start = pos + 4;
        if (length < 0 || length > end - start || 4 + (Py_ssize_t)length > room) break;
        PyObject *piece = PyBytes_FromStringAndSize((const char *)raw + start, length);
        if (piece == NULL) goto fail;
        int appended = PyList_Append(pieces, piece);
        Py_DECREF(piece);
        if (appended < 0) goto fail;
        room -= 4 + (Py_ssize_t)length;
        pos = start + length;
        blocks_left--;
    }
    PyBuffer_Release(&data);
    return Py_BuildValue("(nnn)", pos, blocks_left, room);
fail:
    PyBuffer_Release(&data);
    return NULL;
}

/* --- the module -------------------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"set_frame_type", py_set_frame_type, METH_VARARGS, "set_frame_type(cls): the Frame class whole_frames builds."},
    {"whole_frames", py_whole_frames, METH_VARARGS,
     "whole_frames(data, pos, limit, frames) -> pos: the complete one-block frames from pos, appended"},
    {"whole_blocks", py_whole_blocks, METH_VARARGS,
     "whole_blocks(data, pos, blocks_left, room, pieces) -> (pos, blocks_left, room): the whole blocks from "
     "pos, appended"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.tubemq.wire._frame_decoder", "The complete frames and blocks of a read cut in C (see frame_decoder.py).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__frame_decoder(void) {
    return PyModule_Create(&module);
}

/* The JSON of delivered messages with base64 values: the poll answer and the SSE events of
 * gateway.api.consumer_render, in C, chosen at import by that module (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps
 * its pure reference, _render).
 *
 * render_base64(runs, events, head_of, meta_of) -> bytes, or NotImplemented when a run or a message
 * holds something the fast path does not take (an int field that is not an int or is outside int64, a body
 * that is not bytes, a piece that is not bytes, a run whose messages are not a list holding its count from
 * its start) or anything raised: the caller then renders the whole step
 * with the reference, so the two give the same bytes and the same errors (tests/tubemq/test_speedups.py holds them
 * together). Only MemoryError is raised here.
 *
 * The pieces that come from a client or a broker as text (topic, partition key, message key, stream id,
 * msg time, attributes) are rendered by the reference's own functions, head_of and meta_of, once per run
 * of messages that share them, so JSON escaping has one rule, in Python. Per message this writes the token
 * (the run's first plus the message's place in it), offset, message id, the run's attempt and deadline and
 * the base64 of the value, and copies the pieces.
 */
#include "delivered.h" /* gateway/_cext: the delivered message's fields, the growing buffer */




/* b"%d" % value for an int within int64 */
static int add_int(buffer *b, PyObject *value) {
    if (!PyLong_Check(value)) return UNSUPPORTED;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) return UNSUPPORTED;
    if (reserve(b, 24) < 0) return -1;
    b->len = put_decimal(b->data + b->len, v) - b->data;
    return 0;
}

static int add_text(buffer *b, const char *text) {
    Py_ssize_t n = (Py_ssize_t)strlen(text);
    if (reserve(b, n) < 0) return -1;
    add(b, text, n);
    return 0;
}

/* a piece the reference rendered: bytes, kept (a new reference in *piece) */
static int call_piece(PyObject **piece, PyObject *fn, PyObject *const *args, size_t n) {
    Py_CLEAR(*piece);
    *piece = PyObject_Vectorcall(fn, args, n, NULL);
    if (*piece == NULL) return -1;
    return PyBytes_Check(*piece) ? 0 : UNSUPPORTED;
}

static int add_bytes(buffer *b, PyObject *bytes) {
    Py_ssize_t n = PyBytes_GET_SIZE(bytes);
    if (reserve(b, n) < 0) return -1;
    add(b, PyBytes_AS_STRING(bytes), n);
    return 0;
}

/* --- base64 (RFC 4648, standard alphabet, padded: what pybase64.b64encode and binascii write) ----------- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/* the two characters of every 12-bit group, in output order */
static char b64_pairs[4096][2];

static void b64_init(void) {
    for (int i = 0; i < 4096; i++) {
        b64_pairs[i][0] = B64[i >> 6];
        b64_pairs[i][1] = B64[i & 63];
    }
}

static Py_ssize_t b64_size(Py_ssize_t n) { return (n + 2) / 3 * 4; }

/* The base64 of in[0:n] at out (b64_size(n) bytes). Called per value: pybase64's own call took 0.6 us on a
 * 1 KiB value here, most of it the call (0.03 us per KiB on a megabyte); a 12-bit table writes 1 KiB in less. */
static void b64_write(char *out, const unsigned char *in, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        memcpy(out, b64_pairs[v >> 12], 2);
        memcpy(out + 2, b64_pairs[v & 0xFFF], 2);
        out += 4;
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        memcpy(out, b64_pairs[v >> 12], 2);
        out[2] = out[3] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        memcpy(out, b64_pairs[v >> 12], 2);
        out[2] = B64[(v >> 6) & 63];
        out[3] = '=';
    }
}

/* a token, first + i (b"%d") */
static int add_token(buffer *b, long long token) {
    if (reserve(b, 24) < 0) return -1;
    b->len = put_decimal(b->data + b->len, token) - b->data;
    return 0;
}

/* one message of run r, its token given: the SSE event's id line (events) and the JSON object */
static int render_one(buffer *out, run_fields *r, long long token, fields *f, PyObject *head, PyObject *meta,
                      int events) {
    PyObject *attempt = r->run[8], *deadline = r->run[9];
    PyObject *message_id = f->inner[0], *body = f->inner[1], *offset = f->inner[5];
    if (!PyBytes_Check(body)) return UNSUPPORTED;
    int rc;
    if (events) {
        if ((rc = add_text(out, "id: ")) || (rc = add_token(out, token)) || (rc = add_text(out, "\ndata: ")))
            return rc;
    }
    if ((rc = add_text(out, "{\"token\":\"")) || (rc = add_token(out, token)) || (rc = add_text(out, "\",")) ||
        (rc = add_bytes(out, head)) || (rc = add_text(out, ",\"offset\":")))
        return rc;
    rc = offset == Py_None ? add_text(out, "null") : add_int(out, offset);
    if (rc || (rc = add_text(out, ",\"messageId\":\"")) || (rc = add_int(out, message_id)) ||
        (rc = add_text(out, "\",\"deliveryAttempt\":")) || (rc = add_int(out, attempt)) ||
        (rc = add_text(out, ",\"deadline\":")) || (rc = add_int(out, deadline)) || (rc = add_text(out, ",")) ||
        (rc = add_bytes(out, meta)) || (rc = add_text(out, ",\"encoding\":\"base64\",\"value\":\"")))
        return rc;
    Py_ssize_t size = PyBytes_GET_SIZE(body), encoded = b64_size(size);
    if (reserve(out, encoded) < 0) return -1;
    b64_write(out->data + out->len, (const unsigned char *)PyBytes_AS_STRING(body), size);
    out->len += encoded;
    return add_text(out, events ? "\"}\n\n" : "\"}");
}

static PyObject *py_render_base64(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *runs, *head_of, *meta_of;
    int events;
    if (!PyArg_ParseTuple(args, "OpOO", &runs, &events, &head_of, &meta_of)) return NULL;
    PyObject *seq = items_of(runs, "runs must be a sequence");
    if (seq == NULL) return NULL;
    buffer out = {0};
    run_fields run;
    fields prev, cur;
    memset(&run, 0, sizeof run);
    memset(&prev, 0, sizeof prev);
    memset(&cur, 0, sizeof cur);
    PyObject *head = NULL, *meta = NULL;
    int any = 0; /* a message was written */
    Py_ssize_t n_runs = PySequence_Fast_GET_SIZE(seq);
    int rc = events ? 0 : add_text(&out, "{\"messages\":[");
    for (Py_ssize_t k = 0; k < n_runs && rc == 0; k++) {
        run_clear(&run);
        if ((rc = run_read(PySequence_Fast_GET_ITEM(seq, k), &run))) break;
        if (run.count == 0) continue;
        /* the partition's fields, once per run */
        if ((rc = call_piece(&head, head_of, &run.run[1], 4))) break;
        for (Py_ssize_t i = 0; i < run.count; i++) {
            if ((rc = message_read(&run, i, &cur))) break;
            /* the key and attribute fields, again when their objects changed */
            PyObject *meta_args[4] = {cur.inner[6], cur.inner[3], cur.inner[4], cur.inner[2]};
            if ((!any || cur.inner[6] != prev.inner[6] || cur.inner[3] != prev.inner[3] ||
                 cur.inner[4] != prev.inner[4] || cur.inner[2] != prev.inner[2]) &&
                (rc = call_piece(&meta, meta_of, meta_args, 4)))
                break;
            if (any && !events && (rc = add_text(&out, ","))) break;
            if ((rc = render_one(&out, &run, run.first + i, &cur, head, meta, events))) break;
            any = 1;
            fields_clear(&prev);
            prev = cur;
            memset(&cur, 0, sizeof cur);
        }
    }
    if (rc == 0 && !events) rc = add_text(&out, "]}");
    run_clear(&run);
    fields_clear(&prev);
    fields_clear(&cur);
    Py_XDECREF(head);
    Py_XDECREF(meta);
    Py_DECREF(seq);
    PyObject *result = answer_or_reference(rc, &out);
    PyMem_Free(out.data);
    return result;
}

static PyMethodDef methods[] = {
    {"render_base64", py_render_base64, METH_VARARGS,
     "render_base64(runs, events, head_of, meta_of) -> the poll body or SSE events, or NotImplemented"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.api._consumer_render",
                                    "The JSON of delivered messages in C (see consumer_render.py).", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__consumer_render(void) {
    if (delivered_init() < 0) return NULL;
    b64_init();
    return PyModule_Create(&module);
}

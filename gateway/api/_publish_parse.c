/* The usual REST publish batch read and prepared in C: gateway/api/publish_parse.py's reading of a JSON
 * batch in one call (usual_batch), chosen by that module (TUBEMQ_GATEWAY_NO_EXTENSIONS=1 keeps the pure
 * reference).
 *
 * usual_batch goes from the request body's bytes straight to the PreparedMessage of each message, the records the producer encodes its SendMessage requests
 * from (gateway/tubemq/wire/payload.py), without the JSON document, an OutgoingMessage or a text object per
 * message.
 *
 * usual_batch(body, max_messages, make) reads a body of exactly this form (JSON whitespace anywhere between
 * tokens):
 *
 *     {"messages": [{"value": "...", "attributes": {"k": "v", ...}, "encoding": "utf8"}, ...]}
 *
 * each message holding "value" (a non-empty string) and at most "attributes" (an object of strings, the
 * names and values ASCII, each valid by the publish rules, which set_rules hands over) and "encoding"
 * (exactly "utf8"), each once. It returns the list of make(data, flag, None, None, size, None, None)
 * (PreparedMessage's fields in order), what the reference gives for such a batch:
 * gateway/api/publish_parse.parse_json_batch_py, then payload.BatchPreparer / prepare_message. Anything else
 * gives None and nothing else happens: another envelope or field, a key written with escapes, a repeated key,
 * text that is not strict UTF-8 (or a lone surrogate escape), a control character in a string, a blank or
 * reserved attribute name or value, an empty value, no message or more than max_messages, bytes after the
 * document. The caller then reads the body with the Python twin (publish_parse.usual_batch_py) or the
 * reference, which answers it or names what is wrong. So the compiled path never has an error of its own to
 * get right: it only takes the batches whose answer cannot be an error of the body.
 *
 * Every length is bounded by the body's (the caller has bounded the body), and the message count by
 * max_messages. tests/api/test_publish_json.py holds it to the twin and the reference (hypothesis, generated and
 * damaged bodies).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "outbuf.h"

typedef const unsigned char *cursor;

/* a payload's flag: 0, or 1 when it starts with attribute text */
static PyObject *flag_plain, *flag_attributes;

/* at most this many attributes per message (else the reference reads it) */
#define MAX_ATTRIBUTES 64

static cursor skip_ws(cursor p, cursor end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hex4(cursor p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* The length of a strict UTF-8 sequence starting at p (its first byte >= 0x80), 0 when it is not one (an
 * overlong form, a surrogate, past U+10FFFF, cut): what Python's strict decoder refuses. */
static int utf8_sequence(cursor p, cursor end) {
    unsigned c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[2] & 0xC0) != 0x80) return 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* U+D800-DFFF: surrogates */
        return p[1] >= lo && p[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        unsigned lo = 0x80, hi = 0xBF;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
        return p[1] >= lo && p[1] <= hi ? 4 : 0;
    }
    return 0;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any byte of w is '"', '\\', below 0x20 or from 0x80 (SWAR: a byte's high bit flags it). */
static inline uint64_t special_byte(uint64_t w) {
    uint64_t quote = w ^ (ONES * '"'), slash = w ^ (ONES * '\\');
    uint64_t zero_quote = (quote - ONES) & ~quote, zero_slash = (slash - ONES) & ~slash;
    uint64_t control = (w - ONES * 0x20) & ~w;
    return (zero_quote | zero_slash | control | w) & HIGHS;
}

/* A JSON string whose opening quote is at p[-1]: returns the position after its closing quote and sets
 * *size to the length of its text in UTF-8, *plain when it has no escape, *ascii when the text is ASCII;
 * NULL when the reference must read it (cut, a control character, a bad escape or a lone surrogate, bytes
 * that are not strict UTF-8). */
static cursor scan_string(cursor p, cursor end, Py_ssize_t *size, int *plain, int *ascii) {
    Py_ssize_t n = 0;
    *plain = 1;
    *ascii = 1;
    while (p < end) {
        /* eight plain characters at a time: no quote, backslash, control character or byte >= 0x80 */
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (special_byte(w)) break;
            p += 8;
            n += 8;
        }
        if (p >= end) break;
        unsigned c = *p;
        if (c == '"') {
            *size = n;
            return p + 1;
        }
        if (c < 0x20) return NULL;
        if (c < 0x80 && c != '\\') {
            p++;
            n++;
            continue;
        }
        if (c >= 0x80) {
            int k = utf8_sequence(p, end);
            if (k == 0) return NULL;
            p += k;
            n += k;
            *ascii = 0;
            continue;
        }
        /* an escape */
        *plain = 0;
        if (end - p < 2) return NULL;
        c = p[1];
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
            p += 2;
            n++;
            continue;
        }
        if (c != 'u' || end - p < 6) return NULL;
        unsigned unit;
        if (hex4(p + 2, &unit) < 0) return NULL;
        p += 6;
        if (unit >= 0xDC00 && unit <= 0xDFFF) return NULL; /* a lone low surrogate */
        if (unit >= 0xD800 && unit <= 0xDBFF) {
            unsigned low;
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &low) < 0 || low < 0xDC00 ||
                low > 0xDFFF)
                return NULL; /* a lone high surrogate */
            p += 6;
            n += 4;
            *ascii = 0;
        } else if (unit < 0x80) {
            n += 1;
        } else {
            n += unit < 0x800 ? 2 : 3;
            *ascii = 0;
        }
    }
    return NULL;
}

static char *put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) {
        *out++ = (char)cp;
    } else if (cp < 0x800) {
        *out++ = (char)(0xC0 | cp >> 6);
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *out++ = (char)(0xE0 | cp >> 12);
        *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *out++ = (char)(0xF0 | cp >> 18);
        *out++ = (char)(0x80 | (cp >> 12 & 0x3F));
        *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
        *out++ = (char)(0x80 | (cp & 0x3F));
    }
    return out;
}

/* The text of a string scan_string accepted (from p, after its opening quote, to its closing quote at
 * close) written at out; returns the position after it. */
static char *decode_string(cursor p, cursor close, char *out) {
    while (p < close) {
        cursor slash = memchr(p, '\\', (size_t)(close - p));
        if (slash == NULL) slash = close;
        memcpy(out, p, (size_t)(slash - p));
        out += slash - p;
        p = slash;
        if (p >= close) break;
        unsigned c = p[1];
        p += 2;
        switch (c) {
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case 'n': *out++ = '\n'; break;
        case 'r': *out++ = '\r'; break;
        case 't': *out++ = '\t'; break;
        case 'u': {
            unsigned unit = 0, low = 0xDC00; /* both read by scan_string already */
            hex4(p, &unit);
            p += 4;
            if (unit >= 0xD800 && unit <= 0xDBFF) {
                hex4(p + 2, &low);
                p += 6;
                unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
            }
            out = put_utf8(out, unit);
            break;
        }
        default: *out++ = (char)c; /* " \ / */
        }
    }
    return out;
}

/* Whether p starts with the key `"name"` (written without escapes) followed by whitespace and a colon;
 * *after is then the position after the colon. */
static int key_is(cursor p, cursor end, const char *name, cursor *after) {
    size_t n = strlen(name);
    if ((size_t)(end - p) < n + 2 || p[0] != '"' || memcmp(p + 1, name, n) != 0 || p[n + 1] != '"') return 0;
    p = skip_ws(p + n + 2, end);
    if (p >= end || *p != ':') return 0;
    *after = skip_ws(p + 1, end);
    return 1;
}

/* What python's str.isspace() says of an ASCII character. */
static int ascii_space(unsigned char c) { return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20); }

/* The attribute rules, handed over once by set_rules from the Python module that owns them
 * (gateway/service/publish_rules.py, from gateway/tubemq/wire/attributes.py): the bytes no attribute name or
 * value may hold (the separators), the tokens no name or value may hold and the tokens no name may hold
 * besides. Until they are handed over, usual_batch takes no batch. */
#define MAX_TOKENS 8
#define MAX_TOKEN_LEN 32

typedef struct {
    int count;
    Py_ssize_t len[MAX_TOKENS];
    char text[MAX_TOKENS][MAX_TOKEN_LEN];
} tokens;

static unsigned char separator[256];
static tokens reserved_in_text, reserved_in_names;
static int rules_set = 0;

static int contains(const char *text, Py_ssize_t len, const char *token, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i + n <= len; i++)
        if (text[i] == token[0] && memcmp(text + i, token, (size_t)n) == 0) return 1;
    return 0;
}

static int holds_any(const char *text, Py_ssize_t len, const tokens *t) {
    for (int i = 0; i < t->count; i++)
        if (contains(text, len, t->text[i], t->len[i])) return 1;
    return 0;
}

/* An attribute name (key) or value valid by the publish rules (payload._check_attributes with
 * attributes.validate_attribute_key / validate_attribute_value): not blank, no separator, no reserved
 * token. ASCII text only (the caller checked). */
static int valid_part(const char *text, Py_ssize_t len, int key) {
    int blank = 1;
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (separator[c]) return 0;
        if (!ascii_space(c)) blank = 0;
    }
    if (blank || holds_any(text, len, &reserved_in_text)) return 0;
    return !(key && holds_any(text, len, &reserved_in_names));
}

/* tokens from a tuple of 1..MAX_TOKENS non-empty bytes of at most MAX_TOKEN_LEN; -1 with ValueError else */
static int read_tokens(PyObject *tuple, tokens *out) {
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    if (n > MAX_TOKENS) {
        PyErr_Format(PyExc_ValueError, "at most %d reserved tokens", MAX_TOKENS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) < 1 || PyBytes_GET_SIZE(item) > MAX_TOKEN_LEN) {
            PyErr_Format(PyExc_ValueError, "a reserved token is 1 to %d bytes", MAX_TOKEN_LEN);
            return -1;
        }
        out->len[i] = PyBytes_GET_SIZE(item);
        memcpy(out->text[i], PyBytes_AS_STRING(item), (size_t)out->len[i]);
    }
    out->count = (int)n;
    return 0;
}

static PyObject *py_set_rules(PyObject *Py_UNUSED(self), PyObject *args) {
    const char *separators;
    Py_ssize_t separators_len;
    PyObject *in_text, *in_names;
    if (!PyArg_ParseTuple(args, "y#O!O!:set_rules", &separators, &separators_len, &PyTuple_Type, &in_text,
                          &PyTuple_Type, &in_names))
        return NULL;
    tokens text, names;
    if (read_tokens(in_text, &text) < 0 || read_tokens(in_names, &names) < 0) return NULL;
    memset(separator, 0, sizeof separator);
    for (Py_ssize_t i = 0; i < separators_len; i++) separator[(unsigned char)separators[i]] = 1;
    reserved_in_text = text;
    reserved_in_names = names;
    rules_set = 1;
    Py_RETURN_NONE;
}

/* The attributes object whose '{' is at p-1: its attribute text ("k=v,k2=v2", document order) in *text
 * (reset first); returns the position after its '}', or NULL when the reference must read it. */
static cursor read_attributes(cursor p, cursor end, buffer *text) {
    Py_ssize_t keys[MAX_ATTRIBUTES][2]; /* offset and length of each name in text */
    int count = 0;
    text->len = 0;
    p = skip_ws(p, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (count == MAX_ATTRIBUTES || p >= end || *p != '"') return NULL;
        for (int part = 0; part < 2; part++) {
            Py_ssize_t size;
            int plain, ascii;
            cursor open = p + 1, after = scan_string(open, end, &size, &plain, &ascii);
            if (after == NULL || !ascii) return NULL;
            /* room for the text, '=' or ',' (size <= the string's bytes: bounded by the body) */
            if (reserve(text, size + 1) < 0) return NULL;
            Py_ssize_t start = text->len;
            text->len = decode_string(open, after - 1, text->data + start) - text->data;
            if (!valid_part(text->data + start, size, part == 0)) return NULL;
            if (part == 0) {
                for (int k = 0; k < count; k++)
                    if (keys[k][1] == size && memcmp(text->data + keys[k][0], text->data + start, size) == 0)
                        return NULL; /* a name repeated: the reference keeps the last value */
                keys[count][0] = start;
                keys[count][1] = size;
                count++;
                p = skip_ws(after, end);
                if (p >= end || *p != ':') return NULL;
                p = skip_ws(p + 1, end);
                add_byte(text, '=');
            } else {
                p = skip_ws(after, end);
            }
        }
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        add_byte(text, ',');
        p = skip_ws(p + 1, end);
    }
}

/* One message object whose '{' is at p-1, appended to out as make(...)'s record; returns the position after
 * its '}', NULL with no error set when the reference must read it, NULL with an error set on failure.
 * memo: the last attributes object's source bytes and the payload prefix (int32 length + text) it gave. */
typedef struct {
    cursor source; /* the last attributes object, as the body wrote it */
    Py_ssize_t source_len;
    PyObject *prefix; /* bytes: its payload prefix, or NULL before the first */
    buffer text;
} attributes_memo;

static cursor read_message(cursor p, cursor end, PyObject *make, attributes_memo *memo, PyObject *out) {
    cursor value = NULL, value_end = NULL, attrs = NULL, attrs_end = NULL;
    Py_ssize_t size = 0;
    int plain = 1, encoding = 0;
    p = skip_ws(p, end);
    for (;;) {
        cursor at;
        int ascii;
        if (p < end && key_is(p, end, "value", &at)) {
            if (value != NULL || at >= end || *at != '"') return NULL;
            value = at + 1;
            value_end = scan_string(value, end, &size, &plain, &ascii);
            if (value_end == NULL || size == 0) return NULL;
            p = value_end;
        } else if (p < end && key_is(p, end, "attributes", &at)) {
            if (attrs != NULL || at >= end || *at != '{') return NULL;
            attrs = at;
            attrs_end = memo->prefix != NULL && memo->source_len <= end - at &&
                                memcmp(memo->source, at, (size_t)memo->source_len) == 0
                            ? at + memo->source_len
                            : NULL;
            if (attrs_end == NULL) { /* not the last message's attributes: read them */
                attrs_end = read_attributes(at + 1, end, &memo->text);
                if (attrs_end == NULL) return NULL;
                Py_ssize_t n = memo->text.len;
                if (n > INT32_MAX) return NULL;
                PyObject *prefix = PyBytes_FromStringAndSize(NULL, n ? n + 4 : 0);
                if (prefix == NULL) return NULL;
                if (n) {
                    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(prefix);
                    w[0] = (unsigned char)(n >> 24);
                    w[1] = (unsigned char)(n >> 16);
                    w[2] = (unsigned char)(n >> 8);
                    w[3] = (unsigned char)n;
                    memcpy(w + 4, memo->text.data, (size_t)n);
                }
                Py_XSETREF(memo->prefix, prefix);
                memo->source = at;
                memo->source_len = attrs_end - at;
            }
            p = attrs_end;
        } else if (p < end && key_is(p, end, "encoding", &at)) {
            if (encoding || (size_t)(end - at) < 6 || memcmp(at, "\"utf8\"", 6) != 0) return NULL;
            encoding = 1;
            p = at + 6;
        } else {
            return NULL;
        }
        p = skip_ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') break;
        if (*p != ',') return NULL;
        p = skip_ws(p + 1, end);
    }
    if (value == NULL) return NULL;
    /* the payload: the attributes' prefix (none for no attributes or {}), then the value's text */
    PyObject *prefix = attrs != NULL ? memo->prefix : NULL;
    Py_ssize_t head = prefix != NULL ? PyBytes_GET_SIZE(prefix) : 0;
    PyObject *data = PyBytes_FromStringAndSize(NULL, head + size);
    if (data == NULL) return NULL;
    char *w = PyBytes_AS_STRING(data);
    if (head) memcpy(w, PyBytes_AS_STRING(prefix), (size_t)head);
    if (plain)
        memcpy(w + head, value, (size_t)size);
    else
        decode_string(value, value_end - 1, w + head);
    /* size as the topic's limit counts it: the value's bytes and the attribute text's characters (ASCII) */
    PyObject *counted = PyLong_FromSsize_t(head ? size + head - 4 : size);
    if (counted == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    PyObject *args[7] = {data, head ? flag_attributes : flag_plain, Py_None, Py_None, counted,
                         Py_None, Py_None};
    PyObject *record = PyObject_Vectorcall(make, args, 7, NULL);
    Py_DECREF(data);
    Py_DECREF(counted);
    if (record == NULL) return NULL;
    int failed = PyList_Append(out, record);
    Py_DECREF(record);
    return failed ? NULL : p + 1;
}

static PyObject *py_usual_batch(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *body, *make;
    Py_ssize_t max_messages;
    if (!PyArg_ParseTuple(args, "SnO:usual_batch", &body, &max_messages, &make)) return NULL;
    if (!rules_set) Py_RETURN_NONE;
    cursor p = (cursor)PyBytes_AS_STRING(body), end = p + PyBytes_GET_SIZE(body);
    cursor at;
    p = skip_ws(p, end);
    if (p >= end || *p != '{') Py_RETURN_NONE;
    p = skip_ws(p + 1, end);
    if (!key_is(p, end, "messages", &at) || at >= end || *at != '[') Py_RETURN_NONE;
    p = at + 1;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    attributes_memo memo = {NULL, 0, NULL, {NULL, 0, 0}};
    for (;;) {
        p = skip_ws(p, end);
        if (PyList_GET_SIZE(out) >= max_messages || p >= end || *p != '{') goto usual_not;
        p = read_message(p + 1, end, make, &memo, out);
        if (p == NULL) goto usual_not;
        p = skip_ws(p, end);
        if (p >= end) goto usual_not;
        if (*p == ']') break;
        if (*p != ',') goto usual_not;
        p++;
    }
    p = skip_ws(p + 1, end);
    if (p >= end || *p != '}' || skip_ws(p + 1, end) != end) goto usual_not;
    Py_XDECREF(memo.prefix);
    PyMem_Free(memo.text.data);
    return out;
usual_not: /* not the usual batch (no error set), or a failure (set) */
    Py_XDECREF(memo.prefix);
    PyMem_Free(memo.text.data);
    Py_DECREF(out);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_rules", py_set_rules, METH_VARARGS,
     "set_rules(separators, reserved_in_text, reserved_in_names): the attribute rules usual_batch checks (bytes, "
     "and tuples of bytes), from the Python module that owns them; usual_batch takes no batch before."},
    {"usual_batch", py_usual_batch, METH_VARARGS,
     "usual_batch(body, max_messages, make) -> list | None: the usual publish batch's prepared messages, or None "
     "when the reference must read the body."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gateway.api._publish_parse",
                                    "The usual REST publish batch read and prepared in one call (see publish_parse.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__publish_parse(void) {
    flag_plain = PyLong_FromLong(0);
    flag_attributes = PyLong_FromLong(1);
    if (flag_plain == NULL || flag_attributes == NULL) return NULL;
    return PyModule_Create(&module);
}

/*
 * frames_ext.c — shardcast._frames, the optional C accelerator of the Python
 * client's frames reader: a CPython extension over the wire module's frames
 * decoder (sio_framer, include/shardio_wire.h; library shardcast_wire), the
 * one the C client uses.
 *
 * Python keeps the HTTP side (connection, chunked body, recv_into a reused
 * buffer) and the checks against the request; this module turns a run of
 * received bytes into sample dicts in one call, so the per-sample work is C:
 * frame parsing, bounds checks, and one bytes object per field.
 *
 *   Framer(max_frame)                    one decoder per stream
 *   Framer.feed(buf, start, end, limit)  -> (used, samples, event, value)
 *       decodes buf[start:end] until `limit` samples were made, a HEADER,
 *       END or ERROR frame was decoded (event "header", "end", "error",
 *       value a dict / the reason; else None), or the bytes are used up.
 *       samples: list of {"__key__", "__url__", "__shard__", "__index__",
 *       "__position__", name: bytes, ...}. Raises FramesError(message) for
 *       bytes that violate the format; the decoder is then unusable.
 *
 * Threading: a Framer is used by one thread at a time (the GIL is held
 * throughout; a call never blocks). Ownership: the decoder copies what it
 * must keep (shard URLs, header strings, partial frames); every view it
 * returns is turned into Python objects before feed() returns, so the
 * caller may overwrite buf right after the call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "shardio_wire.h"

static PyObject *FramesError;

/* Interned dict keys, made once at module init. */
static PyObject *k_key, *k_url, *k_shard, *k_index, *k_position, *k_source;

typedef struct {
    PyObject_HEAD
    sio_framer *f;
    /* Shard URLs as str, by shard index, made when a SHARD frame arrives so
     * that every sample of a shard shares one object. */
    PyObject *shards; /* dict int -> str */
    /* A mixed job's source names (from HEADER), by source index: every
     * sample of a source shares one object. NULL: the stream names none. */
    PyObject *sources; /* list of str */
} Framer;

static int framer_init(Framer *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"max_frame", NULL};
    unsigned long max_frame = SIO_FRAME_PAYLOAD_MAX;
    sio_error err;
    sio_framer_limits lim = {0, 0, 0, 0};

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|k", names, &max_frame))
        return -1;
    if (max_frame == 0 || max_frame > SIO_FRAME_PAYLOAD_MAX) {
        PyErr_Format(PyExc_ValueError, "max_frame must be within 1..%u",
                     SIO_FRAME_PAYLOAD_MAX);
        return -1;
    }
    lim.payload_max = (uint32_t)max_frame;
    if (self->f) {
        sio_framer_destroy(self->f);
        self->f = NULL;
    }
    if (sio_framer_create(&lim, &self->f, &err) != SIO_OK) {
        PyErr_NoMemory();
        return -1;
    }
    Py_XDECREF(self->shards);
    Py_CLEAR(self->sources);
    self->shards = PyDict_New();
    return self->shards ? 0 : -1;
}

static void framer_dealloc(Framer *self)
{
    sio_framer_destroy(self->f);
    Py_XDECREF(self->shards);
    Py_XDECREF(self->sources);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *header_dict(const sio_frame_event *ev)
{
    const sio_frames_header *h = &ev->header;
    const char *part = h->partition == SIO_PARTITION_EVEN_PAD ? "even-pad"
                       : h->partition == SIO_PARTITION_NONE ? "none"
                                                            : "even-drop";
    PyObject *fields;
    if (ev->has_fields) {
        fields = PyList_New((Py_ssize_t)ev->nfields);
        if (!fields)
            return NULL;
        for (size_t i = 0; i < ev->nfields; i++) {
            PyObject *s = PyUnicode_FromString(ev->fields[i]);
            if (!s) {
                Py_DECREF(fields);
                return NULL;
            }
            PyList_SET_ITEM(fields, (Py_ssize_t)i, s);
        }
    } else {
        fields = Py_NewRef(Py_None);
    }
    PyObject *d = Py_BuildValue(
        "{s:i,s:s,s:K,s:k,s:k,s:K,s:K,s:s,s:N}", "version",
        SIO_FRAMES_VERSION, "job", h->job, "epoch",
        (unsigned long long)h->epoch, "rank", (unsigned long)h->rank,
        "world", (unsigned long)h->world, "start",
        (unsigned long long)h->start, "global_start",
        (unsigned long long)h->global_start, "partition", part, "fields",
        fields);
    if (d && h->nsources) {
        PyObject *srcs = PyList_New((Py_ssize_t)h->nsources);
        for (size_t i = 0; srcs && i < h->nsources; i++) {
            PyObject *one = Py_BuildValue(
                "{s:s,s:k,s:k}", "name", h->sources[i].name, "first",
                (unsigned long)h->sources[i].first, "count",
                (unsigned long)h->sources[i].count);
            if (!one) {
                Py_CLEAR(srcs);
                break;
            }
            PyList_SET_ITEM(srcs, (Py_ssize_t)i, one);
        }
        if (!srcs || PyDict_SetItemString(d, "sources", srcs)) {
            Py_XDECREF(srcs);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(srcs);
    }
    if (d && h->heartbeat_ms) {
        PyObject *hb = PyLong_FromUnsignedLong((unsigned long)h->heartbeat_ms);
        if (!hb || PyDict_SetItemString(d, "heartbeat_ms", hb)) {
            Py_XDECREF(hb);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(hb);
    }
    if (d && h->has_ident) {
        /* the replica set's identity (docs/operations.md "Scale-out") */
        PyObject *id = Py_BuildValue(
            "{s:s,s:k,s:k,s:k}", "fingerprint", h->fingerprint, "replica",
            (unsigned long)h->replica, "replicas", (unsigned long)h->replicas,
            "served_by", (unsigned long)h->served_by);
        if (!id || PyDict_Update(d, id)) {
            Py_XDECREF(id);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(id);
    }
    return d;
}

static PyObject *end_dict(const sio_frame_event *ev)
{
    const sio_tarw_summary *s = &ev->summary;
    if (ev->end_json && ev->end_json_len) {
        /* The summary as sent: its keys beyond the struct's too (what the
         * epoch skipped). The decoder checked it is JSON. */
        PyObject *json = PyImport_ImportModule("json");
        PyObject *d = json ? PyObject_CallMethod(json, "loads", "s#", ev->end_json,
                                                 (Py_ssize_t)ev->end_json_len)
                           : NULL;
        Py_XDECREF(json);
        if (d && PyDict_Check(d))
            return d;
        Py_XDECREF(d);
        PyErr_Clear();
    }
    return Py_BuildValue("{s:s,s:K,s:k,s:k,s:K,s:K,s:K}", "status", "ok",
                         "epoch", (unsigned long long)s->epoch, "rank",
                         (unsigned long)s->rank, "world",
                         (unsigned long)s->world, "start",
                         (unsigned long long)s->start, "samples",
                         (unsigned long long)s->samples, "position",
                         (unsigned long long)s->position);
}

/* The sample dict of a SAMPLE event, or NULL with an exception set. */
static PyObject *sample_dict(Framer *self, const sio_frame_event *ev)
{
    PyObject *d = NULL, *v = NULL, *key = NULL, *idx = NULL, *url;

    idx = PyLong_FromUnsignedLong(ev->shard_index);
    if (!idx)
        goto fail;
    url = PyDict_GetItemWithError(self->shards, idx); /* borrowed */
    if (!url) {
        if (!PyErr_Occurred())
            PyErr_Format(FramesError, "SAMPLE refers to shard %lu before its "
                         "SHARD frame", (unsigned long)ev->shard_index);
        goto fail;
    }
    key = PyUnicode_DecodeUTF8(ev->key, (Py_ssize_t)ev->key_len, "strict");
    if (!key) {
        PyErr_Clear();
        PyErr_SetString(FramesError, "SAMPLE key is not UTF-8");
        goto fail;
    }
    d = PyDict_New();
    if (!d || PyDict_SetItem(d, k_key, key) || PyDict_SetItem(d, k_url, url) ||
        PyDict_SetItem(d, k_shard, url))
        goto fail;
    v = PyLong_FromUnsignedLongLong(ev->global_index);
    if (!v || PyDict_SetItem(d, k_index, v))
        goto fail;
    Py_DECREF(v);
    v = PyLong_FromUnsignedLongLong(ev->position);
    if (!v || PyDict_SetItem(d, k_position, v))
        goto fail;
    Py_CLEAR(v);
    if (self->sources && ev->source != UINT32_MAX &&
        (Py_ssize_t)ev->source < PyList_GET_SIZE(self->sources) &&
        PyDict_SetItem(d, k_source,
                       PyList_GET_ITEM(self->sources, ev->source)))
        goto fail;
    for (size_t i = 0; i < ev->nsample_fields; i++) {
        const sio_frame_field *fl = &ev->sample_fields[i];
        PyObject *name = PyUnicode_DecodeUTF8(fl->name,
                                              (Py_ssize_t)fl->name_len,
                                              "strict");
        if (!name) {
            PyErr_Clear();
            PyErr_Format(FramesError, "SAMPLE %R: field name is not UTF-8",
                         key);
            goto fail;
        }
        int dup = PyDict_Contains(d, name);
        if (dup != 0 || fl->name_len == 0) {
            if (dup >= 0)
                PyErr_Format(FramesError, "SAMPLE %R: empty or repeated "
                             "field %R", key, name);
            Py_DECREF(name);
            goto fail;
        }
        v = PyBytes_FromStringAndSize((const char *)fl->data,
                                      (Py_ssize_t)fl->len);
        if (!v || PyDict_SetItem(d, name, v)) {
            Py_DECREF(name);
            goto fail;
        }
        Py_DECREF(name);
        Py_CLEAR(v);
    }
    Py_DECREF(idx);
    Py_DECREF(key);
    return d;
fail:
    Py_XDECREF(v);
    Py_XDECREF(d);
    Py_XDECREF(key);
    Py_XDECREF(idx);
    return NULL;
}

static PyObject *framer_feed(Framer *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, limit;
    PyObject *samples = NULL, *value = NULL, *out = NULL;
    const char *event = NULL;
    size_t p;

    if (!self->f) {
        PyErr_SetString(PyExc_ValueError, "Framer is not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*nnn", &view, &start, &end, &limit))
        return NULL;
    if (start < 0 || end < start || end > view.len || limit < 1) {
        PyErr_SetString(PyExc_ValueError, "feed: bad start, end or limit");
        goto out;
    }
    samples = PyList_New(0);
    if (!samples)
        goto out;
    p = (size_t)start;
    while (p < (size_t)end && event == NULL &&
           PyList_GET_SIZE(samples) < limit) {
        sio_frame_event ev;
        size_t used = 0;
        sio_code rc = sio_framer_feed(self->f, (const char *)view.buf + p,
                                      (size_t)end - p, &used, &ev);
        p += used;
        if (rc != SIO_OK) {
            PyErr_SetString(FramesError, sio_framer_errmsg(self->f));
            goto out;
        }
        switch (ev.type) {
        case SIO_FRAMER_SAMPLE: {
            PyObject *d = sample_dict(self, &ev);
            if (!d)
                goto out;
            int r = PyList_Append(samples, d);
            Py_DECREF(d);
            if (r)
                goto out;
            break;
        }
        case SIO_FRAMER_SHARD: {
            PyObject *k = PyLong_FromUnsignedLong(ev.shard_index);
            PyObject *u = PyUnicode_DecodeUTF8(ev.shard_url,
                                               (Py_ssize_t)ev.shard_url_len,
                                               "strict");
            if (!u && k) {
                PyErr_Clear();
                PyErr_Format(FramesError, "SHARD %lu URL is not UTF-8",
                             (unsigned long)ev.shard_index);
            }
            int r = (k && u) ? PyDict_SetItem(self->shards, k, u) : -1;
            Py_XDECREF(k);
            Py_XDECREF(u);
            if (r)
                goto out;
            break;
        }
        case SIO_FRAMER_HEADER:
            event = "header";
            value = header_dict(&ev);
            if (value && ev.header.nsources) {
                Py_CLEAR(self->sources);
                self->sources = PyList_New((Py_ssize_t)ev.header.nsources);
                for (size_t i = 0; self->sources && i < ev.header.nsources;
                     i++) {
                    PyObject *nm = PyUnicode_InternFromString(
                        ev.header.sources[i].name);
                    if (!nm) {
                        Py_CLEAR(self->sources);
                        break;
                    }
                    PyList_SET_ITEM(self->sources, (Py_ssize_t)i, nm);
                }
                if (!self->sources)
                    Py_CLEAR(value);
            }
            if (!value)
                goto out;
            break;
        case SIO_FRAMER_END:
            event = "end";
            value = end_dict(&ev);
            if (!value)
                goto out;
            break;
        case SIO_FRAMER_ERROR: {
            /* the trailer as the pure-Python reader sees it */
            PyObject *reason = PyUnicode_DecodeUTF8(
                ev.reason, (Py_ssize_t)strlen(ev.reason), "replace");
            if (!reason)
                goto out;
            event = "error";
            value = ev.retryable
                        ? Py_BuildValue("{s:N,s:O,s:k}", "reason", reason,
                                        "retryable", Py_True, "retry_after_ms",
                                        (unsigned long)ev.retry_after_ms)
                        : Py_BuildValue("{s:N,s:O}", "reason", reason,
                                        "retryable", Py_False);
            if (!value)
                goto out;
            break;
        }
        default: /* NONE: all bytes taken, no complete frame */
            break;
        }
    }
    out = Py_BuildValue("nOsO", (Py_ssize_t)(p - (size_t)start), samples,
                        event, value ? value : Py_None);
out:
    Py_XDECREF(samples);
    Py_XDECREF(value);
    PyBuffer_Release(&view);
    return out;
}

static PyObject *framer_samples(Framer *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(self->f ? sio_framer_samples(self->f) : 0);
}

static PyMethodDef framer_methods[] = {
    {"feed", (PyCFunction)framer_feed, METH_VARARGS,
     "feed(buf, start, end, limit) -> (used, samples, event, value)"},
    {"samples", (PyCFunction)framer_samples, METH_NOARGS,
     "SAMPLE frames decoded so far"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject FramerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shardcast._frames.Framer",
    .tp_basicsize = sizeof(Framer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Incremental decoder of one frames stream (sio_framer).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)framer_init,
    .tp_dealloc = (destructor)framer_dealloc,
    .tp_methods = framer_methods,
};

static struct PyModuleDef frames_module = {
    PyModuleDef_HEAD_INIT, .m_name = "shardcast._frames",
    .m_doc = "C accelerator of shardcast's frames reader (libshardio's "
             "sio_framer).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__frames(void);
PyMODINIT_FUNC PyInit__frames(void)
{
    PyObject *m;

    if (PyType_Ready(&FramerType) < 0)
        return NULL;
    m = PyModule_Create(&frames_module);
    if (!m)
        return NULL;
    FramesError = PyErr_NewException("shardcast._frames.FramesError",
                                     PyExc_ValueError, NULL);
    k_key = PyUnicode_InternFromString("__key__");
    k_url = PyUnicode_InternFromString("__url__");
    k_shard = PyUnicode_InternFromString("__shard__");
    k_source = PyUnicode_InternFromString("__source__");
    k_index = PyUnicode_InternFromString("__index__");
    k_position = PyUnicode_InternFromString("__position__");
    if (!FramesError || !k_key || !k_url || !k_shard || !k_index || !k_position ||
        !k_source ||
        PyModule_AddObjectRef(m, "FramesError", FramesError) < 0 ||
        PyModule_AddObjectRef(m, "Framer", (PyObject *)&FramerType) < 0 ||
        PyModule_AddIntConstant(m, "MAX_FRAME", SIO_FRAME_PAYLOAD_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

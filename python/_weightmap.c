/*
 * _weightmap.c: the CPython extension under the `weightmap` package, written against the public
 * header include/weightmap.h only, and DLPack's own header (Debian libdlpack-dev) for the
 * zero-copy hand-over of tensors to PyTorch and NumPy.
 *
 * Sections:
 *   errors    the exception classes and the one function that turns a wm_error into one
 *   Handle    owns one wm_file and, once loaded, one wm_model; close() and the views
 *   Export    an object with __dlpack__/__dlpack_device__ for one tensor of a Handle
 *   views     the DLManagedTensor handed out, its deleter and the capsule's destructor
 *   Pool      a wm_pool; PoolModel, one get of it; PoolTensor, a tensor's bytes as a buffer
 *   module    ledger(), file_regions(), mem_figures(), backend_init(), the module itself
 *
 * Ownership, the rule this file exists for: a Handle is released (wm_model_release, then
 * wm_file_close) exactly once, by handle_release(), when close() has been called and no view is
 * alive, or when the Handle object itself dies. Every DLPack view holds a strong reference to
 * its Handle and counts itself in Handle.views; its deleter (called by the consumer when the
 * tensor dies, on any thread) takes the GIL, uncounts itself, releases the Handle if it was the
 * last view of a closed Handle, and drops its reference. So a tensor that outlives close()
 * keeps its bytes valid, and the last one to go gives them back. A Part (one tensor's rows,
 * loaded alone) is counted the same way by its Export and its views, and released by the last.
 *
 * Threads: every field of a Handle is read and written with the GIL held; only wm_model_load
 * runs without it, counted in Handle.busy. The whole model is loaded once, under Handle.lock:
 * threads asking meanwhile wait for the lock with the GIL released and find the model there.
 * close() during a load marks the Handle closed; the load's end releases (handle_maybe_release).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>
#include <weightmap.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000 /* CPython 3.9 (pyproject's floor) has no Py_NewRef */
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif

/* ---------------------------------------------------------------------------------------------
 * errors
 * ------------------------------------------------------------------------------------------- */

static PyObject *Error; /* weightmap.Error(safetensors.SafetensorError, else Exception): all */
static PyObject *FormatError;         /* (Error, ValueError): WM_EFORMAT, a malformed file */
static PyObject *NotFoundError;       /* (Error, FileNotFoundError): WM_ENOENT on a path */
static PyObject *TensorNotFoundError; /* (Error, KeyError): no such tensor */
static PyObject *ClosedError;         /* (Error, ValueError): the handle was closed */
static PyObject *ArgumentError;       /* (Error, ValueError): a bad argument */
static PyObject *SliceError;          /* (Error, IndexError): an index a slice cannot take */

/* Raises the class that fits `status` with `msg`, and sets on the exception `status` (the name,
 * "WM_EFORMAT"), `code` (the number) and `os_errno`. Returns NULL, for `return raise_status(..)`.
 */
static PyObject *raise_status(PyObject *cls, wm_status status, int os_errno, const char *msg) {
    if (cls == NULL) {
        cls = status == WM_EFORMAT  ? FormatError
              : status == WM_ENOENT ? NotFoundError
              : status == WM_EINVAL ? ArgumentError
                                    : Error;
    }
    PyObject *exc = PyObject_CallFunction(cls, "s", msg && msg[0] ? msg : wm_strerror(status));
    if (exc == NULL) return NULL;
    PyObject *name = PyUnicode_FromString(wm_status_name(status));
    PyObject *code = PyLong_FromLong((long)status);
    PyObject *eno = PyLong_FromLong(os_errno);
    if (name && code && eno && PyObject_SetAttrString(exc, "status", name) == 0 &&
        PyObject_SetAttrString(exc, "code", code) == 0 &&
        PyObject_SetAttrString(exc, "os_errno", eno) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(name);
    Py_XDECREF(code);
    Py_XDECREF(eno);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_wm(wm_status status, const wm_error *err) {
    return raise_status(NULL, status, err->os_errno, err->msg);
}

/* ---------------------------------------------------------------------------------------------
 * Handle
 * ------------------------------------------------------------------------------------------- */

typedef struct Handle {
    PyObject_HEAD wm_file *file; /* NULL once released */
    wm_model *model;             /* the whole model: NULL until loaded, and once released */
    PyObject *path;              /* str */
    int closed;                  /* close() was called: no new use; release when views reaches 0 */
    int busy;                    /* loads running with the GIL released (whole or parts) */
    Py_ssize_t views;            /* DLPack views handed out and not yet deleted (of any model) */
    PyThread_type_lock lock;     /* held by the thread loading the whole model */
    wm_backend_kind backend;
    int device;
} Handle;

/* A model of part of the file (a row range of one tensor, wm_load_options.select), shared by
 * the Export that made it and the views of it; released when the last of them goes. */
typedef struct Part {
    wm_model *model;
    Py_ssize_t refs;
} Part;

static void part_unref(Part *p) {
    if (p && --p->refs == 0) {
        wm_model_release(p->model);
        PyMem_RawFree(p);
    }
}

static PyTypeObject HandleType;

/* The one release of a Handle's library objects: model first, then the file it reads. */
static void handle_release(Handle *h) {
    wm_model_release(h->model);
    h->model = NULL;
    wm_file_close(h->file);
    h->file = NULL;
}

/* 0 with ClosedError when the handle may not be used (closed or released). The header (h->file)
 * is read-only once open, so every thread may read it while a load runs. */
static int handle_usable(Handle *h) {
    if (h->closed || h->file == NULL) {
        PyErr_Format(ClosedError, "%U: the file is closed", h->path);
        return 0;
    }
    return 1;
}

/* After close(), the last of the views and loads releases what is left. */
static void handle_maybe_release(Handle *h) {
    if (h->closed && h->views == 0 && h->busy == 0) handle_release(h);
}

/* safetensors' words for a file that is not there, "No such file or directory: PATH", for a
 * path the caller named (the library's "PATH: cannot open: ..." with ENOENT); a missing shard
 * of an index keeps the library's message, which names the index and the shard. */
static void missing_file_message(const char *const *paths, size_t n, wm_error *err) {
    if (err->os_errno != ENOENT) return;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(paths[i]);
        if (strncmp(err->msg, paths[i], len) == 0 &&
            strncmp(err->msg + len, ": cannot open", 13) == 0) {
            static const char words[] = "No such file or directory: ";
            size_t room = sizeof err->msg - (sizeof words - 1) - 1;
            memcpy(err->msg, words, sizeof words - 1);
            memcpy(err->msg + sizeof words - 1, paths[i], len < room ? len : room);
            err->msg[sizeof words - 1 + (len < room ? len : room)] = 0;
            return;
        }
    }
}

/* Opens `spec`: a path (str, bytes or os.PathLike) with wm_file_open, or a list or tuple of them
 * as one set with wm_file_open_paths. The GIL is released while the library opens. On success
 * *shown is the path messages name (the first of a list), a new reference. */
static wm_status open_spec(PyObject *spec, wm_file **file, PyObject **shown, wm_error *err,
                           int *py_error) {
    *py_error = 1;
    int is_list = PyList_Check(spec) || PyTuple_Check(spec);
    PyObject *seq = is_list ? PySequence_Fast(spec, "paths") : NULL;
    Py_ssize_t n = is_list ? (seq ? PySequence_Fast_GET_SIZE(seq) : -1) : 1;
    if (n < 0) return WM_EINVAL;
    if (is_list && n == 0) {
        Py_DECREF(seq);
        PyErr_SetString(ArgumentError, "an empty list of files: a set needs at least one");
        return WM_EINVAL;
    }
    PyObject **bytes = PyMem_Calloc((size_t)n, sizeof *bytes);
    const char **paths = PyMem_Calloc((size_t)n, sizeof *paths);
    wm_status st = WM_EINVAL;
    Py_ssize_t got = 0;
    if (!bytes || !paths) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < n; got++) {
        PyObject *item = is_list ? PySequence_Fast_GET_ITEM(seq, got) : spec;
        if (!PyUnicode_FSConverter(item, &bytes[got])) goto done;
        paths[got] = PyBytes_AS_STRING(bytes[got]);
    }
    *py_error = 0;
    Py_BEGIN_ALLOW_THREADS st = is_list ? wm_file_open_paths(paths, (size_t)n, file, err)
                                        : wm_file_open(paths[0], file, err);
    Py_END_ALLOW_THREADS if (st == WM_ENOENT) missing_file_message(paths, (size_t)n, err);
    if (st == WM_OK) {
        *shown = PyUnicode_DecodeFSDefault(paths[0]);
        if (*shown == NULL) {
            wm_file_close(*file);
            *py_error = 1;
            st = WM_ENOMEM;
        }
    }
done:
    for (Py_ssize_t i = 0; i < got; i++)
        Py_DECREF(bytes[i]);
    PyMem_Free(bytes);
    PyMem_Free(paths);
    Py_XDECREF(seq);
    return st;
}

static PyObject *Handle_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", NULL};
    PyObject *spec = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &spec)) return NULL;
    wm_file *file = NULL;
    PyObject *shown = NULL;
    wm_error err = {0};
    int py_error;
    wm_status st = open_spec(spec, &file, &shown, &err, &py_error);
    if (st != WM_OK) return py_error ? NULL : raise_wm(st, &err);
    Handle *h = (Handle *)type->tp_alloc(type, 0);
    if (h == NULL) {
        wm_file_close(file);
        Py_DECREF(shown);
        return NULL;
    }
    h->file = file;
    h->path = shown;
    h->lock = PyThread_allocate_lock();
    if (h->lock == NULL) {
        PyErr_NoMemory();
        Py_DECREF(h);
        return NULL;
    }
    return (PyObject *)h;
}

static void Handle_dealloc(Handle *h) {
    /* Every view holds a reference, so none is alive here. */
    handle_release(h);
    if (h->lock) PyThread_free_lock(h->lock);
    Py_XDECREF(h->path);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *Handle_close(Handle *h, PyObject *unused) {
    (void)unused;
    h->closed = 1; /* a load running on another thread releases when it ends */
    handle_maybe_release(h);
    return PyBool_FromLong(h->file == NULL);
}

static PyObject *tensor_tuple(const wm_file *file, size_t index) {
    wm_tensor_info ti;
    if (wm_file_tensor(file, index, &ti) != WM_OK)
        return PyErr_Format(Error, "tensor index %zu out of range", index);
    PyObject *shape = PyTuple_New(ti.n_dims);
    if (shape == NULL) return NULL;
    for (uint32_t d = 0; d < ti.n_dims; d++) /* ggml order (fastest first) to C order */
        PyTuple_SET_ITEM(shape, d, PyLong_FromUnsignedLongLong(ti.shape[ti.n_dims - 1 - d]));
    const char *tname = wm_type_name(ti.type);
    return Py_BuildValue("(nsNKKIK)", (Py_ssize_t)index, tname ? tname : "?", shape,
                         (unsigned long long)ti.nbytes, (unsigned long long)ti.offset,
                         (unsigned)ti.shard, (unsigned long long)ti.n_elements);
}

/* find(name) -> index; TensorNotFoundError naming the file and the tensor. */
static PyObject *Handle_find(Handle *h, PyObject *arg) {
    if (!handle_usable(h)) return NULL;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    size_t index;
    if (wm_file_find_tensor(h->file, name, &index) != WM_OK) {
        char msg[WM_ERROR_MSG_SIZE];
        snprintf(msg, sizeof msg, "%s: no tensor named '%s'", wm_file_path(h->file), name);
        return raise_status(TensorNotFoundError, WM_ENOENT, 0, msg);
    }
    return PyLong_FromSize_t(index);
}

/* tensors() -> [(index, type, shape in C order, nbytes, offset, shard, n_elements)], header order
 */
static PyObject *Handle_tensors(Handle *h, PyObject *unused) {
    (void)unused;
    if (!handle_usable(h)) return NULL;
    size_t n = wm_file_tensor_count(h->file);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = tensor_tuple(h->file, i);
        if (t == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    return list;
}

static PyObject *Handle_names(Handle *h, PyObject *unused) {
    (void)unused;
    if (!handle_usable(h)) return NULL;
    size_t n = wm_file_tensor_count(h->file);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (list == NULL) return NULL;
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info ti;
        PyObject *s =
            wm_file_tensor(h->file, i, &ti) == WM_OK ? PyUnicode_FromString(ti.name) : NULL;
        if (s == NULL) {
            Py_DECREF(list);
            return PyErr_Occurred() ? NULL : PyErr_Format(Error, "tensor %zu", i);
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyObject *string_obj(wm_string s) {
    /* GGUF strings need not be UTF-8 (byte tokens): surrogateescape keeps every byte. */
    return PyUnicode_DecodeUTF8(s.ptr, (Py_ssize_t)s.len, "surrogateescape");
}

static int value_is_signed(wm_value_type t) {
    return t == WM_VALUE_I8 || t == WM_VALUE_I16 || t == WM_VALUE_I32 || t == WM_VALUE_I64;
}

static PyObject *array_obj(const wm_file *f, size_t index, const wm_kv *kv) {
    if (kv->elem_type == WM_VALUE_ARRAY) Py_RETURN_NONE; /* nested arrays: not represented */
    if (kv->length > (uint64_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *list = PyList_New((Py_ssize_t)kv->length);
    if (list == NULL) return NULL;
    wm_array_iter it;
    if (kv->elem_type == WM_VALUE_STRING && wm_file_array_iter(f, index, &it) != WM_OK)
        goto type_error;
    for (uint64_t e = 0; e < kv->length; e++) {
        PyObject *v = NULL;
        wm_status st;
        if (kv->elem_type == WM_VALUE_STRING) {
            wm_string s;
            st = wm_array_iter_next(&it, &s);
            if (st == WM_OK) v = string_obj(s);
        } else if (kv->elem_type == WM_VALUE_F32 || kv->elem_type == WM_VALUE_F64) {
            double d;
            st = wm_file_array_f64(f, index, e, &d);
            if (st == WM_OK) v = PyFloat_FromDouble(d);
        } else if (value_is_signed(kv->elem_type)) {
            int64_t i;
            st = wm_file_array_i64(f, index, e, &i);
            if (st == WM_OK) v = PyLong_FromLongLong(i);
        } else {
            uint64_t u;
            st = wm_file_array_u64(f, index, e, &u);
            if (st == WM_OK)
                v = kv->elem_type == WM_VALUE_BOOL ? PyBool_FromLong(u != 0)
                                                   : PyLong_FromUnsignedLongLong(u);
        }
        if (st != WM_OK) goto type_error;
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)e, v);
    }
    return list;
type_error:
    Py_DECREF(list);
    Py_RETURN_NONE; /* an element type the getters do not read: not represented */
}

static PyObject *value_obj(const wm_file *f, size_t index, const wm_kv *kv) {
    switch (kv->type) {
    case WM_VALUE_STRING: {
        wm_string s;
        if (wm_file_kv_string(f, index, &s) == WM_OK) return string_obj(s);
        break;
    }
    case WM_VALUE_ARRAY: return array_obj(f, index, kv);
    case WM_VALUE_BOOL: {
        int b;
        if (wm_file_get_bool(f, kv->key, &b) == WM_OK) return PyBool_FromLong(b);
        break;
    }
    case WM_VALUE_F32:
    case WM_VALUE_F64: {
        double d;
        if (wm_file_kv_f64(f, index, &d) == WM_OK) return PyFloat_FromDouble(d);
        break;
    }
    default:
        if (value_is_signed(kv->type)) {
            int64_t i;
            if (wm_file_kv_i64(f, index, &i) == WM_OK) return PyLong_FromLongLong(i);
        } else {
            uint64_t u;
            if (wm_file_kv_u64(f, index, &u) == WM_OK) return PyLong_FromUnsignedLongLong(u);
        }
        break;
    }
    Py_RETURN_NONE;
}

/* metadata() -> {key: value}, in file order (GGUF: typed values; safetensors: strings). */
static PyObject *Handle_metadata(Handle *h, PyObject *unused) {
    (void)unused;
    if (!handle_usable(h)) return NULL;
    PyObject *dict = PyDict_New();
    if (dict == NULL) return NULL;
    size_t n = wm_file_metadata_count(h->file);
    for (size_t i = 0; i < n; i++) {
        wm_kv kv;
        if (wm_file_metadata(h->file, i, &kv) != WM_OK) continue;
        PyObject *v = value_obj(h->file, i, &kv);
        if (v == NULL || PyDict_SetItemString(dict, kv.key, v) != 0) {
            Py_XDECREF(v);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(v);
    }
    return dict;
}

/* The options of load() and load_part(), from their common arguments; `rules` (128 slots) holds
 * one conversion rule per distinct type that converts to `to_name` (type ids are below 128). 0
 * with an exception for a bad mode or dtype name. */
static int load_options(Handle *h, const char *mode_name, int lock, int backend, int device,
                        const char *to_name, int prefetch, unsigned threads, wm_convert_rule *rules,
                        wm_load_options *opts) {
    *opts = (wm_load_options)WM_LOAD_OPTIONS_INIT;
    opts->mode = wm_mode_from_name(mode_name);
    if (opts->mode == WM_MODE_NONE) {
        PyErr_Format(ArgumentError, "mode must be 'mmap', 'heap' or 'mmap-private', not '%s'",
                     mode_name);
        return 0;
    }
    opts->lock = (wm_lock)lock;
    opts->backend = (wm_backend_kind)backend;
    opts->device = device;
    opts->prefetch = prefetch;
    opts->threads = threads;
    if (to_name == NULL) return 1;
    wm_type to = wm_type_from_name(to_name);
    if (to == WM_TYPE_INVALID) {
        PyErr_Format(ArgumentError, "unknown dtype '%s'", to_name);
        return 0;
    }
    size_t n_rules = 0;
    unsigned char seen[128] = {0};
    size_t n = wm_file_tensor_count(h->file);
    for (size_t i = 0; i < n; i++) {
        wm_tensor_info ti;
        if (wm_file_tensor(h->file, i, &ti) != WM_OK || ti.type < 0 || ti.type >= 128 ||
            seen[ti.type])
            continue;
        seen[ti.type] = 1;
        if (ti.type != to && wm_convert_supported(ti.type, to))
            rules[n_rules++] = (wm_convert_rule){NULL, ti.type, to};
    }
    opts->convert = n_rules ? rules : NULL;
    opts->n_convert = n_rules;
    return 1;
}

/* wm_model_load with the GIL released, counted in h->busy so that a close() meanwhile leaves
 * the release to the end of the load. A handle closed during the load gives the new model
 * back at once and raises ClosedError. */
static wm_model *load_unlocked(Handle *h, const wm_load_options *opts) {
    wm_model *model = NULL;
    wm_error err = {0};
    wm_status st;
    h->backend = opts->backend;
    h->device = opts->device;
    h->busy++;
    Py_BEGIN_ALLOW_THREADS st = wm_model_load(h->file, opts, &model, &err);
    Py_END_ALLOW_THREADS h->busy--;
    if (st == WM_OK && h->closed) {
        wm_model_release(model);
        model = NULL;
        PyErr_Format(ClosedError, "%U: the file was closed while it loaded", h->path);
    } else if (st != WM_OK) {
        raise_wm(st, &err);
    }
    handle_maybe_release(h);
    return model;
}

/* load(mode, lock=0, backend=0, device=0, to=None, prefetch=False, threads=0): loads the whole
 * model once. Any number of threads may call it (or ask for tensors, which call it): the first
 * loads, with the GIL released; the others wait for it (GIL released too) and return once the
 * model is there; when that load failed, the next waiter tries again. `to` names a conversion
 * target ("f32", "f16", "bf16", "f64"): every tensor whose type converts to it is delivered
 * converted (heap mode, CPU). */
static PyObject *Handle_load(Handle *h, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"mode", "lock",     "backend", "device",
                             "to",   "prefetch", "threads", NULL};
    const char *mode_name, *to_name = NULL;
    int lock = 0, backend = 0, device = 0, prefetch = 0;
    unsigned threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|iiizpI", kwlist, &mode_name, &lock, &backend,
                                     &device, &to_name, &prefetch, &threads))
        return NULL;
    if (!handle_usable(h)) return NULL;
    if (h->model != NULL) Py_RETURN_NONE;
    wm_convert_rule rules[128];
    wm_load_options opts;
    if (!load_options(h, mode_name, lock, backend, device, to_name, prefetch, threads, rules,
                      &opts))
        return NULL;
    if (!PyThread_acquire_lock(h->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(h->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    wm_model *model = NULL;
    if (h->model == NULL && handle_usable(h)) model = load_unlocked(h, &opts);
    if (model != NULL) h->model = model;
    PyThread_release_lock(h->lock);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Handle_stats(Handle *h, PyObject *unused) {
    (void)unused;
    if (h->model == NULL) Py_RETURN_NONE;
    wm_model_stats s = WM_MODEL_STATS_INIT;
    wm_model_stats_get(h->model, &s);
    return Py_BuildValue(
        "{sKsIsKsKsKsKsKsIsdsKsKsK}", "tensor_bytes", (unsigned long long)s.tensor_bytes, "buffers",
        s.buffers, "mapped_bytes", (unsigned long long)s.mapped_bytes, "heap_bytes",
        (unsigned long long)s.heap_bytes, "committed", (unsigned long long)s.committed,
        "locked_bytes", (unsigned long long)s.locked_bytes, "device_bytes",
        (unsigned long long)s.device_bytes, "threads", s.threads, "load_seconds", s.load_seconds,
        "bytes_read", (unsigned long long)s.bytes_read, "read_direct",
        (unsigned long long)s.read_direct, "read_buffered", (unsigned long long)s.read_buffered);
}

static PyObject *Handle_get_format(Handle *h, void *c) {
    (void)c;
    if (h->file == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(wm_format_name(wm_file_format(h->file)));
}

static PyObject *Handle_get_path(Handle *h, void *c) {
    (void)c;
    return Py_NewRef(h->path);
}

static PyObject *Handle_get_closed(Handle *h, void *c) {
    (void)c;
    return PyBool_FromLong(h->closed);
}

static PyObject *Handle_get_released(Handle *h, void *c) {
    (void)c;
    return PyBool_FromLong(h->file == NULL);
}

static PyObject *Handle_get_loaded(Handle *h, void *c) {
    (void)c;
    return PyBool_FromLong(h->model != NULL);
}

static PyObject *Handle_get_views(Handle *h, void *c) {
    (void)c;
    return PyLong_FromSsize_t(h->views);
}

static PyObject *Handle_get_mode(Handle *h, void *c) {
    (void)c;
    if (h->model == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(wm_mode_name(wm_model_mode(h->model)));
}

static PyObject *Handle_shards(Handle *h, PyObject *unused) {
    (void)unused;
    if (!handle_usable(h)) return NULL;
    uint32_t n = wm_file_shard_count(h->file);
    PyObject *list = PyList_New(n);
    for (uint32_t i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_DecodeFSDefault(wm_file_shard_path(h->file, i));
        if (s == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

/* ---------------------------------------------------------------------------------------------
 * Export: one tensor's DLPack producer
 * ------------------------------------------------------------------------------------------- */

typedef struct Export {
    PyObject_HEAD Handle *handle;
    Part *part; /* the model of part of the file it exports from; NULL: handle->model */
    size_t index;
    DLDataType dtype;
    int ndim;
    int64_t shape[WM_MAX_DIMS];
} Export;

static PyTypeObject ExportType;

/* The DLPack type of an element type that has one element per block; 0 when it has none. */
static int dl_type(wm_type t, DLDataType *out) {
    uint8_t code;
    switch (t) {
    case WM_TYPE_F16:
    case WM_TYPE_F32:
    case WM_TYPE_F64: code = kDLFloat; break;
    case WM_TYPE_BF16: code = kDLBfloat; break;
    case WM_TYPE_I8:
    case WM_TYPE_I16:
    case WM_TYPE_I32:
    case WM_TYPE_I64: code = kDLInt; break;
    case WM_TYPE_U8:
    case WM_TYPE_U16:
    case WM_TYPE_U32:
    case WM_TYPE_U64:
    case WM_TYPE_BOOL:    /* DLPack 0.6 has no bool: bytes, viewed as bool by the package */
    case WM_TYPE_F8_E4M3: /* and the 8-bit floats likewise, where the framework has them */
    case WM_TYPE_F8_E5M2:
    case WM_TYPE_F8_E8M0:
    case WM_TYPE_F8_E4M3FNUZ:
    case WM_TYPE_F8_E5M2FNUZ: code = kDLUInt; break;
    case WM_TYPE_C64: code = kDLComplex; break;
    default: return 0;
    }
    *out = (DLDataType){code, (uint8_t)(wm_type_block_bytes(t) * 8), 1};
    return 1;
}

/* A new Export of tensor `index` of `model` (h->model, or part->model, which it then holds): a
 * type with a DLPack equivalent keeps its shape as loaded (C order); any other (quantized
 * blocks, sub-byte floats) is bytes, shape (..., bytes of a row) when a row is whole blocks,
 * else (nbytes,). `code` (a DLDataTypeCode) >= 0 reinterprets the elements as another type of
 * the same width (bf16 as uint16 for NumPy). */
static PyObject *export_new(Handle *h, Part *part, wm_model *model, size_t index, int code,
                            int bits) {
    uint64_t shape[WM_MAX_DIMS];
    uint32_t n_dims;
    wm_type type;
    uint64_t nbytes;
    if (wm_model_tensor_info(model, index, &type, &nbytes) != WM_OK ||
        wm_model_tensor_shape(model, index, shape, &n_dims, NULL) != WM_OK)
        return PyErr_Format(Error, "%U: tensor %zu is not loaded", h->path, index);
    Export *e = PyObject_New(Export, &ExportType);
    if (e == NULL) return NULL;
    e->handle = (Handle *)Py_NewRef(h);
    e->part = part;
    if (part) part->refs++;
    e->index = index;
    e->ndim = (int)n_dims;
    for (uint32_t d = 0; d < n_dims; d++)
        e->shape[d] = (int64_t)shape[n_dims - 1 - d];
    if (!dl_type(type, &e->dtype)) {
        uint32_t be = wm_type_block_elems(type), bb = wm_type_block_bytes(type);
        e->dtype = (DLDataType){kDLUInt, 8, 1};
        if (n_dims >= 1 && be && shape[0] % be == 0) {
            e->shape[n_dims - 1] = (int64_t)(shape[0] / be * bb);
        } else {
            e->ndim = 1;
            e->shape[0] = (int64_t)nbytes;
        }
    }
    if (code >= 0) {
        int width = e->dtype.bits;
        if (bits != -1 && bits != width) {
            Py_DECREF(e);
            return PyErr_Format(ArgumentError, "reinterpretation keeps the width (%d bits)", width);
        }
        e->dtype.code = (uint8_t)code;
    }
    return (PyObject *)e;
}

/* export(index, code=-1, bits=-1) -> Export of a tensor of the whole model (loaded first). */
static PyObject *Handle_export(Handle *h, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"index", "code", "bits", NULL};
    Py_ssize_t index;
    int code = -1, bits = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "n|ii", kwlist, &index, &code, &bits)) return NULL;
    if (!handle_usable(h)) return NULL;
    if (h->model == NULL) return PyErr_Format(Error, "%U: not loaded", h->path);
    if (index < 0 || (size_t)index >= wm_file_tensor_count(h->file))
        return PyErr_Format(ArgumentError, "tensor index %zd out of range", index);
    return export_new(h, NULL, h->model, (size_t)index, code, bits);
}

/* load_part(index, row_begin, row_end, mode, lock=0, backend=0, device=0, threads=0, code=-1)
 * -> Export: loads only rows [row_begin, row_end) of tensor `index` (row_begin == row_end == 0:
 * the whole tensor) as a model of its own, which the Export and its views hold. Many threads
 * may load parts at once, and while the whole model loads. */
static PyObject *Handle_load_part(Handle *h, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"index",   "row_begin", "row_end", "mode", "lock",
                             "backend", "device",    "threads", "code", NULL};
    Py_ssize_t index;
    unsigned long long r0, r1;
    const char *mode_name;
    int lock = 0, backend = 0, device = 0, code = -1;
    unsigned threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "nKKs|iiiIi", kwlist, &index, &r0, &r1, &mode_name,
                                     &lock, &backend, &device, &threads, &code))
        return NULL;
    if (!handle_usable(h)) return NULL;
    if (index < 0 || (size_t)index >= wm_file_tensor_count(h->file))
        return PyErr_Format(ArgumentError, "tensor index %zd out of range", index);
    wm_load_options opts;
    if (!load_options(h, mode_name, lock, backend, device, NULL, 0, threads, NULL, &opts))
        return NULL;
    wm_tensor_select sel = {(size_t)index, r0, r1};
    opts.select = &sel;
    opts.n_select = 1;
    Part *part = PyMem_RawCalloc(1, sizeof *part);
    if (part == NULL) return PyErr_NoMemory();
    part->model = load_unlocked(h, &opts);
    if (part->model == NULL) {
        PyMem_RawFree(part);
        return NULL;
    }
    part->refs = 1;
    PyObject *e = export_new(h, part, part->model, (size_t)index, code, -1);
    part_unref(part); /* the Export holds it now (or, on failure, nothing does) */
    return e;
}

static void Export_dealloc(Export *e) {
    part_unref(e->part);
    Py_XDECREF(e->handle);
    PyObject_Free(e);
}

/* ---------------------------------------------------------------------------------------------
 * views
 * ------------------------------------------------------------------------------------------- */

typedef struct View {
    DLManagedTensor managed;
    int64_t shape[WM_MAX_DIMS];
    Handle *handle;
    Part *part; /* NULL: a view of handle->model */
} View;

static const char CAPSULE_NAME[] = "dltensor";
static const char CAPSULE_USED[] = "used_dltensor";

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* Called by the consumer when its tensor dies, possibly on another thread without the GIL. */
static void view_deleter(DLManagedTensor *managed) {
    View *v = managed->manager_ctx;
    if (!Py_IsInitialized() || finalizing())
        return; /* the process is ending: the OS takes everything back */
    PyGILState_STATE g = PyGILState_Ensure();
    Handle *h = v->handle;
    h->views--;
    part_unref(v->part);
    handle_maybe_release(h);
    Py_DECREF(h);
    PyMem_RawFree(v);
    PyGILState_Release(g);
}

/* A capsule never consumed still owns its view. */
static void capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, CAPSULE_USED)) return;
        /* A destructor may run while an exception is set: keep it. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *saved = PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
#endif
    DLManagedTensor *m = PyCapsule_GetPointer(cap, CAPSULE_NAME);
    if (m != NULL && m->deleter != NULL)
        m->deleter(m);
    else
        PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(saved);
#else
    PyErr_Restore(type, value, tb);
#endif
}

static DLDevice export_device(const Export *e) {
    if (e->handle->backend == WM_BACKEND_CUDA) return (DLDevice){kDLCUDA, e->handle->device};
    return (DLDevice){kDLCPU, 0};
}

/* __dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None): a new capsule
 * ("dltensor", DLPack 0.6, unversioned as the spec allows a producer that has no 1.x) viewing
 * the tensor's memory. The data are complete when the load returns, so there is nothing for a
 * consumer's stream to wait for. */
static PyObject *Export_dlpack(Export *e, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOO", kwlist, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    Handle *h = e->handle;
    wm_model *model = e->part ? e->part->model : h->model;
    if (model == NULL) return PyErr_Format(Error, "%U: the model is released", h->path);
    if (copy == Py_True)
        return PyErr_Format(PyExc_BufferError, "weightmap exports views, not copies");
    DLDevice dev = export_device(e);
    if (dl_device != Py_None) {
        int type, id;
        if (!PyArg_ParseTuple(dl_device, "ii", &type, &id)) return NULL;
        if (type != (int)dev.device_type || id != dev.device_id)
            return PyErr_Format(PyExc_BufferError, "the tensor lives on device (%d, %d)",
                                (int)dev.device_type, dev.device_id);
    }
    void *data;
    wm_type type;
    uint64_t nbytes;
    wm_model_tensor_info(model, e->index, &type, &nbytes);
    if (dev.device_type == kDLCUDA) {
        data = (void *)(uintptr_t)wm_model_tensor_device_ptr(model, e->index);
    } else {
        static _Alignas(64) unsigned char empty[64];
        data = (void *)wm_model_tensor_data(model, e->index);
        if (data == NULL && nbytes == 0)
            data = empty; /* consumers want an address even for no bytes */
    }
    if (data == NULL && nbytes != 0)
        return PyErr_Format(Error, "%U: tensor %zu has no memory on this device", h->path,
                            e->index);
    View *v = PyMem_RawCalloc(1, sizeof *v);
    if (v == NULL) return PyErr_NoMemory();
    memcpy(v->shape, e->shape, sizeof v->shape);
    v->handle = (Handle *)Py_NewRef(h);
    v->part = e->part;
    if (v->part) v->part->refs++;
    h->views++;
    v->managed.dl_tensor = (DLTensor){.data = data,
                                      .device = dev,
                                      .ndim = e->ndim,
                                      .dtype = e->dtype,
                                      .shape = v->shape,
                                      .strides = NULL,
                                      .byte_offset = 0};
    v->managed.manager_ctx = v;
    v->managed.deleter = view_deleter;
    PyObject *cap = PyCapsule_New(&v->managed, CAPSULE_NAME, capsule_destructor);
    if (cap == NULL) view_deleter(&v->managed);
    return cap;
}

static PyObject *Export_dlpack_device(Export *e, PyObject *unused) {
    (void)unused;
    DLDevice dev = export_device(e);
    return Py_BuildValue("(ii)", (int)dev.device_type, dev.device_id);
}

static PyObject *Export_get_shape(Export *e, void *c) {
    (void)c;
    PyObject *t = PyTuple_New(e->ndim);
    for (int d = 0; t && d < e->ndim; d++)
        PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(e->shape[d]));
    return t;
}

/* recode(code) -> a new Export of the same tensor whose elements are read as DLPack type code
 * `code` of the same width (bf16 as uint16 for NumPy). */
static PyObject *Export_recode(Export *e, PyObject *arg) {
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (code < 0 || code > 255) return PyErr_Format(ArgumentError, "bad type code %ld", code);
    Export *r = PyObject_New(Export, &ExportType);
    if (r == NULL) return NULL;
    r->handle = (Handle *)Py_NewRef(e->handle);
    r->part = e->part;
    if (r->part) r->part->refs++;
    r->index = e->index;
    r->dtype = e->dtype;
    r->dtype.code = (uint8_t)code;
    r->ndim = e->ndim;
    memcpy(r->shape, e->shape, sizeof r->shape);
    return (PyObject *)r;
}

static PyMethodDef Export_methods[] = {
    {"recode", (PyCFunction)Export_recode, METH_O,
     "recode(code) -> Export: the same tensor, elements read as another type of their width"},
    {"__dlpack__", (PyCFunction)(void (*)(void))Export_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, *, max_version=None, dl_device=None, copy=None): a DLPack capsule "
     "viewing the tensor (no copy); the view keeps the model alive."},
    {"__dlpack_device__", (PyCFunction)Export_dlpack_device, METH_NOARGS,
     "(device type, device id) as DLPack numbers them."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Export_getset[] = {
    {"shape", (getter)Export_get_shape, NULL, "shape the view will have (C order)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject ExportType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weightmap._weightmap.Export",
    .tp_basicsize = sizeof(Export),
    .tp_dealloc = (destructor)Export_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A DLPack producer for one tensor of a loaded Handle.",
    .tp_methods = Export_methods,
    .tp_getset = Export_getset,
};

static PyMethodDef Handle_methods[] = {
    {"close", (PyCFunction)Handle_close, METH_NOARGS,
     "close() -> bool: no further use; the model and file are released now if no view is alive "
     "(returns True), else when the last view is deleted (False)."},
    {"find", (PyCFunction)Handle_find, METH_O, "find(name) -> index, or TensorNotFoundError."},
    {"names", (PyCFunction)Handle_names, METH_NOARGS, "tensor names in header order"},
    {"tensors", (PyCFunction)Handle_tensors, METH_NOARGS,
     "[(index, type, shape, nbytes, offset, shard, n_elements)] in header order"},
    {"metadata", (PyCFunction)Handle_metadata, METH_NOARGS, "{key: value} in file order"},
    {"load", (PyCFunction)(void (*)(void))Handle_load, METH_VARARGS | METH_KEYWORDS,
     "load(mode, lock=0, backend=0, device=0, to=None, prefetch=False, threads=0)"},
    {"stats", (PyCFunction)Handle_stats, METH_NOARGS, "wm_model_stats as a dict, None unloaded"},
    {"shards", (PyCFunction)Handle_shards, METH_NOARGS, "paths of the shards"},
    {"export", (PyCFunction)(void (*)(void))Handle_export, METH_VARARGS | METH_KEYWORDS,
     "export(index, code=-1, bits=-1) -> Export (a DLPack producer)"},
    {"load_part", (PyCFunction)(void (*)(void))Handle_load_part, METH_VARARGS | METH_KEYWORDS,
     "load_part(index, row_begin, row_end, mode, lock=0, backend=0, device=0, threads=0, "
     "code=-1) -> Export of rows [row_begin, row_end) of one tensor, loaded alone"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Handle_getset[] = {
    {"format", (getter)Handle_get_format, NULL, "'gguf' or 'safetensors'", NULL},
    {"path", (getter)Handle_get_path, NULL, "the path opened", NULL},
    {"closed", (getter)Handle_get_closed, NULL, "close() was called", NULL},
    {"released", (getter)Handle_get_released, NULL, "model and file are released", NULL},
    {"loaded", (getter)Handle_get_loaded, NULL, "a model is loaded and held", NULL},
    {"views", (getter)Handle_get_views, NULL, "DLPack views alive", NULL},
    {"mode", (getter)Handle_get_mode, NULL, "the load mode, None unloaded", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weightmap._weightmap.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_dealloc = (destructor)Handle_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "Handle(path or [paths]): one open weight file or set (wm_file: a path as "
        "wm_file_open opens it, a list as wm_file_open_paths) and, once loaded, its wm_model.",
    .tp_methods = Handle_methods,
    .tp_getset = Handle_getset,
    .tp_new = Handle_new,
};

/* ---------------------------------------------------------------------------------------------
 * Pool: models under a budget (wm_pool). A PoolModel is one get; its put() gives the use back,
 * or, while buffers of its tensors are alive (PoolTensor, through the buffer protocol), the last
 * of them does, so that no memoryview outlives the use that keeps its bytes mapped. Every
 * PoolModel holds its Pool, so a Pool dies only once every model is back.
 * ------------------------------------------------------------------------------------------- */

typedef struct Pool {
    PyObject_HEAD wm_pool *pool; /* NULL once closed */
} Pool;

typedef struct PoolModel {
    PyObject_HEAD Pool *owner;
    wm_model *model; /* NULL once its use is back */
    PyObject *path;
    int put;          /* put() was called */
    Py_ssize_t views; /* buffers alive */
} PoolModel;

typedef struct PoolTensor {
    PyObject_HEAD PoolModel *owner;
    size_t index;
} PoolTensor;

static PyTypeObject PoolType, PoolModelType, PoolTensorType;

/* The use goes back to the pool (once). */
static int pool_model_give_back(PoolModel *pm) {
    if (pm->model == NULL || pm->owner->pool == NULL) return 0;
    wm_error err = {0};
    wm_status st;
    wm_model *m = pm->model;
    pm->model = NULL;
    Py_BEGIN_ALLOW_THREADS st = wm_pool_put(pm->owner->pool, m, &err);
    Py_END_ALLOW_THREADS if (st != WM_OK) {
        raise_wm(st, &err);
        return -1;
    }
    return 0;
}

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"budget", "device_budget", "sleep", NULL};
    unsigned long long budget = 0, device_budget = 0;
    int sleep = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|KKp", kwlist, &budget, &device_budget, &sleep))
        return NULL;
    wm_pool_options o = WM_POOL_OPTIONS_INIT;
    o.budget = budget;
    o.device_budget = device_budget;
    o.flags = sleep ? WM_POOL_SLEEP : 0;
    wm_pool *p = NULL;
    wm_error err = {0};
    wm_status st = wm_pool_open(&o, &p, &err);
    if (st != WM_OK) return raise_wm(st, &err);
    Pool *self = (Pool *)type->tp_alloc(type, 0);
    if (self == NULL) {
        wm_pool_close(p, NULL);
        return NULL;
    }
    self->pool = p;
    return (PyObject *)self;
}

static void Pool_dealloc(Pool *self) {
    wm_pool_close(self->pool, NULL); /* every PoolModel held this Pool: none is in use */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int pool_open(Pool *self) {
    if (self->pool != NULL) return 1;
    PyErr_SetString(ClosedError, "the pool is closed");
    return 0;
}

static PyObject *Pool_get(Pool *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "mode", "lock", "backend", "device", "threads", NULL};
    PyObject *path_obj;
    const char *mode_name;
    int lock = 0, backend = 0, device = 0;
    unsigned threads = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&s|iiiI", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &mode_name, &lock, &backend, &device, &threads))
        return NULL;
    wm_load_options o = WM_LOAD_OPTIONS_INIT;
    o.mode = wm_mode_from_name(mode_name);
    o.lock = (wm_lock)lock;
    o.backend = (wm_backend_kind)backend;
    o.device = device;
    o.threads = threads;
    if (o.mode == WM_MODE_NONE) {
        Py_DECREF(path_obj);
        return PyErr_Format(ArgumentError,
                            "mode must be 'mmap', 'heap' or 'mmap-private', not '%s'", mode_name);
    }
    if (!pool_open(self)) {
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(path_obj);
    wm_model *m = NULL;
    wm_error err = {0};
    wm_status st;
    Py_BEGIN_ALLOW_THREADS st = wm_pool_get(self->pool, path, &o, &m, &err);
    Py_END_ALLOW_THREADS PoolModel *pm = NULL;
    if (st == WM_OK) pm = PyObject_New(PoolModel, &PoolModelType);
    if (pm != NULL) {
        pm->path = PyUnicode_DecodeFSDefault(path);
        pm->owner = self;
        Py_INCREF(self);
        pm->model = m;
        pm->put = 0;
        pm->views = 0;
        if (pm->path == NULL) Py_CLEAR(pm); /* its dealloc gives the use back */
    } else if (st == WM_OK) {
        wm_pool_put(self->pool, m, NULL);
    }
    Py_DECREF(path_obj);
    if (st != WM_OK) return raise_wm(st, &err);
    return (PyObject *)pm;
}

/* The last get's wake and sleeps, part by part (wm_pool_stats' last_wake_*, last_sleep_*). */
static int Pool_swap_stats(PyObject *d, const wm_pool_stats *s) {
    PyObject *w = Py_BuildValue(
        "{sdsdsdsdsK}", "alloc_seconds", s->last_wake_alloc_seconds, "copy_seconds",
        s->last_wake_copy_seconds, "unregister_seconds", s->last_wake_unregister_seconds,
        "free_seconds", s->last_wake_free_seconds, "bytes", (unsigned long long)s->last_wake_bytes);
    PyObject *z = Py_BuildValue(
        "{sdsdsdsdsdsK}", "seconds", s->last_sleep_seconds, "alloc_seconds",
        s->last_sleep_alloc_seconds, "register_seconds", s->last_sleep_register_seconds,
        "copy_seconds", s->last_sleep_copy_seconds, "free_seconds", s->last_sleep_free_seconds,
        "bytes", (unsigned long long)s->last_sleep_bytes);
    int bad = !w || !z || PyDict_SetItemString(d, "last_wake", w) ||
              PyDict_SetItemString(d, "last_sleep", z);
    Py_XDECREF(w);
    Py_XDECREF(z);
    return bad ? -1 : 0;
}

static PyObject *Pool_stats(Pool *self, PyObject *unused) {
    (void)unused;
    wm_pool_stats s = WM_POOL_STATS_INIT;
    wm_pool_stats_get(self->pool, &s);
    PyObject *d = Py_BuildValue(
        "{sIsIsKsKsKsKsKsKsKsKsdsKsIsKsKsI}", "resident", s.resident, "in_use", s.in_use, "held",
        (unsigned long long)s.held, "held_peak", (unsigned long long)s.held_peak, "loads",
        (unsigned long long)s.loads, "hits", (unsigned long long)s.hits, "wakes",
        (unsigned long long)s.wakes, "evictions", (unsigned long long)s.evictions, "returned",
        (unsigned long long)s.returned, "unproven", (unsigned long long)s.unproven,
        "last_get_seconds", s.last_get_seconds, "last_returned",
        (unsigned long long)s.last_returned, "last_evicted", s.last_evicted, "returned_device",
        (unsigned long long)s.returned_device, "sleeps", (unsigned long long)s.sleeps, "asleep",
        s.asleep);
    if (d && Pool_swap_stats(d, &s)) Py_CLEAR(d);
    return d;
}

static PyObject *Pool_trim(Pool *self, PyObject *unused) {
    (void)unused;
    if (!pool_open(self)) return NULL;
    uint64_t r;
    Py_BEGIN_ALLOW_THREADS r = wm_pool_trim(self->pool);
    Py_END_ALLOW_THREADS return PyLong_FromUnsignedLongLong(r);
}

static PyObject *Pool_close(Pool *self, PyObject *unused) {
    (void)unused;
    if (self->pool == NULL) Py_RETURN_NONE;
    wm_error err = {0};
    wm_status st;
    Py_BEGIN_ALLOW_THREADS st = wm_pool_close(self->pool, &err);
    Py_END_ALLOW_THREADS if (st != WM_OK) return raise_wm(st, &err);
    self->pool = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef Pool_methods[] = {
    {"get", (PyCFunction)(void (*)(void))Pool_get, METH_VARARGS | METH_KEYWORDS,
     "get(path, mode, lock=0, backend=0, device=0, threads=0) -> PoolModel (wm_pool_get)"},
    {"stats", (PyCFunction)Pool_stats, METH_NOARGS, "wm_pool_stats as a dict"},
    {"trim", (PyCFunction)Pool_trim, METH_NOARGS, "evict every idle model; the bytes returned"},
    {"close", (PyCFunction)Pool_close, METH_NOARGS,
     "close(): every model released (wm_pool_close); Error naming a model still in use"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weightmap._weightmap.Pool",
    .tp_basicsize = sizeof(Pool),
    .tp_dealloc = (destructor)Pool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pool(budget=0, device_budget=0, sleep=False): models under a budget (wm_pool).",
    .tp_methods = Pool_methods,
    .tp_new = Pool_new,
};

static void PoolModel_dealloc(PoolModel *pm) {
    if (pool_model_give_back(pm) != 0) PyErr_WriteUnraisable((PyObject *)pm);
    Py_XDECREF(pm->path);
    Py_XDECREF(pm->owner);
    PyObject_Free(pm);
}

static PyObject *PoolModel_put(PoolModel *pm, PyObject *unused) {
    (void)unused;
    if (pm->put)
        return PyErr_Format(ArgumentError,
                            "%U: wm_pool_put: the model is not in use (put back "
                            "twice?)",
                            pm->path);
    pm->put = 1;
    if (pm->views == 0 && pool_model_give_back(pm) != 0) return NULL;
    Py_RETURN_NONE;
}

static int pool_model_usable(PoolModel *pm) {
    if (!pm->put && pm->model != NULL) return 1;
    PyErr_Format(ClosedError, "%U: the model was put back", pm->path);
    return 0;
}

static PyObject *PoolModel_names(PoolModel *pm, PyObject *unused) {
    (void)unused;
    if (!pool_model_usable(pm)) return NULL;
    const wm_file *f = wm_model_file(pm->model);
    size_t n = wm_file_tensor_count(f);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        wm_tensor_info ti;
        PyObject *s = wm_file_tensor(f, i, &ti) == WM_OK ? PyUnicode_FromString(ti.name) : NULL;
        if (s == NULL) {
            Py_CLEAR(list);
            if (!PyErr_Occurred()) PyErr_NoMemory();
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
    return list;
}

static PyObject *PoolModel_buffer(PoolModel *pm, PyObject *name) {
    if (!pool_model_usable(pm)) return NULL;
    const char *s = PyUnicode_AsUTF8(name);
    if (s == NULL) return NULL;
    size_t index;
    if (wm_file_find_tensor(wm_model_file(pm->model), s, &index) != WM_OK)
        return PyErr_Format(TensorNotFoundError, "%U: no tensor '%s'", pm->path, s);
    if (wm_model_tensor_data(pm->model, index) == NULL)
        return PyErr_Format(ArgumentError, "%U: tensor '%s' is not in host memory", pm->path, s);
    PoolTensor *t = PyObject_New(PoolTensor, &PoolTensorType);
    if (t == NULL) return NULL;
    t->owner = pm;
    Py_INCREF(pm);
    t->index = index;
    PyObject *view = PyMemoryView_FromObject((PyObject *)t);
    Py_DECREF(t);
    return view;
}

static PyObject *PoolModel_get_path(PoolModel *pm, void *c) {
    (void)c;
    Py_INCREF(pm->path);
    return pm->path;
}

static PyObject *PoolModel_get_mode(PoolModel *pm, void *c) {
    (void)c;
    if (pm->model == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(wm_mode_name(wm_model_mode(pm->model)));
}

static PyObject *PoolModel_get_in_use(PoolModel *pm, void *c) {
    (void)c;
    return PyBool_FromLong(pm->model != NULL);
}

static PyMethodDef PoolModel_methods[] = {
    {"put", (PyCFunction)PoolModel_put, METH_NOARGS,
     "put(): the use goes back to the pool (at once, or when the last buffer is released)"},
    {"names", (PyCFunction)PoolModel_names, METH_NOARGS, "tensor names in header order"},
    {"buffer", (PyCFunction)PoolModel_buffer, METH_O,
     "buffer(name) -> memoryview of the tensor's bytes (read-only in mode mmap)"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef PoolModel_getset[] = {
    {"path", (getter)PoolModel_get_path, NULL, "the path asked for", NULL},
    {"mode", (getter)PoolModel_get_mode, NULL, "the load mode, None once back", NULL},
    {"in_use", (getter)PoolModel_get_in_use, NULL, "this use is not back yet", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject PoolModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weightmap._weightmap.PoolModel",
    .tp_basicsize = sizeof(PoolModel),
    .tp_dealloc = (destructor)PoolModel_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One use of a model of a Pool (wm_pool_get); put() gives it back.",
    .tp_methods = PoolModel_methods,
    .tp_getset = PoolModel_getset,
};

static int PoolTensor_getbuffer(PoolTensor *t, Py_buffer *view, int flags) {
    PoolModel *pm = t->owner;
    if (!pool_model_usable(pm)) return -1;
    int read_only = wm_model_mode(pm->model) == WM_MODE_MMAP;
    if ((flags & PyBUF_WRITABLE) && read_only) {
        PyErr_Format(ArgumentError, "%U: a mode mmap model is read-only", pm->path);
        return -1;
    }
    uint64_t n = 0;
    wm_model_tensor_info(pm->model, t->index, NULL, &n);
    void *p = (void *)wm_model_tensor_data(pm->model, t->index);
    if (PyBuffer_FillInfo(view, (PyObject *)t, p, (Py_ssize_t)n, read_only, flags) != 0) return -1;
    pm->views++;
    return 0;
}

static void PoolTensor_releasebuffer(PoolTensor *t, Py_buffer *view) {
    (void)view;
    PoolModel *pm = t->owner;
    if (--pm->views == 0 && pm->put && pool_model_give_back(pm) != 0)
        PyErr_WriteUnraisable((PyObject *)pm);
}

static void PoolTensor_dealloc(PoolTensor *t) {
    Py_XDECREF(t->owner);
    PyObject_Free(t);
}

static PyBufferProcs PoolTensor_as_buffer = {
    .bf_getbuffer = (getbufferproc)PoolTensor_getbuffer,
    .bf_releasebuffer = (releasebufferproc)PoolTensor_releasebuffer,
};

static PyTypeObject PoolTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weightmap._weightmap.PoolTensor",
    .tp_basicsize = sizeof(PoolTensor),
    .tp_dealloc = (destructor)PoolTensor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes of one tensor of a PoolModel, through the buffer protocol.",
    .tp_as_buffer = &PoolTensor_as_buffer,
};

/* ---------------------------------------------------------------------------------------------
 * module
 * ------------------------------------------------------------------------------------------- */

static PyObject *mod_ledger(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    wm_ledger l = WM_LEDGER_INIT;
    wm_ledger_get(&l);
    PyObject *d = PyDict_New();
    for (int c = 0; d && c < WM_LEDGER_COUNT; c++) {
        const wm_ledger_stat *s = &l.cat[c];
        PyObject *v =
            Py_BuildValue("{sKsKsKsK}", "current", (unsigned long long)s->current, "peak",
                          (unsigned long long)s->peak, "total", (unsigned long long)s->total,
                          "regions", (unsigned long long)s->regions);
        if (v == NULL || PyDict_SetItemString(d, wm_ledger_category_name(c), v) != 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    if (d == NULL) return NULL;
    PyObject *b = PyLong_FromUnsignedLongLong(wm_ledger_bytes(&l));
    PyObject *r = PyLong_FromUnsignedLongLong(wm_ledger_regions(&l));
    PyObject *hl = PyLong_FromUnsignedLongLong(l.heap_largest);
    if (!b || !r || !hl || PyDict_SetItemString(d, "bytes", b) ||
        PyDict_SetItemString(d, "regions", r) || PyDict_SetItemString(d, "heap_largest", hl))
        Py_CLEAR(d);
    Py_XDECREF(b);
    Py_XDECREF(r);
    Py_XDECREF(hl);
    return d;
}

static PyObject *mod_ledger_reset_peaks(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    wm_ledger_reset_peaks();
    Py_RETURN_NONE;
}

static PyObject *mod_mem_figures(PyObject *self, PyObject *args) {
    (void)self;
    int pid = 0;
    if (!PyArg_ParseTuple(args, "|i", &pid)) return NULL;
    wm_mem_figures m;
    wm_error err = {0};
    wm_status st = wm_mem_figures_get(pid, &m, &err);
    if (st != WM_OK) return raise_wm(st, &err);
    return Py_BuildValue(
        "{sKsKsKsKsK}", "footprint", (unsigned long long)m.footprint, "resident",
        (unsigned long long)m.resident, "file_resident", (unsigned long long)m.file_resident,
        "locked", (unsigned long long)m.locked, "committed", (unsigned long long)m.committed);
}

/* file_regions(path=None, pid=0) -> [dict]: regions of the process mapping the file (every
 * .gguf/.safetensors file when path is None), from /proc/PID/smaps. */
static PyObject *mod_file_regions(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kwlist[] = {"path", "pid", NULL};
    PyObject *path_obj = NULL;
    int pid = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O&i", kwlist, PyUnicode_FSConverter, &path_obj,
                                     &pid))
        return NULL;
    const char *path = path_obj ? PyBytes_AS_STRING(path_obj) : NULL;
    size_t cap = 64, count = 0;
    wm_file_region *regs = NULL;
    wm_error err = {0};
    wm_status st;
    for (;;) {
        PyMem_RawFree(regs);
        regs = PyMem_RawCalloc(cap, sizeof *regs);
        if (regs == NULL) {
            Py_XDECREF(path_obj);
            return PyErr_NoMemory();
        }
        st = wm_mem_file_regions(pid, path, regs, cap, &count, &err);
        if (st != WM_OK || count <= cap) break;
        cap = count + 16;
    }
    Py_XDECREF(path_obj);
    if (st != WM_OK) {
        PyMem_RawFree(regs);
        return raise_wm(st, &err);
    }
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list && i < count; i++) {
        const wm_file_region *r = &regs[i];
        PyObject *d = Py_BuildValue(
            "{sKsKsKsssKsKsKsKsKsN}", "start", (unsigned long long)r->start, "end",
            (unsigned long long)r->end, "offset", (unsigned long long)r->offset, "perms", r->perms,
            "size", (unsigned long long)r->size, "rss", (unsigned long long)r->rss, "privatised",
            (unsigned long long)r->privatised, "private_dirty",
            (unsigned long long)r->private_dirty, "locked", (unsigned long long)r->locked, "path",
            PyUnicode_DecodeFSDefault(r->path));
        if (d == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    PyMem_RawFree(regs);
    return list;
}

/* bindings(modules, targets) -> [(namespace, name, value)]: every name in the namespaces of
 * `modules` (a list: modules, or any object with a __dict__) that is bound to one of `targets`
 * (a tuple), by identity. weightmap.loading() swaps safetensors' functions wherever a module
 * bound them; with torch and transformers imported that is thousands of modules and some
 * hundreds of thousands of names, which a Python loop walked in about 0.1 s at every block
 * (measured on the H200 host: the block's first 0.11 s of a warm from_pretrained). Here the
 * walk compares pointers under the GIL and calls no Python code while it iterates a namespace,
 * so no namespace changes under PyDict_Next. */
static PyObject *mod_bindings(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *modules, *targets;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &modules, &PyTuple_Type, &targets))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    Py_ssize_t nt = PyTuple_GET_SIZE(targets);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(modules); i++) {
        PyObject *m = PyList_GET_ITEM(modules, i), *d;
        if (PyModule_Check(m)) {
            d = PyModule_GetDict(m); /* borrowed */
            Py_XINCREF(d);
        } else {
            d = PyObject_GetAttrString(m, "__dict__"); /* may run code: outside any walk */
            if (d == NULL) PyErr_Clear();
        }
        if (d == NULL) continue;
        if (!PyDict_Check(d)) {
            Py_DECREF(d);
            continue;
        }
        /* First a walk that allocates nothing (an allocation may run the cyclic collector, whose
         * finalisers could change the namespace under PyDict_Next); only a namespace that binds
         * a target is then copied (PyDict_Items) and its rows made from the copy. */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int hit = 0;
        while (!hit && PyDict_Next(d, &pos, &key, &value))
            for (Py_ssize_t k = 0; k < nt && !hit; k++)
                hit = value == PyTuple_GET_ITEM(targets, k);
        PyObject *items = hit ? PyDict_Items(d) : NULL;
        if (hit && items == NULL) goto fail;
        for (Py_ssize_t j = 0; items != NULL && j < PyList_GET_SIZE(items); j++) {
            PyObject *kv = PyList_GET_ITEM(items, j);
            PyObject *v = PyTuple_GET_ITEM(kv, 1);
            for (Py_ssize_t k = 0; k < nt; k++) {
                if (v != PyTuple_GET_ITEM(targets, k)) continue;
                PyObject *row = PyTuple_Pack(3, d, PyTuple_GET_ITEM(kv, 0), v);
                if (row == NULL || PyList_Append(out, row) < 0) {
                    Py_XDECREF(row);
                    Py_DECREF(items);
                    goto fail;
                }
                Py_DECREF(row);
                break;
            }
        }
        Py_XDECREF(items);
        Py_DECREF(d);
        continue;
    fail:
        Py_DECREF(d);
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *mod_backend_init(PyObject *self, PyObject *args) {
    (void)self;
    int backend, device = 0;
    if (!PyArg_ParseTuple(args, "i|i", &backend, &device)) return NULL;
    wm_error err = {0};
    wm_status st;
    Py_BEGIN_ALLOW_THREADS st = wm_backend_init((wm_backend_kind)backend, device, &err);
    Py_END_ALLOW_THREADS if (st != WM_OK) return raise_wm(st, &err);
    Py_RETURN_NONE;
}

/* backend_from_name(spec) -> (backend, device): the library's one parser of "cpu", "cuda",
 * "cuda:N" (wm_backend_from_name); a device list is refused (one device per handle). ValueError
 * with the library's message for anything else. */
static PyObject *mod_backend_from_name(PyObject *self, PyObject *arg) {
    (void)self;
    const char *spec = PyUnicode_AsUTF8(arg);
    if (spec == NULL) return NULL;
    wm_backend_kind kind;
    int dev[1] = {0};
    unsigned n = 0;
    wm_error err = {0};
    if (wm_backend_from_name(spec, &kind, dev, 1, &n, &err) != WM_OK) {
        PyErr_SetString(ArgumentError, err.msg);
        return NULL;
    }
    return Py_BuildValue("(ii)", (int)kind, dev[0]);
}

/* type_info(name) -> (block_elems, block_bytes), (0, 0) when unknown. */
static PyObject *mod_type_info(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    wm_type t = wm_type_from_name(name);
    return Py_BuildValue("(II)", wm_type_block_elems(t), wm_type_block_bytes(t));
}

/* convert_supported(from, to) -> bool (wm_convert_supported by type names). */
static PyObject *mod_convert_supported(PyObject *self, PyObject *args) {
    (void)self;
    const char *from, *to;
    if (!PyArg_ParseTuple(args, "ss", &from, &to)) return NULL;
    return PyBool_FromLong(wm_convert_supported(wm_type_from_name(from), wm_type_from_name(to)));
}

static PyObject *mod_version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(wm_version());
}

static PyMethodDef module_methods[] = {
    {"ledger", mod_ledger, METH_NOARGS,
     "ledger() -> dict: the library's ledger (wm_ledger_get): for each category (heap, scratch, "
     "map_shared, map_private, locked, pinned, device) {current, peak, total, regions}; and "
     "'bytes' and 'regions', the sums of current and regions (0 when nothing is held), and "
     "'heap_largest'."},
    {"ledger_reset_peaks", mod_ledger_reset_peaks, METH_NOARGS, "wm_ledger_reset_peaks()"},
    {"mem_figures", mod_mem_figures, METH_VARARGS,
     "mem_figures(pid=0) -> dict: footprint, resident, file_resident, locked, committed (bytes)"},
    {"file_regions", (PyCFunction)(void (*)(void))mod_file_regions, METH_VARARGS | METH_KEYWORDS,
     "file_regions(path=None, pid=0) -> list of dict: the mappings of a weight file"},
    {"backend_init", mod_backend_init, METH_VARARGS, "backend_init(backend, device=0)"},
    {"bindings", mod_bindings, METH_VARARGS,
     "bindings(modules, targets) -> [(namespace, name, value)] bound to one of targets"},
    {"backend_from_name", mod_backend_from_name, METH_O,
     "backend_from_name(spec) -> (backend, device)"},
    {"type_info", mod_type_info, METH_O, "type_info(name) -> (block_elems, block_bytes)"},
    {"convert_supported", mod_convert_supported, METH_VARARGS,
     "convert_supported(from, to) -> bool, by type names"},
    {"version", mod_version, METH_NOARGS, "the C library's version"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_weightmap",
    "weightmap's C core: open, load, DLPack views, the ledger. Use the package `weightmap`.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL};

static int add_type(PyObject *m, const char *name, PyObject *obj) {
    if (obj == NULL) return -1;
    Py_INCREF(obj);
    if (PyModule_AddObject(m, name, obj) != 0) {
        Py_DECREF(obj);
        return -1;
    }
    return 0;
}

/* The base of weightmap.Error: safetensors' SafetensorError when safetensors is importable (so
 * that code written for safetensors catches weightmap's errors with `except SafetensorError`),
 * else Exception. A new reference. */
static PyObject *error_base(void) {
    PyObject *st = PyImport_ImportModule("safetensors");
    PyObject *cls = st ? PyObject_GetAttrString(st, "SafetensorError") : NULL;
    Py_XDECREF(st);
    if (cls && PyType_Check(cls) &&
        PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_Exception))
        return cls;
    PyErr_Clear(); /* not installed (or a stand-in without the class): Exception */
    Py_XDECREF(cls);
    return Py_NewRef(PyExc_Exception);
}

/* A subclass of Error and of `also` (a builtin exception), named weightmap.NAME. */
static PyObject *error_class(const char *name, const char *doc, PyObject *also) {
    if (Error == NULL) return NULL;
    PyObject *bases = PyTuple_Pack(2, Error, also);
    PyObject *cls = bases ? PyErr_NewExceptionWithDoc(name, doc, bases, NULL) : NULL;
    Py_XDECREF(bases);
    return cls;
}

PyMODINIT_FUNC PyInit__weightmap(void) {
    if (PyType_Ready(&HandleType) < 0 || PyType_Ready(&ExportType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    PyObject *base = error_base();
    Error = PyErr_NewExceptionWithDoc(
        "weightmap.Error",
        "A failure of the weightmap library, and every error the package raises of its own. str() "
        "is the message (the library's names the file, the offset and the field); .status is the "
        "status name ('WM_EFORMAT'), .code its number, .os_errno the errno behind it (0 when "
        "none). A subclass of safetensors.SafetensorError where safetensors is installed.",
        base, NULL);
    int from_safetensors = base != PyExc_Exception;
    Py_DECREF(base);
    FormatError = error_class("weightmap.FormatError",
                              "A malformed or unsupported file (WM_EFORMAT); also a ValueError.",
                              PyExc_ValueError);
    NotFoundError =
        error_class("weightmap.NotFoundError",
                    "No such file (WM_ENOENT); also a FileNotFoundError.", PyExc_FileNotFoundError);
    TensorNotFoundError = error_class("weightmap.TensorNotFoundError",
                                      "No tensor of that name; also a KeyError.", PyExc_KeyError);
    ClosedError = error_class("weightmap.ClosedError", "The handle was closed; also a ValueError.",
                              PyExc_ValueError);
    ArgumentError = error_class("weightmap.ArgumentError",
                                "A bad argument (a mode, device, dtype, framework, ... that is not "
                                "one); also a ValueError.",
                                PyExc_ValueError);
    SliceError = error_class("weightmap.SliceError",
                             "An index a slice cannot take (out of range, or a form the "
                             "framework's indexer refuses); also an IndexError.",
                             PyExc_IndexError);
    if (PyType_Ready(&PoolType) < 0 || PyType_Ready(&PoolModelType) < 0 ||
        PyType_Ready(&PoolTensorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (add_type(m, "Handle", (PyObject *)&HandleType) ||
        add_type(m, "Pool", (PyObject *)&PoolType) ||
        add_type(m, "Export", (PyObject *)&ExportType) || add_type(m, "Error", Error) ||
        add_type(m, "FormatError", FormatError) || add_type(m, "NotFoundError", NotFoundError) ||
        add_type(m, "TensorNotFoundError", TensorNotFoundError) ||
        add_type(m, "ClosedError", ClosedError) || add_type(m, "ArgumentError", ArgumentError) ||
        add_type(m, "SliceError", SliceError) ||
        PyModule_AddIntConstant(m, "ERROR_IS_SAFETENSORS", from_safetensors) ||
        PyModule_AddIntConstant(m, "BACKEND_CPU", WM_BACKEND_CPU) ||
        PyModule_AddIntConstant(m, "BACKEND_CUDA", WM_BACKEND_CUDA) ||
        PyModule_AddIntConstant(m, "LOCK_REQUIRED", WM_LOCK_REQUIRED) ||
        PyModule_AddIntConstant(m, "LOCK_BEST_EFFORT", WM_LOCK_BEST_EFFORT) ||
        PyModule_AddIntConstant(m, "DL_INT", kDLInt) ||
        PyModule_AddIntConstant(m, "DL_UINT", kDLUInt) ||
        PyModule_AddIntConstant(m, "DL_FLOAT", kDLFloat) ||
        PyModule_AddIntConstant(m, "DL_BFLOAT", kDLBfloat) ||
        PyModule_AddIntConstant(m, "DL_COMPLEX", kDLComplex) ||
        PyModule_AddIntConstant(m, "DLPACK_VERSION", DLPACK_VERSION)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}

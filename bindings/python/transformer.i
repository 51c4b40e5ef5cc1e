/*
 * SWIG interface of the Python bindings: the low-level module.
 *
 * SWIG generates it from the public headers.  The generated Python file is
 * installed as transformer/_lowlevel.py next to _transformer.so; the
 * idiomatic layer (transformer/__init__.py) is the API people use, this
 * module is what it stands on.  What crosses the boundary:
 *
 *   tfm_tensor *               a C-contiguous, aligned, native float32
 *                              numpy.ndarray of rank 1..4 (or None for
 *                              NULL), wrapped with tfm_tensor_wrap for the
 *                              duration of the call: no copy.  Output
 *                              tensors must be writable; the C function
 *                              writes into the caller's array.
 *   const tfm_attention_masks *  None, or a 5-tuple
 *                              (causal, key_padding_mask, key_padding_kind,
 *                               attn_mask, attn_mask_kind)
 *                              whose masks are arrays as above or None.
 *   int32_t ids + sizes        numpy.i typemaps (IN_ARRAY1/IN_ARRAY2).
 *   value structs              tfm_layer_config, tfm_model_config,
 *                              tfm_sampling, tfm_attention_config and
 *                              tfm_model_options are SWIG proxy objects
 *                              with the C field names; the last two start
 *                              at their defaults (the *_init functions).
 *   X **out                    handles (modules, KV caches, tokenizers,
 *                              safetensors files and writers) come back as
 *                              plain, non-owning pointer objects; the Python
 *                              layer owns them and frees each exactly once.
 *   tfm_status                 TFM_OK returns normally; any other code raises
 *                              the exception class registered for it with
 *                              tfmpy_register_error (the TransformerError
 *                              hierarchy of the Python layer), carrying
 *                              tfm_last_error().
 *
 * The GIL is held during every call: forward passes are short, and holding
 * it means no other Python thread can free a handle while C uses it.
 */
%module(docstring="Low-level SWIG wrapper of libtransformer; use the "
                  "'transformer' package instead.") transformer

%{
#define SWIG_FILE_WITH_INIT
/* The wrappers still expose the deprecated _ex twins (docs/ABI.md). */
#define TFM_NO_DEPRECATED_WARNINGS
#include <string.h>
#include <stdlib.h>
#include <transformer/transformer.h>
%}

%include <stdint.i>
%include <typemaps.i>
%include "numpy.i"   /* Debian's python3-numpy, found by CMake */

%init %{
    import_array();
%}

%feature("autodoc", "2");

/* The numpy.i helpers (typecode_string ...) used by the code below. */
%fragment("NumPy_Fragments");

/* The numpy.i typemaps for the C sizes used by the headers. */
%numpy_typemaps(float, NPY_FLOAT, int64_t)
%numpy_typemaps(int32_t, NPY_INT32, int64_t)

/* ---- Errors ------------------------------------------------------------ */

%{
/* Exception class per status code, registered by the Python layer. */
static PyObject *tfmpy_error_classes[TFM_STATUS_COUNT];

/* Raises the exception registered for status with the given message
 * (UTF-8; invalid bytes replaced). */
static void tfmpy_raise(tfm_status status, const char *message)
{
    PyObject *cls = NULL, *text, *exc;
    if ((int)status > 0 && (int)status < TFM_STATUS_COUNT)
        cls = tfmpy_error_classes[status];
    if (!cls)
        cls = PyExc_RuntimeError;
    text = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message),
                                "replace");
    if (!text)
        return;
    exc = PyObject_CallOneArg(cls, text);
    Py_DECREF(text);
    if (!exc)
        return;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}

/* Raises for status with the library's message for the failing call. */
static void tfmpy_raise_last(tfm_status status)
{
    const char *message = tfm_last_error();
    if (!message || !*message)
        message = tfm_status_string(status);
    tfmpy_raise(status, message);
}

/* Wraps a numpy array as a tensor without copying (see the top of the
 * file).  None gives NULL.  Returns 0, or -1 with a Python error set. */
static int tfmpy_wrap_array(PyObject *obj, int writable, const char *what,
                            tfm_tensor **out)
{
    PyArrayObject *array;
    int64_t shape[TFM_MAX_RANK];
    int rank, i;
    tfm_status st;
    char message[160];

    *out = NULL;
    if (obj == Py_None)
        return 0;
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a numpy.ndarray of float32, not %s",
                     what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    array = (PyArrayObject *)obj;
    if (PyArray_TYPE(array) != NPY_FLOAT32 || !PyArray_ISNOTSWAPPED(array)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a native float32 array, not %s", what,
                     typecode_string(PyArray_TYPE(array)));
        return -1;
    }
    if (!PyArray_IS_C_CONTIGUOUS(array) || !PyArray_ISALIGNED(array)) {
        PyErr_Format(PyExc_ValueError,
                     "%s must be a C-contiguous, aligned array", what);
        return -1;
    }
    if (writable && !PyArray_ISWRITEABLE(array)) {
        PyErr_Format(PyExc_ValueError, "%s must be a writable array", what);
        return -1;
    }
    rank = PyArray_NDIM(array);
    if (rank < 1 || rank > TFM_MAX_RANK) {
        snprintf(message, sizeof message,
                 "%s has rank %d; tensors have rank 1 to %d", what, rank,
                 TFM_MAX_RANK);
        tfmpy_raise(TFM_ERR_SHAPE, message);
        return -1;
    }
    for (i = 0; i < rank; i++)
        shape[i] = (int64_t)PyArray_DIM(array, i);
    st = tfm_tensor_wrap(rank, shape, (float *)PyArray_DATA(array), out);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return -1;
    }
    return 0;
}

/* Reads a masks 5-tuple (see the top of the file) into *masks; the two
 * wrapped tensors go to *kpm and *attn (freed by the caller). */
static int tfmpy_parse_masks(PyObject *obj, tfm_attention_masks *masks,
                             tfm_tensor **kpm, tfm_tensor **attn)
{
    int causal, kpm_kind, attn_kind;
    PyObject *kpm_obj, *attn_obj;

    memset(masks, 0, sizeof *masks);
    if (!PyTuple_Check(obj) ||
        !PyArg_ParseTuple(obj, "iOiOi", &causal, &kpm_obj, &kpm_kind,
                          &attn_obj, &attn_kind)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "masks must be None or a tuple (causal, "
                            "key_padding_mask, kind, attn_mask, kind)");
        return -1;
    }
    if (tfmpy_wrap_array(kpm_obj, 0, "key_padding_mask", kpm) != 0 ||
        tfmpy_wrap_array(attn_obj, 0, "attn_mask", attn) != 0)
        return -1;
    masks->causal = (tfm_causal)causal;
    masks->key_padding_mask = *kpm;
    masks->key_padding_kind = (tfm_mask_kind)kpm_kind;
    masks->attn_mask = *attn;
    masks->attn_mask_kind = (tfm_mask_kind)attn_kind;
    return 0;
}

/* A new float32 numpy array holding a copy of tensor's data. */
static PyObject *tfmpy_array_from_tensor(const tfm_tensor *tensor)
{
    npy_intp dims[TFM_MAX_RANK];
    int rank = tfm_tensor_rank(tensor), i;
    PyObject *array;
    for (i = 0; i < rank; i++)
        dims[i] = (npy_intp)tfm_tensor_dim(tensor, i);
    array = PyArray_SimpleNew(rank, dims, NPY_FLOAT32);
    if (array)
        memcpy(PyArray_DATA((PyArrayObject *)array),
               tfm_tensor_data_const(tensor),
               (size_t)tfm_tensor_numel(tensor) * sizeof(float));
    return array;
}
%}

%typemap(out) tfm_status {
    if ($1 != TFM_OK) {
        tfmpy_raise_last($1);
        SWIG_fail;
    }
    $result = SWIG_Py_Void();
}

/* ---- Tensors are numpy arrays ------------------------------------------ */

%typemap(in) const tfm_tensor * (tfm_tensor *wrapped = NULL) {
    if (tfmpy_wrap_array($input, 0, "$1_name", &wrapped) != 0)
        SWIG_fail;
    $1 = wrapped;
}
%typemap(in) tfm_tensor * (tfm_tensor *wrapped = NULL) {
    if (tfmpy_wrap_array($input, 1, "$1_name", &wrapped) != 0)
        SWIG_fail;
    $1 = wrapped;
}
%typemap(freearg) const tfm_tensor *, tfm_tensor * {
    tfm_tensor_free(wrapped$argnum);
}

/* A tensor the library creates comes back as a new numpy array. */
%typemap(in, numinputs=0) tfm_tensor **out (tfm_tensor *created = NULL) {
    $1 = &created;
}
%typemap(argout) tfm_tensor **out {
    PyObject *array = tfmpy_array_from_tensor(created$argnum);
    if (!array)
        SWIG_fail;
    $result = SWIG_Python_AppendOutput($result, array);
}
%typemap(freearg) tfm_tensor **out {
    tfm_tensor_free(created$argnum);
}

%typemap(in) const tfm_attention_masks *
    (tfm_attention_masks masks, tfm_tensor *kpm = NULL, tfm_tensor *attn = NULL) {
    if ($input == Py_None) {
        $1 = NULL;
    } else {
        if (tfmpy_parse_masks($input, &masks, &kpm, &attn) != 0)
            SWIG_fail;
        $1 = &masks;
    }
}
%typemap(freearg) const tfm_attention_masks * {
    tfm_tensor_free(kpm$argnum);
    tfm_tensor_free(attn$argnum);
}

/* ---- Handles: X **out returns a non-owning pointer object --------------- */

%define TFMPY_HANDLE_OUT(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *handle = NULL) {
    $1 = &handle;
}
%typemap(argout) TYPE **out {
    $result = SWIG_Python_AppendOutput($result,
        SWIG_NewPointerObj(SWIG_as_voidptr(handle$argnum), $*1_descriptor, 0));
}
%enddef
TFMPY_HANDLE_OUT(tfm_module)
TFMPY_HANDLE_OUT(tfm_kv_cache)
TFMPY_HANDLE_OUT(tfm_generator)
TFMPY_HANDLE_OUT(tfm_tokenizer)
TFMPY_HANDLE_OUT(tfm_safetensors)
TFMPY_HANDLE_OUT(tfm_safetensors_writer)
TFMPY_HANDLE_OUT(tfm_optimizer)
/* tfm_module_child: a borrowed handle (the Python side keeps its parent
 * alive and never frees it). */
%apply tfm_module **out { tfm_module **child };

/* ---- Output scalars and shapes ------------------------------------------ */

%apply int64_t *OUTPUT { int64_t *macs };
%apply uint64_t *OUTPUT { uint64_t *seed, uint64_t *offset };
%apply int32_t *OUTPUT { int32_t *id };
%apply int *OUTPUT { int *produced };
%apply int *OUTPUT { tfm_dtype *dtype };
%apply int *OUTPUT { int *value };   /* tfm_enum_from_name */

/* (int *rank, int64_t *shape) -> a tuple of ints, the shape. */
%typemap(in, numinputs=0) (int *rank, int64_t *shape)
    (int rank_value = 0, int64_t shape_values[TFM_SAFETENSORS_MAX_RANK]) {
    $1 = &rank_value;
    $2 = shape_values;
}
%typemap(argout) (int *rank, int64_t *shape) {
    PyObject *shape_tuple = PyTuple_New(rank_value$argnum);
    int i;
    if (!shape_tuple)
        SWIG_fail;
    for (i = 0; i < rank_value$argnum; i++)
        PyTuple_SET_ITEM(shape_tuple, i,
                         PyLong_FromLongLong((long long)shape_values$argnum[i]));
    $result = SWIG_Python_AppendOutput($result, shape_tuple);
}

/* ---- Token ids: numpy.i typemaps ----------------------------------------- */

%apply (int32_t *IN_ARRAY2, int64_t DIM1, int64_t DIM2) {
    (const int32_t *ids, int64_t batch, int64_t seq)
};
%apply (int32_t *IN_ARRAY1, int64_t DIM1) {
    (const int32_t *ids, int64_t n),
    (const int32_t *prompt, int64_t n_prompt),
    (const int32_t *ids, int64_t n_ids)
};
%apply (int32_t *INPLACE_ARRAY1, int64_t DIM1) {
    (int32_t *out_ids, int64_t max_new)
};
%apply (float *IN_ARRAY1, int64_t DIM1) {
    (const float *logits, int64_t vocab_size)
};
%apply (int32_t *IN_ARRAY2, int64_t DIM1, int64_t DIM2) {
    (const int32_t *src_ids, int64_t src_batch, int64_t src_len),
    (const int32_t *tgt_ids, int64_t tgt_batch, int64_t tgt_len),
    (const int32_t *types, int64_t types_batch, int64_t types_len),
    (const int32_t *mask, int64_t mask_batch, int64_t mask_len)
};

/* ---- What Python does not need from the headers -------------------------- */

/* numpy arrays are the tensors: handles to them never reach Python. */
%ignore tfm_tensor_create;
%ignore tfm_tensor_create_copy;
%ignore tfm_tensor_wrap;
%ignore tfm_tensor_free;
%ignore tfm_tensor_rank;
%ignore tfm_tensor_dim;
%ignore tfm_tensor_numel;
%ignore tfm_tensor_data;
%ignore tfm_tensor_data_const;
%ignore tfm_module_grad;           /* float ** zero copy: the bindings copy (get_grad) */
%ignore tfm_module_parameter_data;
/* Masks are passed as tuples (typemap above). */
%ignore tfm_attention_masks;
/* Borrowed memory: no safe lifetime in Python. */
%ignore tfm_safetensors_open_memory;
/* Replaced by the helpers below, whose arguments fit the typemaps. */
%ignore tfm_model_save;
%ignore tfm_model_generate;
/* Generation with options: tfmpy_generator_create fills the array members;
 * the callback form is C's (Python iterates tfm_generator_next). */
%ignore tfm_model_generate_v2;
/* Replaced by tfmpy_model_generate_batch (prompts end to end). */
%ignore tfm_model_generate_batch;
%ignore tfm_generator_create;
%ignore tfm_generate_options::eos_token_ids;
%ignore tfm_beam_search_options::suppress_tokens;
%ignore tfm_generate_options::stop_strings;
%ignore tfm_generate_options::tokenizer;
%ignore tfm_generate_options::callback;
%ignore tfm_generate_options::callback_data;
%ignore tfm_model_seq2seq_logits;
%ignore tfm_model_logits_v2;
%ignore tfm_model_inputs;
%ignore tfm_model_inputs_init;
%ignore tfm_model_seq2seq_backward;
/* Replaced by tfmpy_model_beam_search, which makes the output arrays. */
%ignore tfm_model_beam_search;
%ignore tfm_tokenizer_encode;
%ignore tfm_tokenizer_decode;
%ignore tfm_tokenizer_encode_v2;
%ignore tfm_tokenizer_decode_v2;
%ignore tfm_tokenizer_id_to_token;

/* The variant structs (variants.h, model.h) begin with their size:
 * constructing one from Python fills every default through the library's
 * *_init function, so Python code only sets the fields it means. */
%extend tfm_attention_config {
    tfm_attention_config() {
        tfm_attention_config *c = calloc(1, sizeof *c);
        if (c)
            tfm_attention_config_init(c);
        return c;
    }
    ~tfm_attention_config() { free($self); }
}
%extend tfm_beam_search_options {
    tfm_beam_search_options() {
        tfm_beam_search_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_beam_search_options_init(o);
        return o;
    }
    ~tfm_beam_search_options() { free($self); }
}
%extend tfm_generate_options {
    tfm_generate_options() {
        tfm_generate_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_generate_options_init(o);
        return o;
    }
    ~tfm_generate_options() { free($self); }
}
%extend tfm_mha_options {
    tfm_mha_options() {
        tfm_mha_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_mha_options_init(o);
        return o;
    }
    ~tfm_mha_options() { free($self); }
}
%extend tfm_layer_options {
    tfm_layer_options() {
        tfm_layer_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_layer_options_init(o);
        return o;
    }
    ~tfm_layer_options() { free($self); }
}
%extend tfm_model_options {
    tfm_model_options() {
        tfm_model_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_model_options_init(o);
        return o;
    }
    ~tfm_model_options() { free($self); }
}

/* ---- The public headers ---------------------------------------------------- */

%include "transformer_strings.i"   /* const char *, paths */

%include "transformer/version.h"
%include "transformer/status.h"
%include "transformer/tensor.h"
%include "transformer/module.h"
%include "transformer/attention.h"
%include "transformer/layers.h"
%include "transformer/embedding.h"
%include "transformer/safetensors.h"
%include "transformer/model.h"
%include "transformer/tokenizer.h"
%include "transformer/names.h"
%include "transformer_weights.i"   /* weights.h */

/* ---- Helpers shaped for the typemaps --------------------------------------- */

%inline %{
/* Registers the exception class raised for status (a TransformerError
 * subclass).  Called once per code by the Python layer at import. */
void tfmpy_register_error(int status, PyObject *cls)
{
    if (status <= 0 || status >= TFM_STATUS_COUNT)
        return;
    Py_XINCREF(cls);
    Py_XDECREF(tfmpy_error_classes[status]);
    tfmpy_error_classes[status] = cls;
}

/* tfm_model_generate with the output array's size as max_new. */
tfm_status tfmpy_model_generate(const tfm_module *model,
                                const int32_t *prompt, int64_t n_prompt,
                                const tfm_sampling *sampling, uint64_t seed,
                                int32_t *out_ids, int64_t max_new)
{
    return tfm_model_generate(model, prompt, n_prompt, max_new, sampling,
                              seed, out_ids);
}

/* The stop strings of a Python list of str as borrowed UTF-8 (each
 * lives with its str): *out (free() it; NULL when empty) and *n.  Returns
 * 0, or -1 with a Python exception set. */
static int tfmpy_stop_strings(PyObject *stop_strings, const char ***out,
                              Py_ssize_t *n)
{
    Py_ssize_t i;
    const char **stops = NULL;
    *out = NULL;
    *n = 0;
    if (!PyList_Check(stop_strings)) {
        PyErr_SetString(PyExc_TypeError, "stop_strings must be a list");
        return -1;
    }
    if (PyList_GET_SIZE(stop_strings) > 0) {
        stops = calloc((size_t)PyList_GET_SIZE(stop_strings), sizeof *stops);
        if (!stops) {
            PyErr_NoMemory();
            return -1;
        }
    }
    for (i = 0; i < PyList_GET_SIZE(stop_strings); i++) {
        PyObject *item = PyList_GET_ITEM(stop_strings, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "stop_strings[%zd] must be a str, "
                         "not %s", i, Py_TYPE(item)->tp_name);
            free(stops);
            return -1;
        }
        stops[i] = tfmpy_c_string(item, "a stop string", -1); /* item's */
        if (!stops[i]) {
            free(stops);
            return -1;
        }
    }
    *out = stops;
    *n = PyList_GET_SIZE(stop_strings);
    return 0;
}

/* tfm_generator_create with the options' arrays from Python: eos ids (an
 * int32 array, may be empty), stop strings (a list of str, may be empty)
 * and the tokenizer that decodes for them (None when there are none).
 * Returns the generator pointer (owned by the caller). */
PyObject *tfmpy_generator_create(const tfm_module *model,
                                 const int32_t *prompt, int64_t n_prompt,
                                 tfm_generate_options *options,
                                 const int32_t *ids, int64_t n_ids,
                                 PyObject *stop_strings,
                                 const tfm_tokenizer *tokenizer)
{
    tfm_generate_options o = *options;
    tfm_generator *g = NULL;
    Py_ssize_t n_stop = 0;
    const char **stops = NULL;
    tfm_status st;
    if (tfmpy_stop_strings(stop_strings, &stops, &n_stop) != 0)
        return NULL;
    o.eos_token_ids = ids;
    o.n_eos_token_ids = n_ids;
    o.stop_strings = stops;
    o.n_stop_strings = n_stop;
    o.tokenizer = tokenizer;
    st = tfm_generator_create(model, prompt, n_prompt, &o, &g);
    free(stops);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return NULL;
    }
    return SWIG_NewPointerObj(SWIG_as_voidptr(g), SWIGTYPE_p_tfm_generator, 0);
}

/* tfm_model_generate_batch of the prompts laid end to end in prompt
 * [n_prompt] with their lengths (a list of int, summing to n_prompt), the
 * options' arrays as tfmpy_generator_create takes them.  Returns (ids
 * int32 [B, max_new_tokens], n_out int64 [B]). */
PyObject *tfmpy_model_generate_batch(const tfm_module *model,
                                     const int32_t *prompt, int64_t n_prompt,
                                     PyObject *lengths,
                                     tfm_generate_options *options,
                                     const int32_t *ids, int64_t n_ids,
                                     PyObject *stop_strings,
                                     const tfm_tokenizer *tokenizer)
{
    tfm_generate_options o = *options;
    Py_ssize_t n_stop = 0, b, batch;
    const char **stops = NULL;
    const int32_t **prompts = NULL;
    int64_t *n_prompts = NULL, at = 0;
    npy_intp dims[2];
    PyObject *out = NULL, *n_out = NULL;
    tfm_status st;
    if (!PyList_Check(lengths)) {
        PyErr_SetString(PyExc_TypeError, "lengths must be a list");
        return NULL;
    }
    batch = PyList_GET_SIZE(lengths);
    if (o.max_new_tokens < 0 || o.max_new_tokens > TFM_MAX_NEW_TOKENS) {
        tfmpy_raise(TFM_ERR_INVALID_ARGUMENT,
                    "max_new_tokens must be in 0 .. TFM_MAX_NEW_TOKENS");
        return NULL;
    }
    prompts = calloc((size_t)(batch > 0 ? batch : 1), sizeof *prompts);
    n_prompts = calloc((size_t)(batch > 0 ? batch : 1), sizeof *n_prompts);
    if (!prompts || !n_prompts) {
        PyErr_NoMemory();
        goto done;
    }
    for (b = 0; b < batch; b++) {
        long long n = PyLong_AsLongLong(PyList_GET_ITEM(lengths, b));
        if (n == -1 && PyErr_Occurred())
            goto done;
        if (n < 0 || n > n_prompt - at) {
            PyErr_SetString(PyExc_ValueError,
                            "lengths do not fit the prompt ids");
            goto done;
        }
        prompts[b] = prompt + at;
        n_prompts[b] = n;
        at += n;
    }
    if (tfmpy_stop_strings(stop_strings, &stops, &n_stop) != 0)
        goto done;
    o.eos_token_ids = ids;
    o.n_eos_token_ids = n_ids;
    o.stop_strings = stops;
    o.n_stop_strings = n_stop;
    o.tokenizer = tokenizer;
    dims[0] = batch;
    dims[1] = (npy_intp)o.max_new_tokens;
    out = PyArray_SimpleNew(2, dims, NPY_INT32);
    n_out = out ? PyArray_SimpleNew(1, dims, NPY_INT64) : NULL;
    if (!n_out)
        goto done;
    st = tfm_model_generate_batch(
        model, prompts, n_prompts, batch, &o,
        (int32_t *)PyArray_DATA((PyArrayObject *)out),
        (int64_t *)PyArray_DATA((PyArrayObject *)n_out), NULL);
    if (st != TFM_OK)
        tfmpy_raise_last(st);
done:
    free(stops);
    free(prompts);
    free(n_prompts);
    if (PyErr_Occurred()) {
        Py_XDECREF(out);
        Py_XDECREF(n_out);
        return NULL;
    }
    return Py_BuildValue("(NN)", out, n_out);
}

/* tfm_model_beam_search into new arrays: returns (ids int32 [R, M],
 * lengths int64 [R], scores float32 [R]) for R = num_return_sequences and
 * M = max_new_tokens of the (checked) options; the suppressed ids (an
 * int32 array, may be empty) replace options' suppress_tokens. */
PyObject *tfmpy_model_beam_search(const tfm_module *model,
                                  const int32_t *prompt, int64_t n_prompt,
                                  const tfm_beam_search_options *options,
                                  const int32_t *ids, int64_t n_ids)
{
    npy_intp dims[2];
    PyObject *lengths, *scores;
    tfm_status st;
    tfm_beam_search_options with;
    if (options) {
        with = *options;
        with.suppress_tokens = ids;
        with.n_suppress_tokens = n_ids;
        options = &with;
    }
    PyObject *ids_out;
    if (!options || options->num_return_sequences < 1 ||
        options->max_new_tokens < 1 ||
        options->max_new_tokens > TFM_MAX_NEW_TOKENS ||
        options->num_return_sequences > options->num_beams) {
        /* Let the library say what is wrong, before any allocation. */
        st = tfm_model_beam_search(model, prompt, n_prompt, options, NULL,
                                   NULL, NULL);
        tfmpy_raise_last(st != TFM_OK ? st : TFM_ERR_INVALID_ARGUMENT);
        return NULL;
    }
    dims[0] = (npy_intp)options->num_return_sequences;
    dims[1] = (npy_intp)options->max_new_tokens;
    ids_out = PyArray_SimpleNew(2, dims, NPY_INT32);
    lengths = PyArray_SimpleNew(1, dims, NPY_INT64);
    scores = PyArray_SimpleNew(1, dims, NPY_FLOAT32);
    if (!ids_out || !lengths || !scores) {
        Py_XDECREF(ids_out);
        Py_XDECREF(lengths);
        Py_XDECREF(scores);
        return NULL;
    }
    st = tfm_model_beam_search(
        model, prompt, n_prompt, options,
        (int32_t *)PyArray_DATA((PyArrayObject *)ids_out),
        (int64_t *)PyArray_DATA((PyArrayObject *)lengths),
        (float *)PyArray_DATA((PyArrayObject *)scores));
    if (st != TFM_OK) {
        Py_DECREF(ids_out);
        Py_DECREF(lengths);
        Py_DECREF(scores);
        tfmpy_raise_last(st);
        return NULL;
    }
    return Py_BuildValue("(NNN)", ids_out, lengths, scores);
}

/* tfm_model_logits_v2 with ids, token_type_ids and attention_mask as
 * [B, L] arrays (an empty [0, 0] array: not given). */
PyObject *tfmpy_model_logits_v2(const tfm_module *model, const int32_t *ids,
                                int64_t batch, int64_t seq,
                                const int32_t *types, int64_t types_batch,
                                int64_t types_len, const int32_t *mask,
                                int64_t mask_batch, int64_t mask_len,
                                tfm_tensor *logits)
{
    tfm_model_inputs in;
    tfm_status st;
    tfm_model_inputs_init(&in);
    if ((types_batch * types_len &&
         (types_batch != batch || types_len != seq)) ||
        (mask_batch * mask_len && (mask_batch != batch || mask_len != seq))) {
        tfmpy_raise(TFM_ERR_SHAPE, "token_type_ids and attention_mask must "
                                   "have the shape of the ids [N, L]");
        return NULL;
    }
    in.token_type_ids = types_batch * types_len ? types : NULL;
    in.attention_mask = mask_batch * mask_len ? mask : NULL;
    st = tfm_model_logits_v2(model, ids, batch, seq, &in, logits);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return NULL;
    }
    return SWIG_Py_Void();
}

/* tfm_model_seq2seq_logits with src [B, S] and tgt [B, L] as arrays. */
PyObject *tfmpy_model_seq2seq_logits(const tfm_module *model,
                                     const int32_t *src_ids,
                                     int64_t src_batch, int64_t src_len,
                                     const int32_t *tgt_ids,
                                     int64_t tgt_batch, int64_t tgt_len,
                                     tfm_tensor *logits)
{
    tfm_status st;
    char message[160];
    if (src_batch != tgt_batch) {
        snprintf(message, sizeof message,
                 "source ids have %lld sequences, target ids %lld",
                 (long long)src_batch, (long long)tgt_batch);
        tfmpy_raise(TFM_ERR_SHAPE, message);
        return NULL;
    }
    st = tfm_model_seq2seq_logits(model, src_ids, src_len, tgt_ids, tgt_len,
                                  src_batch, logits);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return NULL;
    }
    return SWIG_Py_Void();
}

/* tfm_model_seq2seq_backward with src [B, S] and tgt [B, L] as arrays. */
PyObject *tfmpy_model_seq2seq_backward(tfm_module *model,
                                       const int32_t *src_ids,
                                       int64_t src_batch, int64_t src_len,
                                       const int32_t *tgt_ids,
                                       int64_t tgt_batch, int64_t tgt_len,
                                       const tfm_tensor *grad_logits)
{
    tfm_status st;
    char message[160];
    if (src_batch != tgt_batch) {
        snprintf(message, sizeof message,
                 "source ids have %lld sequences, target ids %lld",
                 (long long)src_batch, (long long)tgt_batch);
        tfmpy_raise(TFM_ERR_SHAPE, message);
        return NULL;
    }
    st = tfm_model_seq2seq_backward(model, src_ids, src_len, tgt_ids,
                                    tgt_len, src_batch, grad_logits);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return NULL;
    }
    return SWIG_Py_Void();
}
%}

%{
/* Reads a str or bytes object as UTF-8 bytes (borrowed into *bytes_obj,
 * which the caller releases). */
static int tfmpy_utf8(PyObject *obj, PyObject **bytes_obj, const char **data,
                      Py_ssize_t *size)
{
    if (PyUnicode_Check(obj)) {
        *bytes_obj = PyUnicode_AsUTF8String(obj);
        if (!*bytes_obj)
            return -1;
    } else if (PyBytes_Check(obj)) {
        Py_INCREF(obj);
        *bytes_obj = obj;
    } else {
        PyErr_Format(PyExc_TypeError, "expected str or bytes, not %s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *data = PyBytes_AS_STRING(*bytes_obj);
    *size = PyBytes_GET_SIZE(*bytes_obj);
    return 0;
}
%}

%inline %{
/* tfm_tokenizer_encode_v2 -> (ids, type_ids, offsets) numpy arrays (int32,
 * int32, int64 [n, 2]); pair None for one text. */
PyObject *tfmpy_tokenizer_encode_v2(const tfm_tokenizer *tokenizer,
                                    PyObject *text, PyObject *pair,
                                    unsigned flags)
{
    PyObject *a_obj = NULL, *b_obj = NULL, *ids = NULL, *types = NULL,
             *offs = NULL, *result = NULL;
    const char *a, *b = NULL;
    Py_ssize_t a_len, b_len = 0;
    int64_t n = 0;
    tfm_status st;

    if (tfmpy_utf8(text, &a_obj, &a, &a_len) != 0)
        return NULL;
    if (pair != Py_None && tfmpy_utf8(pair, &b_obj, &b, &b_len) != 0)
        goto done;
    st = tfm_tokenizer_encode_v2(tokenizer, a, (size_t)a_len, b,
                                 (size_t)b_len, flags, NULL, NULL, NULL, 0,
                                 &n);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY) {
        tfmpy_raise_last(st);
        goto done;
    }
    {
        npy_intp dims[2] = { (npy_intp)n, 2 };
        ids = PyArray_SimpleNew(1, dims, NPY_INT32);
        types = PyArray_SimpleNew(1, dims, NPY_INT32);
        offs = PyArray_SimpleNew(2, dims, NPY_INT64);
    }
    if (!ids || !types || !offs)
        goto done;
    st = tfm_tokenizer_encode_v2(
        tokenizer, a, (size_t)a_len, b, (size_t)b_len, flags,
        (int32_t *)PyArray_DATA((PyArrayObject *)ids),
        (int32_t *)PyArray_DATA((PyArrayObject *)types),
        (int64_t *)PyArray_DATA((PyArrayObject *)offs), n, &n);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        goto done;
    }
    result = PyTuple_Pack(3, ids, types, offs);
done:
    Py_XDECREF(a_obj);
    Py_XDECREF(b_obj);
    Py_XDECREF(ids);
    Py_XDECREF(types);
    Py_XDECREF(offs);
    return result;
}

/* tfm_tokenizer_decode_v2 -> bytes (byte-level BPE may cut a character). */
PyObject *tfmpy_tokenizer_decode_v2(const tfm_tokenizer *tokenizer,
                                    const int32_t *ids, int64_t n_ids,
                                    unsigned flags)
{
    size_t need = 0;
    tfm_status st = tfm_tokenizer_decode_v2(tokenizer, ids, n_ids, flags,
                                            NULL, 0, &need);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY) {
        tfmpy_raise_last(st);
        return NULL;
    }
    char *text = malloc(need + 1);
    if (!text)
        return PyErr_NoMemory();
    st = tfm_tokenizer_decode_v2(tokenizer, ids, n_ids, flags, text,
                                 need + 1, &need);
    PyObject *result = NULL;
    if (st != TFM_OK)
        tfmpy_raise_last(st);
    else
        result = PyBytes_FromStringAndSize(text, (Py_ssize_t)need);
    free(text);
    return result;
}

/* tfm_tokenizer_id_to_token -> str (the vocabulary's string, UTF-8). */
PyObject *tfmpy_tokenizer_id_to_token(const tfm_tokenizer *tokenizer,
                                      int32_t id)
{
    size_t need = 0;
    tfm_status st = tfm_tokenizer_id_to_token(tokenizer, id, NULL, 0, &need);
    if (st != TFM_OK && st != TFM_ERR_CAPACITY) {
        tfmpy_raise_last(st);
        return NULL;
    }
    char *text = malloc(need + 1);
    if (!text)
        return PyErr_NoMemory();
    st = tfm_tokenizer_id_to_token(tokenizer, id, text, need + 1, &need);
    PyObject *result = NULL;
    if (st != TFM_OK)
        tfmpy_raise_last(st);
    else
        result = PyUnicode_DecodeUTF8(text, (Py_ssize_t)need, "replace");
    free(text);
    return result;
}
%}

%inline %{
/* Encodes text (str, as UTF-8, or UTF-8 bytes) -> int32 numpy array of ids.
 * A character-level token is at least one byte, so len(bytes) ids fit;
 * other kinds may need more, and get the size the call asks for. */
PyObject *tfmpy_tokenizer_encode(const tfm_tokenizer *tokenizer, PyObject *text)
{
    PyObject *bytes_obj = NULL, *array;
    const char *data;
    Py_ssize_t size;
    npy_intp n;
    int64_t n_ids = 0;
    tfm_status st;

    if (tfmpy_utf8(text, &bytes_obj, &data, &size) != 0)
        return NULL;
    n = (npy_intp)size;
    array = PyArray_SimpleNew(1, &n, NPY_INT32);
    if (!array) {
        Py_DECREF(bytes_obj);
        return NULL;
    }
    st = tfm_tokenizer_encode(tokenizer, data, (size_t)size,
                              (int32_t *)PyArray_DATA((PyArrayObject *)array),
                              (int64_t)size, &n_ids);
    if (st == TFM_ERR_CAPACITY && n_ids > (int64_t)size) {
        /* More tokens than bytes (SentencePiece's dummy prefix, or a byte
         * that becomes three byte tokens): the size asked for. */
        Py_DECREF(array);
        n = (npy_intp)n_ids;
        array = PyArray_SimpleNew(1, &n, NPY_INT32);
        if (!array) {
            Py_DECREF(bytes_obj);
            return NULL;
        }
        tfm_clear_error();
        st = tfm_tokenizer_encode(tokenizer, data, (size_t)size,
                                  (int32_t *)PyArray_DATA((PyArrayObject *)array),
                                  n_ids, &n_ids);
    }
    Py_DECREF(bytes_obj);
    if (st != TFM_OK) {
        Py_DECREF(array);
        tfmpy_raise_last(st);
        return NULL;
    }
    if (n_ids < (int64_t)size) {
        PyObject *head = PySequence_GetSlice(array, 0, (Py_ssize_t)n_ids);
        Py_DECREF(array);
        return head;
    }
    return array;
}

/* Decodes ids -> str.  A code point is at most 4 bytes of UTF-8. */
PyObject *tfmpy_tokenizer_decode(const tfm_tokenizer *tokenizer,
                                 const int32_t *ids, int64_t n_ids)
{
    size_t capacity, length = 0;
    char *text;
    tfm_status st;
    PyObject *result;

    if (n_ids < 0 || (uint64_t)n_ids > (SIZE_MAX - 1) / 4) {
        tfmpy_raise(TFM_ERR_OVERFLOW, "too many ids to decode");
        return NULL;
    }
    capacity = 4 * (size_t)n_ids + 1;
    text = malloc(capacity);
    if (!text)
        return PyErr_NoMemory();
    st = tfm_tokenizer_decode(tokenizer, ids, n_ids, text, capacity, &length);
    if (st != TFM_OK) {
        free(text);
        tfmpy_raise_last(st);
        return NULL;
    }
    result = PyUnicode_DecodeUTF8(text, (Py_ssize_t)length, "strict");
    free(text);
    return result;
}

/* tfm_model_save with the extra metadata as a dict of str -> str. */
PyObject *tfmpy_model_save(const tfm_module *model, const char *path,
                           PyObject *metadata)
{
    Py_ssize_t n = 0, pos = 0, i = 0;
    PyObject *key, *value, *result = NULL;
    const char **keys = NULL, **values = NULL;
    tfm_status st;

    if (metadata != Py_None) {
        if (!PyDict_Check(metadata)) {
            PyErr_SetString(PyExc_TypeError, "metadata must be a dict or None");
            return NULL;
        }
        n = PyDict_Size(metadata);
    }
    if (n > 0) {
        keys = calloc((size_t)n, sizeof *keys);
        values = calloc((size_t)n, sizeof *values);
        if (!keys || !values) {
            PyErr_NoMemory();
            goto done;
        }
        while (PyDict_Next(metadata, &pos, &key, &value)) {
            if (!PyUnicode_Check(key) || !PyUnicode_Check(value)) {
                PyErr_SetString(PyExc_TypeError,
                                "metadata keys and values must be str");
                goto done;
            }
            keys[i] = tfmpy_c_string(key, "a metadata key", -1);
            values[i] = keys[i] ? tfmpy_c_string(value, "a metadata value",
                                                 -1) : NULL;
            if (!keys[i] || !values[i])
                goto done;
            i++;
        }
    }
    st = tfm_model_save(model, path, (int)n, keys, values);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        goto done;
    }
    result = SWIG_Py_Void();
done:
    free(keys);
    free(values);
    return result;
}
%}

/* ---- Losses (training.h) --------------------------------------------------- */

%apply (int32_t *IN_ARRAY1, int64_t DIM1) {
    (const int32_t *targets, int64_t n_targets)
};

%inline %{
/* tfm_cross_entropy (causal 0) or tfm_causal_lm_loss (causal 1) with the
 * targets' count checked against the logits' rows; the loss is written
 * into loss_out (a float32 array of one element), dlogits may be None. */
tfm_status tfmpy_cross_entropy(const tfm_tensor *logits,
                               const int32_t *targets, int64_t n_targets,
                               int32_t ignore_index, float label_smoothing,
                               int reduction, int causal,
                               tfm_tensor *loss_out, tfm_tensor *dlogits)
{
    int64_t c = tfm_tensor_dim(logits, -1);
    int64_t rows = c > 0 ? tfm_tensor_numel(logits) / c : 0;
    if (n_targets != rows)      /* checked by the Python layer first */
        return TFM_ERR_SHAPE;
    float loss = 0.0f;
    tfm_status st = causal
        ? tfm_causal_lm_loss(logits, targets, ignore_index, label_smoothing,
                             (tfm_reduction)reduction, &loss, dlogits)
        : tfm_cross_entropy(logits, targets, ignore_index, label_smoothing,
                            (tfm_reduction)reduction, &loss, dlogits);
    if (st == TFM_OK && loss_out && tfm_tensor_numel(loss_out) >= 1)
        tfm_tensor_data(loss_out)[0] = loss;
    return st;
}
%}

/* tfm_model_loss_backward with the targets' count checked against the
 * ids'; returns the loss. */
%ignore tfm_model_loss_backward;
%inline %{
PyObject *tfmpy_model_loss_backward(tfm_module *model, const int32_t *ids,
                                    int64_t batch, int64_t seq,
                                    const int32_t *targets, int64_t n_targets,
                                    int32_t ignore_index,
                                    float label_smoothing, int reduction,
                                    float grad_scale)
{
    float loss = 0.0f;
    tfm_status st;
    if (n_targets != batch * seq) {     /* checked by the Python layer */
        tfmpy_raise(TFM_ERR_SHAPE, "targets must have the shape of ids");
        return NULL;
    }
    st = tfm_model_loss_backward(model, ids, batch, seq, targets,
                                 ignore_index, label_smoothing,
                                 (tfm_reduction)reduction, grad_scale,
                                 &loss);
    if (st != TFM_OK) {
        tfmpy_raise_last(st);
        return NULL;
    }
    return PyFloat_FromDouble((double)loss);
}
%}

/* ---- Optimizers and learning-rate schedules (training.h) ----------------- */

/* The losses above go through tfmpy_cross_entropy; the masked-LM inputs
 * take a generator Python does not hold. */
%ignore tfm_cross_entropy;
%ignore tfm_causal_lm_loss;
%ignore tfm_masked_lm_inputs;
/* The options struct starts at the defaults of its kind
 * (tfm_optimizer_options_init) so Python sets only what it means. */
%extend tfm_optimizer_options {
    tfm_optimizer_options(int kind) {
        tfm_optimizer_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_optimizer_options_init(o, (tfm_optimizer_kind)kind);
        return o;
    }
    ~tfm_optimizer_options() { free($self); }
}
%apply double *OUTPUT { double *total_norm };
%apply double *OUTPUT { double *factor };
%include "transformer/training.h"

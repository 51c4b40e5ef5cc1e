/* Included by transformer.i (before the public headers): the typemaps by
 * which strings and paths cross into C.  Uses tfmpy_raise (transformer.i). */

/* Strings in, wherever they cross into C (this typemap, stop strings,
 * metadata): str only (TypeError), and no NUL, which C takes as the end
 * ("w\0x" written as "w"): InvalidArgumentError.  The str owns the UTF-8. */
%{
static const char *tfmpy_c_string(PyObject *obj, const char *what, int arg)
{
    Py_ssize_t size;
    char msg[160];
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: argument %d must be str, not %s",
                     what, arg, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8AndSize(obj, &size);
    if (s && strlen(s) != (size_t)size) {
        PyOS_snprintf(msg, sizeof msg, arg < 0 ? "%s holds a NUL character"
                      : "%s: argument %d holds a NUL character", what, arg);
        tfmpy_raise(TFM_ERR_INVALID_ARGUMENT, msg);
        return NULL;
    }
    return s;
}
%}
%typemap(in) const char *
  %{ if (!($1 = (char *)tfmpy_c_string($input, "$symname", $argnum))) SWIG_fail; %}
%typemap(freearg) const char * ""   /* the str owns the UTF-8 buffer */
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const char *
  "$1 = PyUnicode_Check($input);"

/* Paths (every `const char *path` parameter) as Python's open() takes
 * them: str (encoded with os.fsencode, so a name that is not UTF-8, which
 * os.listdir gives as surrogate escapes, reaches the file it names),
 * bytes, or os.PathLike; a NUL is refused (InvalidArgumentError), as C
 * would end the name there.  The bytes object is kept until the call
 * returns (freearg). */
%{
static const char *tfmpy_c_path(PyObject *obj, PyObject **keep,
                                const char *what, int arg)
{
    PyObject *p = PyOS_FSPath(obj), *b;
    char msg[160];
    *keep = NULL;
    if (!p)
        return NULL;
    if (PyUnicode_Check(p)) {
        b = PyUnicode_EncodeFSDefault(p);
        Py_DECREF(p);
        if (!b)
            return NULL;
    } else {
        b = p;              /* PyOS_FSPath gives str or bytes */
    }
    if (strlen(PyBytes_AS_STRING(b)) != (size_t)PyBytes_GET_SIZE(b)) {
        Py_DECREF(b);
        PyOS_snprintf(msg, sizeof msg,
                      "%s: argument %d (a path) holds a NUL character",
                      what, arg);
        tfmpy_raise(TFM_ERR_INVALID_ARGUMENT, msg);
        return NULL;
    }
    *keep = b;
    return PyBytes_AS_STRING(b);
}
%}
%typemap(in) const char *path (PyObject *keep = NULL)
  %{ if (!($1 = (char *)tfmpy_c_path($input, &keep, "$symname", $argnum)))
       SWIG_fail; %}
%typemap(freearg) const char *path "Py_XDECREF(keep$argnum);"
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const char *path
  "$1 = PyUnicode_Check($input) || PyBytes_Check($input);"

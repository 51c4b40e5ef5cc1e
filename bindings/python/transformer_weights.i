/* Included by transformer.i after the public headers it builds on
 * (module.h, safetensors.h): weights kept in 16, 8 and 4 bits
 * (transformer/weights.h).
 *
 *   tfm_module_quantize(module, dtype)        dtype: TFM_DTYPE_* (an int)
 *   tfm_module_parameter_dtype(module, name)  -> the TFM_DTYPE_* (an int)
 *   tfm_module_parameter_bytes(module)        -> bytes (an int)
 *   tfm_load_options()                        a proxy at the defaults
 *                                             (tfm_load_options_init):
 *                                             set .dtype, .mmap
 *   tfm_model_load_v2(path, options)          -> a module handle
 *
 * The idiomatic layer (transformer/_weights.py) takes dtype names. */

/* struct_size is the library's business: constructing the struct fills
 * it and every default (tfm_load_options_init). */
%immutable tfm_load_options::struct_size;
%extend tfm_load_options {
    tfm_load_options() {
        tfm_load_options *o = calloc(1, sizeof *o);
        if (o)
            tfm_load_options_init(o);
        return o;
    }
    ~tfm_load_options() { free($self); }
}
%ignore tfm_load_options_init;

%include "transformer/weights.h"

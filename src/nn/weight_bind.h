/* Internal: storing a module's weights in another type, and binding them
 * to bytes read from a file (transformer/weights.h).
 *
 * A convertible parameter (base/param_spec.h) is float32 in its home's
 * storage until converted.  Converting registers its float range in
 * kernels/weight_store.h's table with the new bytes (owned memory, or a
 * file mapping used in place) and releases the range's pages
 * (madvise(MADV_DONTNEED): they read as zeros and cost nothing until
 * written again).  Converting back to float32 widens the bytes into the
 * range and removes the entry.  Every conversion is prepared whole before
 * anything changes, so a failure leaves every parameter as it was. */
#ifndef TFM_SRC_WEIGHT_BIND_H
#define TFM_SRC_WEIGHT_BIND_H

#include <stdint.h>

#include "base/mapping.h"
#include "nn/module_impl.h"

/* How p is stored now: TFM_DTYPE_F32 or the type of its table entry. */
int tfm__param_dtype(const tfm__param *p);

/* Whether any parameter of m is stored in a type other than float32 or
 * used in place from a file (then m does not train). */
int tfm__module_has_stored(const tfm_module *m);

/* TFM_OK when m holds only float32 weights in its own memory; else
 * TFM_ERR_INVALID_ARGUMENT with the message "<what>: parameter <name> is
 * stored as <DTYPE>; convert it back with tfm_module_quantize(module,
 * TFM_DTYPE_F32)". */
tfm_status tfm__module_check_float(const tfm_module *m, const char *what);

/* out [numel] = p's values, widened when stored.  Cannot fail. */
void tfm__param_read(const tfm__param *p, float *out);

/* Sets p's values from values [numel] (finite: the caller checked),
 * stored again in p's current type.  TFM_OK or TFM_ERR_OUT_OF_MEMORY;
 * on error p is unchanged. */
tfm_status tfm__param_write(const tfm__param *p, const float *values);

/* Sets parameter `name` of m from nbytes bytes stored as dtype (F32, F16,
 * BF16, Q8_0, Q4_0), row-major in the parameter's shape.  keep_dtype:
 * TFM_LOAD_DTYPE_AUTO keeps dtype for a convertible weight (float32
 * otherwise); else the type convertible weights are kept in.  Kept as
 * stored: used in place when map is not NULL (a reference is held until
 * the parameter changes or m is freed), else copied; otherwise widened
 * and converted.  Values are checked finite.  Errors: TFM_ERR_NOT_FOUND,
 * TFM_ERR_FORMAT (nbytes does not match the shape), TFM_ERR_INVALID_ARGUMENT
 * (Q8_0 / Q4_0 rows not a multiple of 32 values), TFM_ERR_NON_FINITE,
 * TFM_ERR_OUT_OF_MEMORY; messages name the parameter.  On error the
 * parameter is unchanged. */
tfm_status tfm__module_bind_param(tfm_module *m, const char *name, int dtype,
                                  const void *bytes, uint64_t nbytes,
                                  int keep_dtype, tfm__mapping *map);

/* Converts p alone to dtype from its current values (as
 * tfm_module_quantize does for each weight).  Errors: those of
 * tfm_module_quantize; p unchanged on error. */
tfm_status tfm__param_convert(const tfm__param *p, int dtype);

/* The destroy of m: removes its own parameters' entries from the table
 * and releases what holds their bytes. */
void tfm__weight_forget(tfm_module *m);

#endif

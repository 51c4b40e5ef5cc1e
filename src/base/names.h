/* Internal: enum names (transformer/names.h) for the library's own
 * parsers, without touching the error message. */
#ifndef TFM_SRC_NAMES_H
#define TFM_SRC_NAMES_H

#include "transformer/names.h"

/* The value of enum e named `name`, or -1 when there is none (no error
 * set: the caller words its own). */
int tfm__enum_lookup(tfm_enum e, const char *name);

#endif

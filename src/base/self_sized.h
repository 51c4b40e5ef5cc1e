/* Internal: reading a caller's self-sized struct (docs/ABI.md, "Self-sized
 * structs"): the caller's struct_size says how many bytes it has, those of
 * the release it was compiled against; members a newer library appended
 * keep their defaults. */
#ifndef TFM_SRC_SELF_SIZED_H
#define TFM_SRC_SELF_SIZED_H

#include <stddef.h>
#include <string.h>

#include "base/error.h"

/* ours (our_size bytes, holding the defaults) <- the bytes of theirs that
 * their_size covers, at most our_size, rounded down to whole 8-byte units:
 * every member of these structs is at most 8 bytes and aligned to its
 * size, so each is taken whole or not at all.  A struct_size that ends
 * inside a member (a pointer, an int64_t) leaves that member at its
 * default instead of mixing some of the caller's bytes into it.  The
 * caller checks their_size against its minimum first and sets
 * ours->struct_size afterwards. */
static inline void tfm__self_sized_copy(void *ours, size_t our_size,
                                        const void *theirs, size_t their_size)
{
    size_t n = their_size < our_size ? their_size : our_size;
    memcpy(ours, theirs, n & ~(size_t)7);
}

/* The one reader of a caller's options struct whose first member is
 * `size_t struct_size` (tfm_mha_options, tfm_layer_options,
 * tfm_generate_options, tfm_beam_search_options): ours (our_size bytes,
 * already holding the defaults) <- theirs as tfm__self_sized_copy takes
 * it, ours' struct_size then set to our_size.  theirs NULL: the defaults
 * kept.  TFM_ERR_INVALID_ARGUMENT (message naming init_name, the public
 * initialiser) when theirs' struct_size is below min_size; ours untouched
 * then. */
static inline tfm_status tfm__self_sized_read(void *ours, size_t our_size,
                                              const void *theirs,
                                              size_t min_size,
                                              const char *init_name)
{
    if (!theirs)
        return TFM_OK;
    size_t their_size;
    memcpy(&their_size, theirs, sizeof their_size);
    if (their_size < min_size)
        return tfm__fail(TFM_ERR_INVALID_ARGUMENT,
                         "options->struct_size (%zu) is too small: set it "
                         "with %s", their_size, init_name);
    tfm__self_sized_copy(ours, our_size, theirs, their_size);
    memcpy(ours, &our_size, sizeof our_size);
    return TFM_OK;
}

#endif

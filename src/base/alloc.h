/* Internal: every heap allocation of the library goes through these, so
 * that tests can make the k-th allocation fail (out-of-memory injection). */
#ifndef TFM_SRC_ALLOC_H
#define TFM_SRC_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *tfm__malloc(size_t size);
void *tfm__calloc(size_t count, size_t size);
void *tfm__realloc(void *ptr, size_t size);
void tfm__free(void *ptr);

/* A large buffer that is written progressively and read often (a KV
 * cache): from 2 MiB up, on Linux, fresh pages of its own mapping aligned
 * to 2 MiB and marked for transparent huge pages (MADV_HUGEPAGE), so that
 * the kernel maps it 2 MiB at a time on first touch instead of 4 KiB at a
 * time; the size is rounded up to whole 2 MiB pages when that adds at
 * most a quarter (else the tail stays in small pages).  Smaller buffers,
 * and other systems: tfm__malloc.  Freed with tfm__free_large and the
 * same size. */
void *tfm__malloc_large(size_t size);
void tfm__free_large(void *ptr, size_t size);
char *tfm__strdup(const char *s);

/* bytes (> 0) of zeroed memory in a mapping of its own, page-aligned,
 * its pages touched only when used (a module's parameter storage holding
 * weights that may be released page by page: nn/weight_bind.c); NULL on
 * failure.  Freed with tfm__pages_free and the same size. */
void *tfm__pages_alloc(size_t bytes);
void tfm__pages_free(void *ptr, size_t bytes);

/* a * b into *out; returns 0 on overflow (then *out is unchanged). */
int tfm__mul_size(size_t a, size_t b, size_t *out);

/* Product of n non-negative int64 values into *out, checked so that the
 * product times elem_size fits in ptrdiff_t (and so in size_t and int64);
 * returns 0 on overflow. */
int tfm__checked_numel(const int64_t *dims, int n, size_t elem_size,
                       int64_t *out);

/* Overflow-checked int64 arithmetic for MAC counts: *acc += a * b * c * d,
 * every product checked.  Returns 0 on overflow (*acc unchanged). */
int tfm__macs_add(int64_t *acc, int64_t a, int64_t b, int64_t c, int64_t d);

/* Room for one more element in a growing array v of *cap elements of
 * elem bytes holding n: v itself while n < *cap, else v reallocated to
 * twice *cap elements (first when *cap is 0, overflow checked) with *cap
 * updated.  NULL on out-of-memory or overflow: then v is still valid and
 * *cap unchanged.  The caller stores the result back into its pointer. */
void *tfm__grow(void *v, size_t *cap, size_t n, size_t elem, size_t first);

#endif

/* Heap allocation wrappers with an out-of-memory injection hook for tests. */
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "base/alloc.h"

/* Test hook (see tests/): when fail_after > 0, the fail_after-th allocation
 * from now fails.  Plain static: tests that use it are single-threaded. */
static long fail_after = 0;

/* Not in any public header: exported for the out-of-memory tests only
 * through the "tfm_" prefix and documented as internal in docs/ABI.md. */
__attribute__((visibility("default"))) void tfm_testing_fail_allocation(long k)
{
    fail_after = k;
}

static int injected_failure(void)
{
    if (fail_after > 0 && --fail_after == 0)
        return 1;
    return 0;
}

void *tfm__malloc(size_t size)
{
    if (injected_failure())
        return NULL;
    return malloc(size ? size : 1);
}

void *tfm__calloc(size_t count, size_t size)
{
    if (injected_failure())
        return NULL;
    return calloc(count ? count : 1, size ? size : 1);
}

void *tfm__realloc(void *ptr, size_t size)
{
    if (injected_failure())
        return NULL;
    return realloc(ptr, size ? size : 1);
}

void *tfm__grow(void *v, size_t *cap, size_t n, size_t elem, size_t first)
{
    if (n < *cap)
        return v;
    size_t new_cap = *cap ? *cap : first, bytes;
    if ((*cap && !tfm__mul_size(new_cap, 2, &new_cap)) ||
        !tfm__mul_size(new_cap, elem, &bytes))
        return NULL;
    void *p = tfm__realloc(v, bytes);
    if (p)
        *cap = new_cap;
    return p;
}

#define TFM_HUGE_PAGE ((size_t)2 << 20)

#if defined(__linux__) && defined(MADV_HUGEPAGE)
/* The bytes tfm__malloc_large maps for size, or 0 for a plain malloc. */
static size_t large_bytes(size_t size)
{
    if (size < TFM_HUGE_PAGE || size > SIZE_MAX / 2)
        return 0;
    const size_t whole = (size + TFM_HUGE_PAGE - 1) & ~(TFM_HUGE_PAGE - 1);
    return whole - size <= size / 4 ? whole : (size + 4095) & ~(size_t)4095;
}
#endif

void *tfm__malloc_large(size_t size)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t bytes = large_bytes(size);
    if (bytes) {
        if (injected_failure())
            return NULL;
        /* Fresh pages (no reused heap page already mapped small), aligned
         * to a huge page: map one huge page more and unmap the slack. */
        char *m = mmap(NULL, bytes + TFM_HUGE_PAGE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return NULL;
        const uintptr_t a = ((uintptr_t)m + TFM_HUGE_PAGE - 1) &
                            ~(uintptr_t)(TFM_HUGE_PAGE - 1);
        char *p = (char *)a;
        if (p > m)
            munmap(m, (size_t)(p - m));
        if (p + bytes < m + bytes + TFM_HUGE_PAGE)
            munmap(p + bytes, (size_t)(m + TFM_HUGE_PAGE - p));
        /* Only advice: without transparent huge pages the buffer is an
         * ordinary one. */
        (void)madvise(p, bytes, MADV_HUGEPAGE);
        return p;
    }
#endif
    return tfm__malloc(size);
}

void *tfm__pages_alloc(size_t bytes)
{
    if (injected_failure() || bytes == 0)
        return NULL;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void tfm__pages_free(void *ptr, size_t bytes)
{
    if (ptr)
        munmap(ptr, bytes);
}

void tfm__free_large(void *ptr, size_t size)
{
    if (!ptr)
        return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t bytes = large_bytes(size);
    if (bytes) {
        munmap(ptr, bytes);
        return;
    }
#endif
    tfm__free(ptr);
}

void tfm__free(void *ptr)
{
    free(ptr);
}

char *tfm__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *copy = tfm__malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

int tfm__mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

int tfm__checked_numel(const int64_t *dims, int n, size_t elem_size,
                       int64_t *out)
{
    int64_t total = 1;
    for (int i = 0; i < n; i++) {
        if (dims[i] < 0)
            return 0;
        if (dims[i] != 0 && total > INT64_MAX / dims[i])
            return 0;
        total *= dims[i];
    }
    /* The byte size must fit both size_t and ptrdiff_t (no object may be
     * larger than PTRDIFF_MAX bytes). */
    if (elem_size != 0 && (uint64_t)total > (uint64_t)PTRDIFF_MAX / elem_size)
        return 0;
    *out = total;
    return 1;
}

int tfm__macs_add(int64_t *acc, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t ab, abc, abcd, sum;
    if (__builtin_mul_overflow(a, b, &ab) ||
        __builtin_mul_overflow(ab, c, &abc) ||
        __builtin_mul_overflow(abc, d, &abcd) ||
        __builtin_add_overflow(*acc, abcd, &sum))
        return 0;
    *acc = sum;
    return 1;
}

/* Reading a whole file (file.h). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"

tfm_status tfm__read_file(const char *path, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return tfm__fail(TFM_ERR_IO, "%.200s: cannot open: %s", path,
                         strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = tfm__malloc(cap);
    tfm_status st = buf ? TFM_OK
                        : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    while (st == TFM_OK) {
        if (cap - n < 2) {
            char *p = cap < SIZE_MAX / 2 ? tfm__realloc(buf, cap * 2) : NULL;
            if (!p) {
                st = tfm__fail(TFM_ERR_OUT_OF_MEMORY,
                               "%.200s: out of memory reading it", path);
                break;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                st = tfm__fail(TFM_ERR_IO, "%.200s: read error", path);
            break;
        }
    }
    fclose(f);
    if (st != TFM_OK) {
        tfm__free(buf);
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return TFM_OK;
}

/* Reference-counted read-only file mappings (mapping.h). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/mapping.h"

struct tfm__mapping {
    atomic_int refs;
    void *data;
    size_t size;
    dev_t dev;
    ino_t ino;
    char *path;
};

tfm_status tfm__mapping_open(const char *path, size_t min_bytes,
                             tfm__mapping **out)
{
    int fd = -1;
    size_t length = 0;
    tfm_status st = tfm__open_regular(path, 0, &fd, &length);
    if (st != TFM_OK)
        return st;
    struct stat info;
    if (length < min_bytes || length == 0) {
        close(fd);
        return tfm__fail(TFM_ERR_FORMAT,
                         "\"%s\" is too short (%zu bytes)", path, length);
    }
    if (fstat(fd, &info) != 0) {
        st = tfm__fail(TFM_ERR_IO, "cannot stat \"%s\": %s", path,
                       strerror(errno));
        close(fd);
        return st;
    }
    tfm__mapping *m = tfm__calloc(1, sizeof *m);
    char *name = tfm__strdup(path);
    void *data = MAP_FAILED;
    if (m && name)
        data = mmap(NULL, length, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    close(fd);
    if (!m || !name || data == MAP_FAILED) {
        tfm__free(m);
        tfm__free(name);
        if (data == MAP_FAILED && m && name)
            return tfm__fail(TFM_ERR_IO, "cannot map \"%s\": %s", path,
                             strerror(err));
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "cannot map \"%s\"", path);
    }
    atomic_init(&m->refs, 1);
    m->data = data;
    m->size = length;
    m->dev = info.st_dev;
    m->ino = info.st_ino;
    m->path = name;
    *out = m;
    return TFM_OK;
}

tfm__mapping *tfm__mapping_retain(tfm__mapping *m)
{
    if (m)
        atomic_fetch_add(&m->refs, 1);
    return m;
}

void tfm__mapping_release(tfm__mapping *m)
{
    if (!m || atomic_fetch_sub(&m->refs, 1) != 1)
        return;
    munmap(m->data, m->size);
    tfm__free(m->path);
    tfm__free(m);
}

const void *tfm__mapping_data(const tfm__mapping *m)
{
    return m->data;
}

size_t tfm__mapping_size(const tfm__mapping *m)
{
    return m->size;
}

const char *tfm__mapping_path(const tfm__mapping *m)
{
    return m->path;
}

tfm_status tfm__mapping_check(const tfm__mapping *m)
{
    struct stat now;
    if (stat(m->path, &now) == 0 && now.st_dev == m->dev &&
        now.st_ino == m->ino && (uint64_t)now.st_size < m->size)
        return tfm__fail(TFM_ERR_IO,
                         "\"%s\" was truncated while mapped (%lld of %zu "
                         "bytes)",
                         m->path, (long long)now.st_size, m->size);
    return TFM_OK;
}

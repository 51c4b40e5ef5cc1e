/* Opening and reading files (file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/utf8.h"

/* What a file of mode m is, for the messages. */
static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO (named pipe)";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

static tfm_status too_large(const char *path, size_t max_bytes)
{
    return tfm__fail(TFM_ERR_IO,
                     "%.200s: larger than %zu bytes, the limit for this kind "
                     "of file", path, max_bytes);
}

tfm_status tfm__open_regular(const char *path, size_t max_bytes, int *fd,
                             size_t *size)
{
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer without
     * it.  A directory opens read-only, and is refused below. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (f < 0)
        return tfm__fail(TFM_ERR_IO, "%.200s: cannot open: %s", path,
                         strerror(errno));
    struct stat sb;
    tfm_status st = TFM_OK;
    if (fstat(f, &sb) != 0)
        st = tfm__fail(TFM_ERR_IO, "%.200s: cannot stat: %s", path,
                       strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        st = tfm__fail(TFM_ERR_IO,
                       "%.200s is %s, not a regular file: refused", path,
                       kind_of(sb.st_mode));
    else if (sb.st_size < 0 || (uintmax_t)sb.st_size > SIZE_MAX)
        st = tfm__fail(TFM_ERR_IO, "%.200s: too large", path);
    else if (max_bytes > 0 && (uintmax_t)sb.st_size > max_bytes)
        st = too_large(path, max_bytes);
    if (st == TFM_OK) {
        const int flags = fcntl(f, F_GETFL);
        if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) < 0)
            st = tfm__fail(TFM_ERR_IO, "%.200s: %s", path, strerror(errno));
    }
    if (st != TFM_OK) {
        close(f);
        return st;
    }
    *fd = f;
    *size = (size_t)sb.st_size;
    return TFM_OK;
}

tfm_status tfm__read_file(const char *path, size_t max_bytes, char **data,
                          size_t *len)
{
    int fd;
    size_t size;
    tfm_status st = tfm__open_regular(path, max_bytes, &fd, &size);
    if (st != TFM_OK)
        return st;
    /* st_size sizes the buffer; a file that grows (or a /proc file that
     * says 0) is read on, up to max_bytes. */
    size_t cap = size + 1 < (1 << 16) ? (1 << 16) : size + 2, n = 0;
    char *buf = tfm__malloc(cap);
    if (!buf)
        st = tfm__fail(TFM_ERR_OUT_OF_MEMORY, "%.200s: out of memory reading "
                       "it", path);
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
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = tfm__fail(TFM_ERR_IO, "%.200s: read error: %s", path,
                           strerror(errno));
            break;
        }
        if (got == 0)
            break;
        n += (size_t)got;
        if (max_bytes > 0 && n > max_bytes)
            st = too_large(path, max_bytes);
    }
    close(fd);
    if (st != TFM_OK) {
        tfm__free(buf);
        return st;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return TFM_OK;
}

tfm_status tfm__check_utf8(const char *text, size_t n, const char *what)
{
    size_t at = 0;
    const char *why = tfm__utf8_check((const unsigned char *)text, n, &at);
    if (why)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s: not valid UTF-8 at byte %zu (%s)", what,
                         at, why);
    return TFM_OK;
}

tfm_status tfm__read_text_file(const char *path, size_t max_bytes,
                               char **data, size_t *len)
{
    char *text;
    size_t n;
    tfm_status st = tfm__read_file(path, max_bytes, &text, &n);
    if (st == TFM_OK && (st = tfm__check_utf8(text, n, path)) != TFM_OK)
        tfm__free(text);
    if (st == TFM_OK) {
        *data = text;
        *len = n;
    }
    return st;
}

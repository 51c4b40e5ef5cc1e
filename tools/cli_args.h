/* The command-line programs' shared helpers (transformer-generate,
 * transformer-train): error messages prefixed with the program's name and
 * reading a whole file, strict number parsing (the whole argument must be the number; the
 * library's parser, src/number_parse.h).  Each program defines PROGRAM
 * before including this header; the functions are static, one copy per
 * program. */
#ifndef TFM_TOOLS_CLI_ARGS_H
#define TFM_TOOLS_CLI_ARGS_H

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/number_parse.h"

#ifndef PROGRAM
#error "define PROGRAM (the program's name) before including cli_args.h"
/* Strict UTF-8 decoding of one code point at s (n bytes left); returns its length,
 * 0 when invalid: a lead byte of 0xF8 and above, a missing continuation
 * byte, an overlong form (C0 80 is U+0000: it made a text "empty"), a
 * UTF-16 surrogate, a code point past U+10FFFF. */
static __attribute__((unused)) int utf8_next(const unsigned char *s, size_t n,
                                             uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    const int len = s[0] >= 0xF8   ? 0
                    : s[0] >= 0xF0 ? 4
                    : s[0] >= 0xE0 ? 3
                    : s[0] >= 0xC0 ? 2
                                   : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    uint32_t v = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < least[len] || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
        return 0;
    *cp = v;
    return len;
}

#endif

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "PROGRAM: <message>" to stderr; returns 1. */
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(PROGRAM ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static inline double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- Number parsing: the whole argument must be the number ------------ */

static inline int parse_int64(const char *option, const char *s, int64_t min,
                       int64_t *out)
{
    int64_t v;
    tfm__number st = tfm__parse_int64(s, &v);
    if (st == TFM__NUMBER_SYNTAX)
        return fail("%s: '%s' is not a whole number", option, s);
    if (st == TFM__NUMBER_RANGE || v < min)
        return fail("%s: %s is out of range (at least %lld)", option, s,
                    (long long)min);
    *out = v;
    return 0;
}

static inline int parse_uint64(const char *option, const char *s, uint64_t *out)
{
    uint64_t v;
    tfm__number st = tfm__parse_uint64(s, &v);
    if (st == TFM__NUMBER_SYNTAX)
        return fail("%s: '%s' is not a whole number of 0 or more", option, s);
    if (st == TFM__NUMBER_RANGE)
        return fail("%s: %s is too large (at most %llu)", option, s,
                    (unsigned long long)UINT64_MAX);
    *out = v;
    return 0;
}

static inline int parse_float(const char *option, const char *s, float *out)
{
    double v;
    tfm__number st = tfm__parse_double(s, &v);
    if (st == TFM__NUMBER_SYNTAX)
        return fail("%s: '%s' is not a number", option, s);
    if (st == TFM__NUMBER_RANGE || fabs(v) > FLT_MAX)
        return fail("%s: %s is not a finite number", option, s);
    *out = (float)v;
    return 0;
}

static inline int parse_double(const char *option, const char *s,
                               double *out)
{
    double v = 0.0;
    tfm__number st = tfm__parse_double(s, &v);
    if (st == TFM__NUMBER_SYNTAX)
        return fail("%s: '%s' is not a number", option, s);
    if (st == TFM__NUMBER_RANGE || !isfinite(v))
        return fail("%s: %s is not a finite number", option, s);
    *out = v;
    return 0;
}

/* The caps of the files the programs read whole (docs/USAGE.md, "Files
 * the library reads"): JSON files (generation_config.json, config.json,
 * preprocessor_config.json) 16 MiB; text files (prompts, batch files,
 * training text) 1 GiB. */
#define CLI_MAX_JSON_FILE ((size_t)16 << 20)
#define CLI_MAX_TEXT_FILE ((size_t)1 << 30)

/* What a file of mode m is, for the messages. */
static inline const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* The programs' one door for reading a file, as the library's
 * (src/base/file.c): opened without blocking (a FIFO never blocks the
 * open; O_NONBLOCK is cleared once open), refused unless a regular file
 * after following links (a FIFO, a directory, /dev/zero), and refused
 * when larger than max_bytes (0: no cap).  The stream, or NULL with a
 * message printed. */
static inline FILE *open_regular(const char *path, size_t max_bytes)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        fail("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    int flags = -1;
    if (fstat(fd, &sb) != 0)
        fail("cannot read %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        fail("cannot read %s: it is %s, not a regular file", path,
             file_kind(sb.st_mode));
    else if (max_bytes && (uintmax_t)sb.st_size > max_bytes)
        fail("cannot read %s: larger than %zu bytes, the limit for this "
             "kind of file", path, max_bytes);
    else if ((flags = fcntl(fd, F_GETFL)) < 0 ||
             fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        fail("cannot read %s: %s", path, strerror(errno));
    else {
        FILE *f = fdopen(fd, "rb");
        if (f)
            return f;
        fail("cannot read %s: %s", path, strerror(errno));
    }
    close(fd);
    return NULL;
}

/* Opens path for appending (a log), created when absent: refused (NULL,
 * message printed) unless a regular file after following links, and
 * opened without blocking, so a FIFO no one reads is refused rather than
 * waited on forever. */
static inline FILE *open_append_regular(const char *path)
{
    struct stat sb;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NONBLOCK |
                            O_CLOEXEC | O_NOCTTY, 0666);
    if (fd < 0) {
        if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
            fail("cannot write %s: it is %s, not a regular file", path,
                 file_kind(sb.st_mode));
        else
            fail("cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    int flags = -1;
    if (fstat(fd, &sb) != 0)
        fail("cannot write %s: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        fail("cannot write %s: it is %s, not a regular file", path,
             file_kind(sb.st_mode));
    else if ((flags = fcntl(fd, F_GETFL)) < 0 ||
             fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
        fail("cannot write %s: %s", path, strerror(errno));
    else {
        FILE *f = fdopen(fd, "a");
        if (f)
            return f;
        fail("cannot write %s: %s", path, strerror(errno));
    }
    close(fd);
    return NULL;
}

/* Reads the whole file (through open_regular, at most max_bytes), with a
 * NUL after its *len bytes; NULL (message printed) on failure. */
static inline char *read_file_max(const char *path, size_t max_bytes,
                                  size_t *len)
{
    FILE *f = open_regular(path, max_bytes);
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    int over = 0;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (n > max_bytes) { /* the file grew past the cap */
            over = 1;
            break;
        }
        char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2 + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    over = over || n > max_bytes;
    const int err = ferror(f);
    fclose(f);
    if (!buf || err || over) {
        if (over)
            fail("cannot read %s: larger than %zu bytes, the limit for "
                 "this kind of file", path, max_bytes);
        else
            fail("cannot read %s: %s", path,
                 buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* A text file (prompts, batch files, training text): read_file_max with
 * CLI_MAX_TEXT_FILE. */
static inline char *read_file(const char *path, size_t *len)
{
    return read_file_max(path, CLI_MAX_TEXT_FILE, len);
}

/* Strict UTF-8 decoding of one code point at s (n bytes left); returns its length,
 * 0 when invalid: a lead byte of 0xF8 and above, a missing continuation
 * byte, an overlong form (C0 80 is U+0000: it made a text "empty"), a
 * UTF-16 surrogate, a code point past U+10FFFF. */
static __attribute__((unused)) int utf8_next(const unsigned char *s, size_t n,
                                             uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    const int len = s[0] >= 0xF8   ? 0
                    : s[0] >= 0xF0 ? 4
                    : s[0] >= 0xE0 ? 3
                    : s[0] >= 0xC0 ? 2
                                   : 0;
    if (len == 0 || (size_t)len > n)
        return 0;
    uint32_t v = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (v < least[len] || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF)
        return 0;
    *cp = v;
    return len;
}

#endif

/* The command-line programs' shared helpers (transformer-generate,
 * transformer-train): error messages prefixed with the program's name and
 * reading a whole file, strict number parsing (the whole argument must be the number; the
 * library's parser, src/number_parse.h).  Each program defines PROGRAM
 * before including this header; the functions are static, one copy per
 * program. */
#ifndef TFM_TOOLS_CLI_ARGS_H
#define TFM_TOOLS_CLI_ARGS_H

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/number_parse.h"

#ifndef PROGRAM
#error "define PROGRAM (the program's name) before including cli_args.h"
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

/* Reads the whole file, with a NUL after its *len bytes; NULL (message
 * printed) on failure. */
static inline char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail("cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2 + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    const int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fail("cannot read %s: %s", path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

#endif

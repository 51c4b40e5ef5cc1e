/* Internal: strict number syntax for text read from files and command
 * lines (model-file metadata, the tokenizer's vocabulary size,
 * transformer-generate's options).
 *
 * The whole string must be the number, in one spelling: no white space
 * anywhere (strtoll and strtod skip leading blanks, so " 4" and "\n4" were
 * 4), no '+', no hexadecimal, no "inf" or "nan".
 *   integers: an optional '-' then decimal digits ("007" is 7);
 *   reals:    an optional '-', digits with an optional decimal point (at
 *             least one digit: "0.5", ".5" and "5." are numbers, "." is
 *             not), then an optional exponent [eE][+-]?digits; finite
 *             (strtod then gives the value).
 * Header-only (static inline), so that transformer-generate, which links
 * only the public API, compiles the same parser as the library. */
#ifndef TFM_SRC_NUMBER_PARSE_H
#define TFM_SRC_NUMBER_PARSE_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef enum tfm__number {
    TFM__NUMBER_OK = 0,
    TFM__NUMBER_SYNTAX,   /* not the spelling above */
    TFM__NUMBER_RANGE     /* spelt right, outside the type (or infinite) */
} tfm__number;

static inline int tfm__is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Whether s[0..] is digits only, at least one. */
static inline int tfm__all_digits(const char *s)
{
    if (!tfm__is_digit(*s))
        return 0;
    while (tfm__is_digit(*s))
        s++;
    return *s == '\0';
}

static inline tfm__number tfm__parse_int64(const char *s, int64_t *out)
{
    if (!tfm__all_digits(s + (*s == '-')))
        return TFM__NUMBER_SYNTAX;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    if (errno == ERANGE)
        return TFM__NUMBER_RANGE;
    *out = (int64_t)v;
    return TFM__NUMBER_OK;
}

static inline tfm__number tfm__parse_uint64(const char *s, uint64_t *out)
{
    if (!tfm__all_digits(s))
        return TFM__NUMBER_SYNTAX;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE)
        return TFM__NUMBER_RANGE;
    *out = (uint64_t)v;
    return TFM__NUMBER_OK;
}

static inline tfm__number tfm__parse_double(const char *s, double *out)
{
    const char *p = s + (*s == '-');
    int digits = 0;
    while (tfm__is_digit(*p))
        p++, digits++;
    if (*p == '.')
        for (p++; tfm__is_digit(*p); p++)
            digits++;
    if (digits == 0)
        return TFM__NUMBER_SYNTAX;
    if (*p == 'e' || *p == 'E') {
        p++;
        p += *p == '+' || *p == '-';
        if (!tfm__is_digit(*p))
            return TFM__NUMBER_SYNTAX;
        while (tfm__is_digit(*p))
            p++;
    }
    if (*p != '\0')
        return TFM__NUMBER_SYNTAX;
    double v = strtod(s, NULL);
    if (!isfinite(v))
        return TFM__NUMBER_RANGE;
    *out = v;
    return TFM__NUMBER_OK;
}

#endif

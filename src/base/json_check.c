/* NUL inside JSON strings (json_check.h).
 *
 * The JSON text, valid by now, is scanned for its string tokens in order;
 * a pre-order walk of the parsed tree (member key, then its value) meets
 * the strings in the same order, which names the member the bad string
 * belongs to. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"

/* Member names in messages, cut to this many bytes. */
#define QUOTED "\"%.100s\""

/* Ordinal (from 0) of the first string token of the JSON text[0..n-1]
 * that holds the escape \u0000 or a raw 0 byte, or -1 when none does. */
static long nul_string(const char *text, size_t n)
{
    long ordinal = -1;
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_string) {
            if (text[i] == '"') {
                in_string = 1;
                ordinal++;
            }
        } else if (text[i] == '"') {
            in_string = 0;
        } else if (text[i] == '\0') {
            return ordinal;
        } else if (text[i] == '\\') {
            if (n - i > 5 && memcmp(text + i + 1, "u0000", 5) == 0)
                return ordinal;
            i++; /* the escaped character (\uXXXX's digits hold no quote) */
        }
    }
    return -1;
}

/* Walks item's strings in document order, counting in *k; returns the
 * member (key owner) whose key (*is_key) or value holds string `target`. */
static const cJSON *string_owner(const cJSON *item, const cJSON *member,
                                 long target, long *k, int *is_key)
{
    if (cJSON_IsString(item) && (*k)++ == target) {
        *is_key = 0;
        return member;
    }
    for (const cJSON *c = item->child; c; c = c->next) {
        if (cJSON_IsObject(item) && (*k)++ == target) {
            *is_key = 1;
            return c;
        }
        const cJSON *found = string_owner(
            c, cJSON_IsObject(item) ? c : member, target, k, is_key);
        if (found)
            return found;
    }
    return NULL;
}

tfm_status tfm__json_check_nul(const char *text, size_t n, const cJSON *root,
                               const char *what)
{
    long target = nul_string(text, n), k = 0;
    if (target < 0)
        return TFM_OK;
    int is_key = 0;
    const cJSON *m = string_owner(root, NULL, target, &k, &is_key);
    const char *sep = what ? ": " : "";
    what = what ? what : "";
    if (m && m->string && is_key)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s%sthe name or key " QUOTED " holds an escaped "
                         "NUL (\\u0000): it would be cut there",
                         what, sep, m->string);
    if (m && m->string)
        return tfm__fail(TFM_ERR_FORMAT,
                         "%.200s%sthe value of " QUOTED " holds an escaped "
                         "NUL (\\u0000): it would be cut there",
                         what, sep, m->string);
    return tfm__fail(TFM_ERR_FORMAT,
                     "%.200s%sa string holds an escaped NUL (\\u0000): it "
                     "would be cut there", what, sep);
}

/* ---- Parsing with the checks ------------------------------------------ */

static int compare_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* TFM_OK, or TFM_ERR_FORMAT naming a key that appears twice in one object
 * at or below item (or out-of-memory). */
static tfm_status check_duplicates(const cJSON *item, const char *what)
{
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        n++;
        tfm_status st = check_duplicates(c, what);
        if (st != TFM_OK)
            return st;
    }
    if (!cJSON_IsObject(item) || n < 2)
        return TFM_OK;
    const char **keys = tfm__malloc(n * sizeof *keys);
    if (!keys)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "%.200s: cannot allocate "
                         "%zu keys", what, n);
    size_t k = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        keys[k++] = c->string;
    qsort(keys, n, sizeof *keys, compare_keys);
    tfm_status st = TFM_OK;
    for (k = 1; k < n && st == TFM_OK; k++)
        if (strcmp(keys[k - 1], keys[k]) == 0)
            st = tfm__fail(TFM_ERR_FORMAT,
                           "%.200s: the key " QUOTED " appears twice in one "
                           "object (JSON readers disagree on which value "
                           "counts)", what, keys[k]);
    tfm__free(keys);
    return st;
}

/* TFM_OK, or TFM_ERR_FORMAT naming the member of a number at or below
 * item that is not finite: JSON has no infinity or NaN, but cJSON reads a
 * number past the double range (1e400) as infinity. */
static tfm_status check_finite(const cJSON *item, const char *what)
{
    for (const cJSON *c = item->child; c; c = c->next) {
        if (cJSON_IsNumber(c) && !isfinite(c->valuedouble))
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s: the number of " QUOTED " is out of the "
                             "range of a double", what,
                             c->string ? c->string : "(array element)");
        tfm_status st = check_finite(c, what);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

tfm_status tfm__json_parse_object(const char *text, size_t n,
                                  const char *what, cJSON **root)
{
    tfm_status valid = tfm__check_utf8(text, n, what ? what : "JSON");
    if (valid != TFM_OK)
        return valid;
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!r) {
        const size_t at = end && end >= text && end <= text + n
                              ? (size_t)(end - text) : 0;
        return tfm__fail(TFM_ERR_FORMAT, "%.200s: not valid JSON (truncated "
                         "or malformed near byte %zu)", what, at);
    }
    tfm_status st = TFM_OK;
    for (const char *p = end; p < text + n && st == TFM_OK; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            st = tfm__fail(TFM_ERR_FORMAT,
                           "%.200s: not valid JSON: bytes after the JSON "
                           "value at byte %zu", what, (size_t)(p - text));
    if (st == TFM_OK && !cJSON_IsObject(r))
        st = tfm__fail(TFM_ERR_FORMAT, "%.200s: not a JSON object", what);
    if (st == TFM_OK)
        st = tfm__json_check_nul(text, n, r, what);
    if (st == TFM_OK)
        st = check_duplicates(r, what);
    if (st == TFM_OK)
        st = check_finite(r, what);
    if (st != TFM_OK) {
        cJSON_Delete(r);
        return st;
    }
    *root = r;
    return TFM_OK;
}

tfm_status tfm__json_read_object(const char *path, size_t max_bytes,
                                 cJSON **root)
{
    char *text;
    size_t len;
    tfm_status st = tfm__read_file(path, max_bytes, &text, &len);
    if (st != TFM_OK)
        return st;
    st = tfm__json_parse_object(text, len, path, root);
    tfm__free(text);
    return st;
}

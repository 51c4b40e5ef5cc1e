/* transformer-generate's JSON files (generation_config.json, config.json,
 * preprocessor_config.json): the whole file parsed by cJSON, refused
 * unless it is one JSON object with nothing but white space after it (the
 * library's readers, src/base/json_check.c, refuse the same, and a key
 * twice in one object, a number past the double range, bytes that are
 * not UTF-8 and NUL, raw or escaped).  Static
 * helper for the programs that include it, after cli_args.h. */
#ifndef TFM_TOOLS_JSON_FILE_H
#define TFM_TOOLS_JSON_FILE_H

#include <cJSON.h>
#include <math.h>

/* 1 when a number at or below item is not finite: cJSON reads a number
 * past the double range (1e400) as infinity, which JSON cannot hold (the
 * library's readers refuse it too). */
static int json_has_infinite(const cJSON *item)
{
    for (const cJSON *c = item->child; c; c = c->next)
        if ((cJSON_IsNumber(c) && !isfinite(c->valuedouble)) ||
            json_has_infinite(c))
            return 1;
    return 0;
}

static int json_key_order(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that appears twice in one object at or below item, or
 * NULL (cJSON's lookups find the first of two, Python's json the last:
 * the library's readers and the Python layer refuse it; *oom set when the
 * check could not allocate). */
static const char *json_duplicate_key(const cJSON *item, int *oom)
{
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        n++;
        const char *k = json_duplicate_key(c, oom);
        if (k || *oom)
            return k;
    }
    if (!cJSON_IsObject(item) || n < 2)
        return NULL;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        *oom = 1;
        return NULL;
    }
    size_t k = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        keys[k++] = c->string;
    qsort(keys, n, sizeof *keys, json_key_order);
    const char *twice = NULL;
    for (k = 1; k < n && !twice; k++)
        if (strcmp(keys[k - 1], keys[k]) == 0)
            twice = keys[k];
    free(keys);
    return twice;
}

/* What the library's JSON readers refuse in the text and cJSON takes:
 * bytes that are not UTF-8, a NUL byte, a "\u0000" escape in a string
 * (cJSON would cut the string there); NULL when none, else what, with
 * its byte offset in *at. */
static const char *json_text_problem(const char *t, size_t n, size_t *at)
{
    int in_string = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)t[i];
        *at = i;
        if (c == 0)
            return "a NUL byte";
        if (c >= 0x80) {
            uint32_t cp;
            const int k = utf8_next((const unsigned char *)t + i, n - i, &cp);
            if (!k)
                return "bytes that are not UTF-8";
            i += (size_t)k - 1;
        } else if (c == '"') {
            in_string = !in_string;
        } else if (in_string && c == '\\') {
            if (n - i >= 6 && memcmp(t + i + 1, "u0000", 5) == 0)
                return "\"\\u0000\" (NUL) in a string";
            i++;   /* the escaped character */
        }
    }
    return NULL;
}

/* The object in file path into *root (cJSON_Delete it); 1 with a message
 * printed when the file cannot be read or is not one JSON object. */
static int read_json_object(const char *path, cJSON **root)
{
    size_t n = 0;
    char *text = read_file_max(path, CLI_MAX_JSON_FILE, &n);
    if (!text)
        return 1;
    size_t at = 0;
    const char *problem = json_text_problem(text, n, &at);
    if (problem) {
        free(text);
        return fail("%s holds %s at byte %zu", path, problem, at);
    }
    const char *end = NULL;
    cJSON *r = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    while (r && end < text + n && *end && strchr(" \t\r\n", *end))
        end++;
    const int trailing = r && end < text + n;
    free(text);
    if (!cJSON_IsObject(r) || trailing) {
        cJSON_Delete(r);
        return fail("%s is not a JSON object%s", path,
                    trailing ? " (bytes after it)" : "");
    }
    int oom = 0;
    const char *twice = json_duplicate_key(r, &oom);
    if (twice || oom) {
        const int rc = oom ? fail("%s: out of memory checking its keys", path)
                           : fail("%s: the key \"%.100s\" appears twice in "
                                  "one object", path, twice);
        cJSON_Delete(r);
        return rc;
    }
    if (json_has_infinite(r)) {
        cJSON_Delete(r);
        return fail("%s holds a number out of the range of a double", path);
    }
    *root = r;
    return 0;
}

#endif

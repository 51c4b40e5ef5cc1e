/* transformer-generate's JSON files (generation_config.json, config.json,
 * preprocessor_config.json): the whole file parsed by cJSON, refused
 * unless it is one JSON object with nothing but white space after it (the
 * library's readers, src/json_check.c, refuse the same; a key twice in
 * one object is left to them: it needs their internal checker).  Static
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

/* The object in file path into *root (cJSON_Delete it); 1 with a message
 * printed when the file cannot be read or is not one JSON object. */
static int read_json_object(const char *path, cJSON **root)
{
    size_t n = 0;
    char *text = read_file_max(path, CLI_MAX_JSON_FILE, &n);
    if (!text)
        return 1;
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
    if (json_has_infinite(r)) {
        cJSON_Delete(r);
        return fail("%s holds a number out of the range of a double", path);
    }
    *root = r;
    return 0;
}

#endif

/* The weight files of a hub checkpoint directory (hub_family.h): JSON
 * files of the directory, model.safetensors or the shards named by
 * model.safetensors.index.json's "weight_map", opened, searched by tensor
 * name and closed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "base/file.h"
#include "base/json_check.h"
#include "formats/hub/hub_family.h"

#define PATH_SIZE 4096

/* Whether something other than a directory is at path (after following
 * links): a FIFO or a device named like the file is taken for it, so that
 * opening it (base/file.c's door, without blocking) refuses it by name
 * rather than the file being reported missing. */
static int is_file(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && !S_ISDIR(s.st_mode);
}

/* dir + "/" + name into buf (PATH_SIZE bytes); a failure when too long. */
static tfm_status join(char *buf, const char *dir, const char *name)
{
    size_t n = strlen(dir);
    int w = snprintf(buf, PATH_SIZE, "%s%s%s", dir,
                     n && dir[n - 1] != '/' ? "/" : "", name);
    if (w < 0 || w >= PATH_SIZE)
        return tfm__fail(TFM_ERR_IO, "%.200s/%.100s: path too long", dir,
                         name);
    return TFM_OK;
}

/* ---- JSON files ------------------------------------------------------- */

/* Parses the JSON object in file dir/name into *root. */
tfm_status tfm__hub_read_json(const char *dir, const char *name, cJSON **root)
{
    char path[PATH_SIZE];
    tfm_status st = join(path, dir, name);
    if (st != TFM_OK)
        return st;
    return tfm__json_read_object(path, TFM__FILE_MAX_CONFIG, root);
}

void tfm__hub_shards_close(tfm__hub_shards *s)
{
    for (int i = 0; i < s->n; i++) {
        tfm_safetensors_close(s->files[i]);
        tfm__free(s->names[i]);
    }
    tfm__free(s->files);
    tfm__free(s->names);
    memset(s, 0, sizeof *s);
}

/* qsort / bsearch order of an array of strings. */
static int by_string(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends file name to s (names come sorted, so a repeat is the last one
 * added), with room for cap entries. */
static tfm_status shards_add(tfm__hub_shards *s, const char *name)
{
    if (s->n > 0 && strcmp(s->names[s->n - 1], name) == 0)
        return TFM_OK;
    /* A shard is a file of the directory itself. */
    if (!*name || strchr(name, '/') || strcmp(name, ".") == 0 ||
        strcmp(name, "..") == 0)
        return tfm__fail(TFM_ERR_FORMAT,
                         "model.safetensors.index.json names the shard "
                         TFM__HUB_QUOTED ", which is not a file name in the "
                         "checkpoint directory", name);
    const size_t len = strlen(name) + 1;
    char *copy = tfm__malloc(len);
    if (!copy)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(copy, name, len);
    s->names[s->n++] = copy;
    return TFM_OK;
}

/* The shard file names: "model.safetensors", or the distinct values of
 * the index's "weight_map" (each entry checked to be in its shard once
 * the shards are open, in tfm__hub_shards_check_index). */
tfm_status tfm__hub_shards_list(const char *dir, tfm__hub_shards *s,
                                cJSON **index)
{
    char path[PATH_SIZE];
    tfm_status st = join(path, dir, "model.safetensors");
    if (st != TFM_OK)
        return st;
    int cap = 1;
    const cJSON *map = NULL;
    *index = NULL;
    if (!is_file(path)) {
        if ((st = join(path, dir, "model.safetensors.index.json")))
            return st;
        if (!is_file(path)) {
            char bin[PATH_SIZE];
            if ((st = join(bin, dir, "pytorch_model.bin")))
                return st;
            if (is_file(bin))
                return tfm__fail(TFM_ERR_UNSUPPORTED,
                                 "%.200s holds pytorch_model.bin (a pickle) "
                                 "but no model.safetensors: this library "
                                 "reads safetensors weights only (convert "
                                 "with transformers' save_pretrained("
                                 "safe_serialization=True))", dir);
            return tfm__fail(TFM_ERR_IO,
                             "%.200s: no model.safetensors or "
                             "model.safetensors.index.json in this "
                             "directory", dir);
        }
        if ((st = tfm__hub_read_json(dir, "model.safetensors.index.json",
                                     index)))
            return st;
        map = cJSON_GetObjectItemCaseSensitive(*index, "weight_map");
        if (!cJSON_IsObject(map) || !map->child)
            return tfm__fail(TFM_ERR_FORMAT,
                             "model.safetensors.index.json has no "
                             "\"weight_map\" object of tensor names to "
                             "shard files");
        cap = cJSON_GetArraySize(map);
    }
    s->names = tfm__calloc((size_t)cap, sizeof *s->names);
    s->files = tfm__calloc((size_t)cap, sizeof *s->files);
    if (!s->names || !s->files)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!map)
        return shards_add(s, "model.safetensors");
    /* Sorted, then added once each: a weight_map of a million distinct
     * names is O(n log n), not a quadratic scan (a 16 MiB index used to
     * take hours).  s->names ends sorted (bsearch below). */
    const char **all = tfm__calloc((size_t)cap, sizeof *all);
    if (!all)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int n = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        if (!cJSON_IsString(e)) {
            tfm__free(all);
            return tfm__fail(TFM_ERR_FORMAT,
                             "model.safetensors.index.json \"weight_map\" "
                             "entry " TFM__HUB_QUOTED " is not a file name",
                             e->string);
        }
        all[n++] = e->valuestring;
    }
    qsort(all, (size_t)n, sizeof *all, by_string);
    for (int i = 0; i < n && st == TFM_OK; i++)
        st = shards_add(s, all[i]);
    tfm__free(all);
    return st;
}

/* Opens (maps and validates) every shard. */
tfm_status tfm__hub_shards_open(const char *dir, tfm__hub_shards *s)
{
    char path[PATH_SIZE];
    for (int i = 0; i < s->n; i++) {
        tfm_status st = join(path, dir, s->names[i]);
        if (st == TFM_OK)
            st = tfm_safetensors_open(path, &s->files[i]);
        if (st != TFM_OK)
            return st;
    }
    return TFM_OK;
}

/* The shard holding tensor name, or -1. */
int tfm__hub_shards_find(const tfm__hub_shards *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (tfm_safetensors_info(s->files[i], name, NULL, NULL, NULL) ==
            TFM_OK)
            return i;
    return -1;
}

/* Whether any shard holds a tensor whose name begins with prefix: how a
 * checkpoint says it saved the base model under "transformer." / "model."
 * (decided on every name, so that a missing embedding is still named with
 * the prefix the rest of the checkpoint uses). */
int tfm__hub_shards_any_prefixed(const tfm__hub_shards *s, const char *prefix)
{
    const size_t n = strlen(prefix);
    for (int f = 0; f < s->n; f++)
        for (int64_t k = 0; k < tfm_safetensors_count(s->files[f]); k++)
            if (strncmp(tfm_safetensors_name(s->files[f], k), prefix, n) == 0)
                return 1;
    return 0;
}

/* The index decides which shard a tensor is read from, so it must name
 * exactly what the shards hold: every "weight_map" entry is a tensor of
 * the shard it names, and every tensor of a shard is in "weight_map" under
 * that shard; a name stored in two shards is refused whatever the index
 * says (transformers reads the shards one after the other, so the last
 * would win there, the first here).  Names within one shard are unique
 * (the safetensors reader refuses a name given twice). */
tfm_status tfm__hub_shards_check_index(const tfm__hub_shards *s,
                                       const cJSON *index)
{
    for (int f = 0; f < s->n; f++)
        for (int64_t k = 0; k < tfm_safetensors_count(s->files[f]); k++) {
            const char *name = tfm_safetensors_name(s->files[f], k);
            for (int g = f + 1; g < s->n; g++)
                if (tfm_safetensors_info(s->files[g], name, NULL, NULL,
                                         NULL) == TFM_OK)
                    return tfm__fail(
                        TFM_ERR_FORMAT,
                        "tensor " TFM__HUB_QUOTED " is stored in two shards, "
                        TFM__HUB_QUOTED " and " TFM__HUB_QUOTED
                        ": refused (which one is meant is not known)",
                        name, s->names[f], s->names[g]);
        }
    if (!index)
        return TFM_OK;
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map");
    /* the entries' names, sorted: each lookup below O(log n), not a scan
     * of the whole map per tensor */
    const int n_map = cJSON_GetArraySize(map);
    const char **keys = tfm__calloc((size_t)n_map, sizeof *keys);
    if (!keys)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    int n_keys = 0;
    for (const cJSON *e = map->child; e; e = e->next)
        keys[n_keys++] = e->string;
    qsort(keys, (size_t)n_keys, sizeof *keys, by_string);
    tfm_status st = TFM_OK;
    for (const cJSON *e = map->child; e && st == TFM_OK; e = e->next) {
        const char **at = bsearch(&e->valuestring, s->names, (size_t)s->n,
                                  sizeof *s->names, by_string);
        const int i = (int)(at - (const char **)s->names);
        if (tfm_safetensors_info(s->files[i], e->string, NULL, NULL, NULL) !=
            TFM_OK)
            st = tfm__fail(
                TFM_ERR_FORMAT,
                "model.safetensors.index.json puts tensor " TFM__HUB_QUOTED
                " in " TFM__HUB_QUOTED ", which lacks it",
                e->string, e->valuestring);
    }
    for (int f = 0; f < s->n && st == TFM_OK; f++)
        for (int64_t k = 0;
             k < tfm_safetensors_count(s->files[f]) && st == TFM_OK; k++) {
            const char *name = tfm_safetensors_name(s->files[f], k);
            if (!bsearch(&name, keys, (size_t)n_keys, sizeof *keys,
                         by_string))
                st = tfm__fail(
                    TFM_ERR_FORMAT,
                    "shard " TFM__HUB_QUOTED " holds tensor " TFM__HUB_QUOTED
                    ", which model.safetensors.index.json does not list",
                    s->names[f], name);
            /* stored once (above) and listed, each entry in its shard:
             * so listed under this shard. */
        }
    tfm__free(keys);
    return st;
}

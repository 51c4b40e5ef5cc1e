/* gguf_dump FILE: the GGUF reader's view of a file (src/formats/gguf.h),
 * one line per item, for tests/gguf_reference.py to compare with gguf-py's
 * GGUFReader:
 *   kv <key> <type> <value>          scalars; strings as hex bytes
 *   kv <key> array <elem type> <count>, then one "  <value>" per element
 *   tensor <name> <ggml type> <ne0,ne1,...> <file offset> <bytes> <fnv1a64>
 * Integers print exactly, floats with %.17g of their double value.  On a
 * refused file: "error <status> <message>" and exit status 1. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "formats/gguf.h"

static void print_hex(const char *p, uint64_t n)
{
    if (n == 0)
        fputs("-", stdout);
    for (uint64_t i = 0; i < n; i++)
        printf("%02x", (unsigned char)p[i]);
}

static int is_float(int t)
{
    return t == TFM__GGUF_F32 || t == TFM__GGUF_F64;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf_dump FILE\n");
        return 2;
    }
    tfm__gguf *g = NULL;
    tfm_status st = tfm__gguf_open(argv[1], &g);
    if (st != TFM_OK) {
        printf("error %d %s\n", (int)st, tfm_last_error());
        return 1;
    }
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32",
        "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    for (int64_t i = 0; i < tfm__gguf_n_kv(g); i++) {
        tfm__gguf_str k;
        int type;
        if (tfm__gguf_kv_at(g, i, &k, &type) != TFM_OK)
            return 3;
        char key[1024];
        snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
        printf("kv %s %s ", key, names[type]);
        tfm__gguf_str s;
        double d;
        int64_t i64;
        uint64_t u64;
        if (type == TFM__GGUF_STRING) {
            tfm__gguf_get_str(g, key, &s);
            print_hex(s.ptr, s.len);
        } else if (type == TFM__GGUF_ARRAY) {
            int et;
            uint64_t n;
            tfm__gguf_get_array(g, key, &et, &n);
            printf("%s %" PRIu64, names[et], n);
            for (uint64_t j = 0; j < n; j++) {
                fputs("\n  ", stdout);
                if (et == TFM__GGUF_STRING) {
                    tfm__gguf_array_str(g, key, j, &s);
                    print_hex(s.ptr, s.len);
                } else {
                    tfm__gguf_array_number(g, key, j, &d);
                    printf(is_float(et) ? "%.17g" : "%.0f", d);
                }
            }
        } else if (type == TFM__GGUF_BOOL) {
            int b;
            tfm__gguf_get_bool(g, key, &b);
            printf("%d", b);
        } else if (is_float(type)) {
            tfm__gguf_get_number(g, key, &d);
            printf("%.17g", d);
        } else if (tfm__gguf_get_u64(g, key, &u64) == TFM_OK) {
            printf("%" PRIu64, u64);
        } else {
            tfm__gguf_get_i64(g, key, &i64);
            printf("%" PRId64, i64);
        }
        putchar('\n');
    }
    size_t size;
    const unsigned char *base = tfm__gguf_map(g, &size);
    for (int64_t i = 0; i < tfm__gguf_n_tensors(g); i++) {
        const tfm__gguf_tensor *t = tfm__gguf_tensor_at(g, i);
        printf("tensor %s %" PRIu32 " ", t->name, t->ggml_type);
        for (int d = 0; d < t->n_dims; d++)
            printf(d ? ",%" PRId64 : "%" PRId64, t->ne[d]);
        uint64_t h = 0xcbf29ce484222325ull;
        const unsigned char *p = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++)
            h = (h ^ p[k]) * 0x100000001b3ull;
        printf(" %zu %" PRIu64 " %016" PRIx64 "\n",
               (size_t)(p - base), t->nbytes, h);
    }
    tfm__gguf_close(g);
    return 0;
}

/*
 * Loading libtransformer at run time with dlopen(), as a plugin host or a
 * language runtime would, and running a multi-head attention forward pass.
 *
 *   cc -I/usr/include dlopen_mha.c -ldl -o dlopen_mha   (no -ltransformer)
 *   ./dlopen_mha                     loads "libtransformer.so.1" by soname
 *   ./dlopen_mha /path/to/libtransformer.so.1
 *
 * The headers are used for the types and the version macros only; every
 * function comes from dlsym().  The program checks that the library it
 * loaded has the major version it was written for (same soname, same ABI:
 * docs/ABI.md) and at least the version that introduced the functions it
 * uses, then compares the output with PyTorch's.
 *
 * Exit status: 0 when the output matches, 1 otherwise.
 */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include <transformer/transformer.h>

#define STR_(x) #x
#define STR(x) STR_(x)
/* "libtransformer.so.1": the soname follows the major version. */
#define SONAME "libtransformer.so." STR(TFM_VERSION_MAJOR)
/* Every function below exists since 1.0.0. */
#define NEEDED_VERSION 10000

/* ---- The functions this program uses, as it was compiled --------------- */
typedef int (*version_number_fn)(void);
typedef const char *(*version_string_fn)(void);
typedef const char *(*last_error_fn)(void);
typedef tfm_status (*tensor_wrap_fn)(int, const int64_t *, float *,
                                     tfm_tensor **);
typedef void (*tensor_free_fn)(tfm_tensor *);
typedef tfm_status (*mha_create_fn)(int64_t, int64_t, int64_t, int64_t, int,
                                    tfm_module **);
typedef tfm_status (*set_parameter_fn)(tfm_module *, const char *,
                                       const tfm_tensor *);
typedef tfm_status (*mha_forward_fn)(const tfm_module *, const tfm_tensor *,
                                     const tfm_tensor *, const tfm_tensor *,
                                     const tfm_attention_masks *,
                                     tfm_tensor *, tfm_tensor *);
typedef void (*module_free_fn)(tfm_module *);

#if defined(__GNUC__)
/* The pointer types above must be the headers' own: a mismatch here is an
 * error at compile time instead of a crash at run time. */
#define SAME_TYPE(fn, type) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), \
                   #fn " does not match " #type)
SAME_TYPE(tfm_version_number, version_number_fn);
SAME_TYPE(tfm_version_string, version_string_fn);
SAME_TYPE(tfm_last_error, last_error_fn);
SAME_TYPE(tfm_tensor_wrap, tensor_wrap_fn);
SAME_TYPE(tfm_tensor_free, tensor_free_fn);
SAME_TYPE(tfm_mha_create, mha_create_fn);
SAME_TYPE(tfm_module_set_parameter, set_parameter_fn);
SAME_TYPE(tfm_mha_forward, mha_forward_fn);
SAME_TYPE(tfm_module_free, module_free_fn);
#endif

static struct {
    version_number_fn version_number;
    version_string_fn version_string;
    last_error_fn last_error;
    tensor_wrap_fn tensor_wrap;
    tensor_free_fn tensor_free;
    mha_create_fn mha_create;
    set_parameter_fn set_parameter;
    mha_forward_fn mha_forward;
    module_free_fn module_free;
} tfm;

/* dlsym() returns void *; POSIX guarantees that it holds a function's
 * address, and the dlsym(3) manual's idiom stores it through a void **.
 * Returns 0, naming the missing symbol, when one is not there. */
static int resolve(void *lib)
{
#define LOAD(field, symbol)                                                 \
    do {                                                                    \
        *(void **)&tfm.field = dlsym(lib, #symbol);                         \
        if (tfm.field == NULL) {                                            \
            fprintf(stderr, "dlsym(%s): %s\n", #symbol, dlerror());         \
            return 0;                                                       \
        }                                                                   \
    } while (0)
    LOAD(version_number, tfm_version_number);
    LOAD(version_string, tfm_version_string);
    LOAD(last_error, tfm_last_error);
    LOAD(tensor_wrap, tfm_tensor_wrap);
    LOAD(tensor_free, tfm_tensor_free);
    LOAD(mha_create, tfm_mha_create);
    LOAD(set_parameter, tfm_module_set_parameter);
    LOAD(mha_forward, tfm_mha_forward);
    LOAD(module_free, tfm_module_free);
#undef LOAD
    return 1;
}

/* ---- The forward pass ---------------------------------------------------
 * nn.MultiheadAttention(4, 2, batch_first=True) with the weights below,
 * self-attention on x [2, 3, 4] with a causal mask.  The expected output
 * is PyTorch's (float64):
 *
 *   f = lambda n, g: torch.tensor([g(i) for i in range(n)], dtype=torch.float64)
 *   x = f(24, lambda i: ((i*5) % 13 - 6) / 8).reshape(2, 3, 4)
 *   m = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64)
 *   m.in_proj_weight = f(48, lambda i: ((i*7) % 11 - 5) / 10).reshape(12, 4)
 *   m.in_proj_bias   = f(12, lambda i: (i % 5 - 2) / 20)
 *   m.out_proj.weight = f(16, lambda i: ((i*3) % 7 - 3) / 8).reshape(4, 4)
 *   m.out_proj.bias   = f(4, lambda i: i * 0.05 - 0.1)
 *   y, _ = m(x, x, x, attn_mask=torch.triu(torch.ones(3, 3, dtype=bool), 1))
 */
enum { B = 2, L = 3, D = 4, H = 2 };

static const float expected[B * L * D] = {
    -0.18281250f, 0.24375000f, -0.27031250f, -0.18281250f,
    -0.17840980f, -0.06932980f, -0.00972540f, 0.09002947f,
    -0.16734383f, -0.01568992f, -0.05439810f, 0.04215476f,
    -0.15468750f, -0.04531250f, 0.11875000f, -0.01250000f,
    -0.15059478f, 0.04708936f, -0.02669740f, -0.05458479f,
    -0.14531171f, -0.00108376f, 0.03755690f, -0.02601489f,
};

/* Wraps data as a tensor and sets it as the named parameter. */
static int set_parameter(tfm_module *mha, const char *name, int rank,
                         const int64_t *shape, float *data)
{
    tfm_tensor *t = NULL;
    tfm_status st = tfm.tensor_wrap(rank, shape, data, &t);
    if (st == TFM_OK)
        st = tfm.set_parameter(mha, name, t);
    tfm.tensor_free(t);
    if (st != TFM_OK)
        fprintf(stderr, "%s: %s\n", name, tfm.last_error());
    return st == TFM_OK;
}

static int run_attention(void)
{
    float x[B * L * D], y[B * L * D] = { 0 };
    float w_in[3 * D * D], b_in[3 * D], w_out[D * D], b_out[D];
    for (int i = 0; i < B * L * D; i++) x[i] = (float)((i * 5) % 13 - 6) / 8;
    for (int i = 0; i < 3 * D * D; i++) w_in[i] = (float)((i * 7) % 11 - 5) / 10;
    for (int i = 0; i < 3 * D; i++) b_in[i] = (float)(i % 5 - 2) / 20;
    for (int i = 0; i < D * D; i++) w_out[i] = (float)((i * 3) % 7 - 3) / 8;
    for (int i = 0; i < D; i++) b_out[i] = (float)(i * 0.05 - 0.1);

    const int64_t act_shape[3] = { B, L, D };
    const int64_t w_in_shape[2] = { 3 * D, D }, b_in_shape[1] = { 3 * D };
    const int64_t w_out_shape[2] = { D, D }, b_out_shape[1] = { D };

    tfm_module *mha = NULL;
    tfm_tensor *in = NULL, *out = NULL;
    int ok = 0;
    if (tfm.mha_create(D, H, 0, 0, 1, &mha) != TFM_OK) {
        fprintf(stderr, "tfm_mha_create: %s\n", tfm.last_error());
        return 0;
    }
    if (!set_parameter(mha, "in_proj_weight", 2, w_in_shape, w_in) ||
        !set_parameter(mha, "in_proj_bias", 1, b_in_shape, b_in) ||
        !set_parameter(mha, "out_proj.weight", 2, w_out_shape, w_out) ||
        !set_parameter(mha, "out_proj.bias", 1, b_out_shape, b_out))
        goto done;
    if (tfm.tensor_wrap(3, act_shape, x, &in) != TFM_OK ||
        tfm.tensor_wrap(3, act_shape, y, &out) != TFM_OK) {
        fprintf(stderr, "tfm_tensor_wrap: %s\n", tfm.last_error());
        goto done;
    }
    tfm_attention_masks masks = { .causal = TFM_CAUSAL_TOP_LEFT };
    if (tfm.mha_forward(mha, in, in, in, &masks, out, NULL) != TFM_OK) {
        fprintf(stderr, "tfm_mha_forward: %s\n", tfm.last_error());
        goto done;
    }

    /* float32 against float64: a few 1e-8 apart; a wrong mask, weight
     * layout or head split is off by 1e-2 or more. */
    double worst = 0;
    for (int i = 0; i < B * L * D; i++) {
        double err = fabs((double)y[i] - expected[i]) /
                     fmax(1.0, fabs(expected[i]));
        if (err > worst) worst = err;
    }
    printf("attention output y[0, 0, :] = %.6f %.6f %.6f %.6f\n",
           y[0], y[1], y[2], y[3]);
    printf("largest error against PyTorch: %.2e\n", worst);
    ok = worst <= 1e-5;
done:
    tfm.tensor_free(in);
    tfm.tensor_free(out);
    tfm.module_free(mha);
    return ok;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : SONAME;
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen(%s): %s\n", name, dlerror());
        return 1;
    }
    if (!resolve(lib)) {
        dlclose(lib);
        return 1;
    }

    /* The header this program was compiled with against the library it
     * loaded: same major (same ABI), and new enough for what it uses. */
    int have = tfm.version_number();
    printf("loaded %s: libtransformer %s (%d), compiled against %s\n", name,
           tfm.version_string(), have, TFM_VERSION_STRING);
    if (have / 10000 != TFM_VERSION_MAJOR || have < NEEDED_VERSION) {
        fprintf(stderr, "need libtransformer %d.x >= %d, loaded %d\n",
                TFM_VERSION_MAJOR, NEEDED_VERSION, have);
        dlclose(lib);
        return 1;
    }

    int ok = run_attention();
    dlclose(lib);
    printf("%s\n", ok ? "OK" : "MISMATCH");
    return ok ? 0 : 1;
}

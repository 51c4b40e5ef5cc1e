/* libFuzzer harness: optimizer state files from untrusted bytes
 * (tfm_optimizer_load, src/training/optimizer.c).
 *
 * Input: one mode byte, then the file.  Mode bits 0-1 choose the
 * optimizer over a Linear(3, 2) (parameters "weight" [2, 3] and "bias"
 * [2]): SGD with momentum, Adam, AdamW, AdamW with amsgrad.  The optimizer
 * first takes two steps on fixed gradients, so it holds state of its own;
 * then the input is written to a file and loaded.  Promises:
 *   - refused: a status that says why (not TFM_ERR_NULL_ARGUMENT), a
 *     message, and the optimizer exactly as it was (every state bit for
 *     bit, the lr);
 *   - loaded: every state of every parameter readable, finite, the
 *     second moments (exp_avg_sq, max_exp_avg_sq) not negative, the step
 *     a whole number >= 0, the lr finite and >= 0; one more step keeps
 *     every parameter finite. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

#include "fuzz_files.h"
#include "fuzz_util.h"

static const char *const PARAMS[] = { "weight", "bias" };
static const int64_t NUMEL[] = { 6, 2 };
static const char *const STATES[] = { "momentum_buffer", "exp_avg",
                                      "exp_avg_sq", "max_exp_avg_sq", "step" };
enum { N_PARAMS = 2, N_STATES = 5, MAX_NUMEL = 6 };

/* Every state the optimizer keeps, in a fixed order; absent ones (NOT_FOUND)
 * are marked.  values[p][s] holds up to MAX_NUMEL floats. */
typedef struct snapshot {
    int present[N_PARAMS][N_STATES];
    float values[N_PARAMS][N_STATES][MAX_NUMEL];
    double lr;
} snapshot;

static void take(const tfm_optimizer *opt, snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->lr = tfm_optimizer_get_lr(opt);
    for (int p = 0; p < N_PARAMS; p++)
        for (int k = 0; k < N_STATES; k++) {
            const int is_step = strcmp(STATES[k], "step") == 0;
            int64_t shape[2] = { 2, 3 }; /* weight [2, 3], bias [2] */
            int rank = p == 0 ? 2 : 1;
            if (is_step) {
                rank = 1;
                shape[0] = 1;
            }
            tfm_tensor *t = NULL;
            CHECK(tfm_tensor_create(rank, shape, &t) == TFM_OK);
            tfm_status st = tfm_optimizer_get_state(opt, PARAMS[p], STATES[k], t);
            CHECK(st == TFM_OK || st == TFM_ERR_NOT_FOUND);
            if (st == TFM_OK) {
                s->present[p][k] = 1;
                memcpy(s->values[p][k], tfm_tensor_data(t),
                       (size_t)tfm_tensor_numel(t) * sizeof(float));
            }
            tfm_tensor_free(t);
        }
}

static void check_valid(const snapshot *s)
{
    CHECK(isfinite(s->lr) && s->lr >= 0);
    for (int p = 0; p < N_PARAMS; p++)
        for (int k = 0; k < N_STATES; k++) {
            if (!s->present[p][k])
                continue;
            const int64_t n = strcmp(STATES[k], "step") == 0 ? 1 : NUMEL[p];
            for (int64_t i = 0; i < n; i++) {
                const float v = s->values[p][k][i];
                CHECK(isfinite(v));
                if (strcmp(STATES[k], "exp_avg_sq") == 0 ||
                    strcmp(STATES[k], "max_exp_avg_sq") == 0)
                    CHECK(v >= 0.0f);
                if (strcmp(STATES[k], "step") == 0)
                    CHECK(v >= 0.0f && v == floorf(v));
            }
        }
}

/* Fixed gradients, then one step. */
static void step(tfm_module *m, tfm_optimizer *opt, float scale)
{
    for (int p = 0; p < N_PARAMS; p++) {
        float *g = NULL;
        CHECK(tfm_module_grad(m, PARAMS[p], &g) == TFM_OK && g != NULL);
        for (int64_t i = 0; i < NUMEL[p]; i++)
            g[i] = scale * (float)(i + 1 - 2 * p);
    }
    CHECK(tfm_optimizer_step(opt) == TFM_OK);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const tfm_optimizer_kind KINDS[] = {
        TFM_OPTIMIZER_SGD, TFM_OPTIMIZER_ADAM, TFM_OPTIMIZER_ADAMW,
        TFM_OPTIMIZER_ADAMW
    };
    const unsigned mode = data[0] & 3;
    tfm_module *m = NULL;
    CHECK(tfm_linear_create(3, 2, 1, &m) == TFM_OK);
    CHECK(tfm_module_train(m, 1) == TFM_OK);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, KINDS[mode]);
    if (mode == 0)
        o.momentum = 0.9;
    if (mode == 3)
        o.amsgrad = 1;
    tfm_optimizer *opt = NULL;
    CHECK(tfm_optimizer_create(m, &o, &opt) == TFM_OK);
    step(m, opt, 0.5f);
    step(m, opt, -0.25f);

    files_put("optimizer.safetensors", data + 1, size - 1);
    char path[512];
    files_path(path, sizeof path, "optimizer.safetensors");
    snapshot before, after;
    take(opt, &before);
    tfm_status st = tfm_optimizer_load(opt, path);
    take(opt, &after);
    if (st != TFM_OK) {
        CHECK(st != TFM_ERR_NULL_ARGUMENT);
        CHECK(tfm_last_error()[0] != '\0');
        CHECK(memcmp(&before, &after, sizeof before) == 0);
    } else {
        check_valid(&after);
        step(m, opt, 1.0f);
        for (int p = 0; p < N_PARAMS; p++) {
            float *w = NULL;
            CHECK(tfm_module_parameter_data(m, PARAMS[p], &w) == TFM_OK);
            for (int64_t i = 0; i < NUMEL[p]; i++)
                CHECK(isfinite(w[i]));
        }
    }
    tfm_optimizer_free(opt);
    tfm_module_free(m);
    return 0;
}

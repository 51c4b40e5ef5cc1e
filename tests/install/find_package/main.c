/* Scaled dot-product attention on a case small enough to check by hand:
 * one query attending to two keys with scores 0 and ln 3 (after the
 * 1/sqrt(d_k) scale), so the weights are 1/4 and 3/4. */
#include <math.h>
#include <stdio.h>
#include <transformer/transformer.h>

int main(void)
{
    /* d_k = 1, scale 1: the logits are q k = 0 and ln 3. */
    float q[1] = { 1.0f };
    float k[2] = { 0.0f, (float)log(3.0) };
    float v[4] = { 4.0f, 0.0f,     /* value of key 0 */
                   0.0f, 8.0f };   /* value of key 1 */
    float out[2] = { 0 }, weights[2] = { 0 };
    int64_t q_shape[4] = { 1, 1, 1, 1 }, k_shape[4] = { 1, 1, 2, 1 };
    int64_t v_shape[4] = { 1, 1, 2, 2 }, o_shape[4] = { 1, 1, 1, 2 };
    int64_t w_shape[4] = { 1, 1, 1, 2 };
    tfm_tensor *tq = NULL, *tk = NULL, *tv = NULL, *to = NULL, *tw = NULL;
    int ok = 0;

    if (tfm_version_number() / 10000 != TFM_VERSION_MAJOR) {
        fprintf(stderr, "header %s, library %s\n", TFM_VERSION_STRING,
                tfm_version_string());
        return 1;
    }
    if (tfm_tensor_wrap(4, q_shape, q, &tq) == TFM_OK &&
        tfm_tensor_wrap(4, k_shape, k, &tk) == TFM_OK &&
        tfm_tensor_wrap(4, v_shape, v, &tv) == TFM_OK &&
        tfm_tensor_wrap(4, o_shape, out, &to) == TFM_OK &&
        tfm_tensor_wrap(4, w_shape, weights, &tw) == TFM_OK &&
        tfm_sdpa(tq, tk, tv, NULL, 1.0f, to, tw) == TFM_OK) {
        /* out = 1/4 (4, 0) + 3/4 (0, 8) = (1, 6) */
        ok = fabsf(weights[0] - 0.25f) < 1e-6f &&
             fabsf(weights[1] - 0.75f) < 1e-6f &&
             fabsf(out[0] - 1.0f) < 1e-5f && fabsf(out[1] - 6.0f) < 1e-5f;
        printf("libtransformer %s: weights %.6f %.6f, output %.6f %.6f: %s\n",
               tfm_version_string(), weights[0], weights[1], out[0], out[1],
               ok ? "OK" : "WRONG");
    } else {
        fprintf(stderr, "error: %s\n", tfm_last_error());
    }
    tfm_tensor_free(tq);
    tfm_tensor_free(tk);
    tfm_tensor_free(tv);
    tfm_tensor_free(to);
    tfm_tensor_free(tw);
    return ok ? 0 : 1;
}

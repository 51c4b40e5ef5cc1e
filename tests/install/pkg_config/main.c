/* LayerNorm of one row, checked against the values worked out by hand:
 * x = (1, 2, 3, 4): mean 2.5, biased variance 1.25, so with eps 0 the
 * output is (x - 2.5) / sqrt(1.25). */
#include <math.h>
#include <stdio.h>
#include <transformer/transformer.h>

int main(void)
{
    float x[4] = { 1, 2, 3, 4 }, y[4] = { 0 };
    int64_t shape[2] = { 1, 4 };
    tfm_module *norm = NULL;
    tfm_tensor *tx = NULL, *ty = NULL;
    int ok = 0;

    if (tfm_version_number() / 10000 != TFM_VERSION_MAJOR) {
        fprintf(stderr, "header %s, library %s\n", TFM_VERSION_STRING,
                tfm_version_string());
        return 1;
    }
    if (tfm_layer_norm_create(4, 0.0f, &norm) == TFM_OK &&
        tfm_tensor_wrap(2, shape, x, &tx) == TFM_OK &&
        tfm_tensor_wrap(2, shape, y, &ty) == TFM_OK &&
        tfm_layer_norm_forward(norm, tx, ty) == TFM_OK) {
        ok = 1;
        for (int i = 0; i < 4; i++)
            ok &= fabs(y[i] - (x[i] - 2.5) / sqrt(1.25)) < 1e-5;
        printf("libtransformer %s: layer norm %.6f %.6f %.6f %.6f: %s\n",
               tfm_version_string(), y[0], y[1], y[2], y[3],
               ok ? "OK" : "WRONG");
    } else {
        fprintf(stderr, "error: %s\n", tfm_last_error());
    }
    tfm_tensor_free(tx);
    tfm_tensor_free(ty);
    tfm_module_free(norm);
    return ok ? 0 : 1;
}

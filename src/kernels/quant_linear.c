/* The matrix product with a stored weight (kernels/quant.h:
 * tfm__linear_stored): W is widened to float32 a panel of rows at a time
 * into the calling thread's scratch, which stays in the L2 cache, and
 * each panel is multiplied by OpenBLAS (base/gemm.h) into its columns of
 * y.  A panel splits the outputs, never the sum over the inputs, so every
 * output is the dot product OpenBLAS computes on the whole widened matrix
 * (tests/test_quant.c checks the bits against tfm__sgemm on it). */
#include <string.h>

#include "base/gemm.h"
#include "base/workspace.h"
#include "kernels/quant.h"

/* A panel's float32 bytes: the best of 16, 32, 64, 128 and 256 KiB
 * measured on Zen 4 (bench/quant_linear_bench.c: larger panels mean
 * fewer, longer sgemv calls); inside Zen 3's 512 KiB and Zen 4's 1 MiB L2
 * next to the stored rows streaming through it. */
#define PANEL_BYTES (256 * 1024)

/* Panels hold a multiple of this many rows (the last one excepted), so
 * OpenBLAS's sgemv groups the rows of a panel as it groups those of the
 * whole matrix. */
#define PANEL_ROWS_ALIGN 16

/* The panel on the stack when the workspace cannot grow: 16 KiB. */
#define STACK_PANEL_FLOATS 4096

/* y[:, 0:rows) (+)= x W_rows^T through panels of p rows in panel. */
static void by_panels(const float *x, int64_t ldx, int64_t n, int64_t in,
                      const tfm__wview *w, float beta, int64_t out,
                      float *y, int64_t ldy, float *panel, int64_t p)
{
    for (int64_t r0 = 0; r0 < out; r0 += p) {
        const int64_t rows = out - r0 < p ? out - r0 : p;
        /* The rows of a view lie back to back: one widening call. */
        tfm__widen_row(w->dtype, w->data + r0 * w->row_bytes, rows * in,
                       panel);
        tfm__sgemm(0, 1, n, rows, in, 1.0f, x, ldx, panel, in, beta, y + r0,
                   ldy);
    }
}

/* The stack fallback for rows longer than the stack panel: each output
 * as a sum over chunks of the inputs (its bits may then differ from the
 * one-panel product's; only after an allocation failure). */
static void by_chunks(const float *x, int64_t ldx, int64_t n, int64_t in,
                      const tfm__wview *w, float beta, int64_t out,
                      float *y, int64_t ldy, float *panel)
{
    const int64_t kc = STACK_PANEL_FLOATS; /* a multiple of TFM__QK */
    for (int64_t r = 0; r < out; r++) {
        const unsigned char *row = w->data + r * w->row_bytes;
        for (int64_t k0 = 0; k0 < in; k0 += kc) {
            const int64_t len = in - k0 < kc ? in - k0 : kc;
            tfm__widen_row(w->dtype,
                           row + tfm__dtype_row_bytes(w->dtype, k0), len,
                           panel);
            tfm__sgemm(0, 1, n, 1, len, 1.0f, x + k0, ldx, panel, len,
                       k0 == 0 ? beta : 1.0f, y + r, ldy);
        }
    }
}

void tfm__linear_stored(const float *x, int64_t ldx, int64_t n, int64_t in,
                        const tfm__wview *w, const float *bias, int64_t out,
                        float *y, int64_t ldy)
{
    if (n <= 0 || out <= 0)
        return;
    float beta = 0.0f;
    if (bias) { /* as tfm__linear: y preloaded with the bias, beta 1 */
        for (int64_t i = 0; i < n; i++)
            memcpy(y + i * ldy, bias, (size_t)out * sizeof(float));
        beta = 1.0f;
    }
    if (w->dtype == TFM_DTYPE_F32) {
        tfm__sgemm(0, 1, n, out, in, 1.0f, x, ldx, (const float *)w->data,
                   w->row_bytes / (int64_t)sizeof(float), beta, y, ldy);
        return;
    }
    if (in <= 0) {
        tfm__sgemm(0, 1, n, out, 0, 1.0f, x, ldx, NULL, 1, beta, y, ldy);
        return;
    }
    int64_t p = PANEL_BYTES / ((int64_t)sizeof(float) * in);
    p = p >= PANEL_ROWS_ALIGN ? p / PANEL_ROWS_ALIGN * PANEL_ROWS_ALIGN
                              : PANEL_ROWS_ALIGN;
    if (p > out)
        p = out;
    const tfm__ws_mark mark = tfm__ws_save();
    float *panel = NULL;
    if ((uint64_t)in <= SIZE_MAX / sizeof(float) / (uint64_t)p)
        panel = tfm__ws_alloc((size_t)(p * in) * sizeof(float));
    if (panel) {
        by_panels(x, ldx, n, in, w, beta, out, y, ldy, panel, p);
    } else {
        float stack_panel[STACK_PANEL_FLOATS] __attribute__((aligned(64)));
        if (in <= STACK_PANEL_FLOATS)
            by_panels(x, ldx, n, in, w, beta, out, y, ldy, stack_panel,
                      STACK_PANEL_FLOATS / in);
        else
            by_chunks(x, ldx, n, in, w, beta, out, y, ldy, stack_panel);
    }
    tfm__ws_restore(mark);
}

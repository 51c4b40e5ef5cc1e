/* Softmax (softmax.h). */
#include <math.h>
#include <string.h>

#include "softmax.h"

void tfm__softmax_row(float *x, int64_t n)
{
    float max = -INFINITY;
    int has_nan = 0;
    for (int64_t j = 0; j < n; j++) {
        if (x[j] > max)
            max = x[j];
        else if (x[j] != x[j])
            has_nan = 1;
    }
    if (has_nan) {
        for (int64_t j = 0; j < n; j++)
            x[j] = NAN;
        return;
    }
    if (max == -INFINITY) {
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float e = expf(x[j] - max);
        x[j] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++)
        x[j] *= inv;
}

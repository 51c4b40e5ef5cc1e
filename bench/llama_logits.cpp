// llama.cpp's side of bench/llama_compare.py's agreement check (issue 45):
// the logits of a prompt's last position and the greedy continuation, with
// the prompt given as token ids (the benchmark models' vocabularies are
// dummies), the KV cache in float32 (llama.cpp's default is F16) so that
// both sides compute in float32.  Built by bench/build_llama_cpp.sh.
//
//   llama-logits MODEL.gguf THREADS ID,ID,... N_GEN LOGITS.f32
//
// Writes the last prompt position's logits (float32, native order) to
// LOGITS.f32 and prints "greedy: ID ID ..." (N_GEN ids, argmax with ties
// to the lowest id).  Exit status 1 on any failure.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void quiet(enum ggml_log_level level, const char *text, void *) {
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL.gguf THREADS ID,ID,... N_GEN "
                        "LOGITS.f32\n", argv[0]);
        return 1;
    }
    int threads = atoi(argv[2]);
    int n_gen = atoi(argv[4]);
    std::vector<llama_token> ids;
    for (const char *p = argv[3]; *p;) {
        char *end;
        ids.push_back((llama_token)strtol(p, &end, 10));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) break;
    }
    if (ids.empty()) return 1;
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(ids.size() + n_gen + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)ids.size();
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), (int)ids.size())))
        return 1;
    const float *logits = llama_get_logits_ith(ctx, -1);
    FILE *f = fopen(argv[5], "wb");
    if (!f || fwrite(logits, sizeof(float), nv, f) != (size_t)nv ||
        fclose(f))
        return 1;
    printf("greedy:");
    for (int i = 0; i < n_gen; i++) {
        llama_token t = argmax(llama_get_logits_ith(ctx, -1), nv);
        printf(" %d", t);
        if (i + 1 < n_gen && llama_decode(ctx, llama_batch_get_one(&t, 1)))
            return 1;
    }
    printf("\n");
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}

/* train_tiny: trains a small character-level GPT with the C API alone,
 * then lets it continue a prompt.
 *
 *   cp -r /usr/share/doc/libtransformer-dev/examples/train train-example
 *   make -C train-example && ./train-example/train_tiny
 *
 * The text is a short rhyme repeated; the model (2 pre-norm layers of
 * width 32, learned positions, tied embeddings) learns it in a few hundred
 * steps: AdamW with linear warm-up and cosine decay (tfm_lr_warmup_cosine),
 * gradients clipped to norm 1, random windows of the text as batches.  It
 * prints the loss as it falls and exits 0 when the final loss is below a
 * tenth of the first (the rhyme is then learnt), 1 otherwise.  See
 * transformer-train (tools/transformer_train.c) for the full trainer with
 * checkpoints, and docs/TRAINING.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <transformer/transformer.h>

enum { B = 8, T = 24, STEPS = 300 };

static const char TEXT[] =
    "twinkle twinkle little star how i wonder what you are "
    "up above the world so high like a diamond in the sky ";

static int check(tfm_status st, const char *what)
{
    if (st == TFM_OK)
        return 0;
    fprintf(stderr, "%s: %s (%s)\n", what, tfm_status_string(st),
            tfm_last_error());
    return 1;
}

int main(void)
{
    /* The vocabulary: the text's distinct characters, in order. */
    char vocab[128] = { 0 };
    size_t nv = 0;
    for (const char *c = TEXT; *c; c++)
        if (!strchr(vocab, *c))
            vocab[nv++] = *c;
    tfm_tokenizer *tok = NULL;
    int32_t ids[sizeof TEXT];
    int64_t n = 0;
    if (check(tfm_tokenizer_create(vocab, &tok), "tokenizer") ||
        check(tfm_tokenizer_encode(tok, TEXT, strlen(TEXT), ids,
                                   (int64_t)sizeof TEXT, &n), "encode"))
        return 1;

    tfm_model_config c = {
        .architecture = TFM_ARCH_DECODER_ONLY,
        .layer = tfm_layer_config_default(32, 4),
        .vocab_size = (int64_t)nv, .n_layers = 2, .context_length = T,
        .positional = TFM_POSITIONAL_LEARNED, .tied_embeddings = 1 };
    c.layer.d_ff = 128;
    c.layer.norm_first = 1;
    c.layer.activation = TFM_ACTIVATION_GELU;
    tfm_module *model = NULL;
    tfm_optimizer *opt = NULL;
    tfm_tensor *logits = NULL, *dlogits = NULL;
    tfm_rng rng;
    tfm_rng_seed(&rng, 7);
    tfm_optimizer_options o;
    tfm_optimizer_options_init(&o, TFM_OPTIMIZER_ADAMW);
    const int64_t shape[3] = { B, T, (int64_t)nv };
    if (check(tfm_model_create(&c, &model), "model") ||
        check(tfm_module_reset_parameters(model, &rng), "init") ||
        check(tfm_module_train(model, 1), "train mode") ||
        check(tfm_optimizer_create(model, &o, &opt), "optimizer") ||
        check(tfm_tensor_create(3, shape, &logits), "logits") ||
        check(tfm_tensor_create(3, shape, &dlogits), "dlogits"))
        return 1;

    int32_t batch[B * T];
    float first = 0.0f, loss = 0.0f;
    for (int64_t s = 0; s < STEPS; s++) {
        for (int b = 0; b < B; b++) {   /* a random window per row */
            const int64_t start = (int64_t)(tfm_rng_uniform(&rng) *
                                            (float)(n - T));
            memcpy(batch + b * T, ids + start, T * sizeof *batch);
        }
        double f;
        tfm_optimizer_zero_grad(opt);
        if (check(tfm_lr_warmup_cosine(s, 20, STEPS, 0.1, &f), "schedule") ||
            check(tfm_optimizer_set_lr(opt, 1e-2 * f), "lr") ||
            check(tfm_model_logits(model, batch, B, T, logits), "forward") ||
            check(tfm_causal_lm_loss(logits, batch, -100, 0.0f,
                                     TFM_REDUCTION_MEAN, &loss, dlogits),
                  "loss") ||
            check(tfm_model_backward(model, batch, B, T, dlogits),
                  "backward") ||
            check(tfm_optimizer_clip_grad_norm(opt, 1.0, 2.0, NULL), "clip") ||
            check(tfm_optimizer_step(opt), "step"))
            return 1;
        if (s == 0)
            first = loss;
        if (s % 50 == 0 || s == STEPS - 1)
            printf("step %3lld  loss %.4f\n", (long long)s + 1, loss);
    }

    /* Greedy continuation of "twinkle ". */
    int32_t prompt[8], out[40];
    int64_t np = 0;
    char text[256];
    size_t len = 0;
    if (check(tfm_module_train(model, 0), "eval mode") ||
        check(tfm_tokenizer_encode(tok, "twinkle ", 8, prompt, 8, &np),
              "prompt") ||
        check(tfm_model_generate(model, prompt, np, 40, NULL, 0, out),
              "generate") ||
        check(tfm_tokenizer_decode(tok, out, 40, text, sizeof text, &len),
              "decode"))
        return 1;
    printf("twinkle %s\n", text);
    tfm_tensor_free(logits);
    tfm_tensor_free(dlogits);
    tfm_optimizer_free(opt);
    tfm_module_free(model);
    tfm_tokenizer_free(tok);
    return loss < first / 10 ? 0 : 1;
}

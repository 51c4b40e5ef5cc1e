/* Which files make a tokenizer (tfm_tokenizer_load, tokenizer.h): a
 * directory, a tokenizer.json, GPT-2's encoder.json / vocab.json with their
 * merges beside them, Marian's vocab.json with source.spm and target.spm
 * beside it, BERT's vocab.txt (with tokenizer_config.json beside it when
 * there is one), a SentencePiece *.model / *.spm.  Anything else is left to
 * the model-file reader. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/sentencepiece/sentencepiece.h"
#include "base/file.h"
#include "tokenizers/tokenizer_impl.h"

/* Whether something other than a directory is at path (after following
 * links): a FIFO or a device named like the file is taken for it, so that
 * opening it (base/file.c's door, without blocking) refuses it by name
 * rather than the file being reported missing. */
static int is_file(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && !S_ISDIR(s.st_mode);
}

/* dir + "/" + name into buf; 0 when it does not fit. */
static int join(char *buf, size_t size, const char *dir, size_t dir_len,
                const char *name)
{
    int n = snprintf(buf, size, "%.*s%s%s", (int)dir_len, dir,
                     dir_len && dir[dir_len - 1] != '/' ? "/" : "", name);
    return n >= 0 && (size_t)n < size;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Marian's files in directory dir (dir_len bytes): vocab.json, source.spm
 * and target.spm, and tokenizer_config.json when there is one.  0 when they
 * are not all there. */
static int marian_files(const char *dir, size_t dir_len, char paths[4][4096])
{
    static const char *const NAMES[] = { "vocab.json", "source.spm",
                                         "target.spm",
                                         "tokenizer_config.json" };
    for (int i = 0; i < 4; i++)
        if (!join(paths[i], sizeof paths[i], dir, dir_len, NAMES[i]) ||
            (i < 3 && !is_file(paths[i])))
            return 0;
    return 1;
}

static tfm_status load_marian(char paths[4][4096], tfm_tokenizer **out)
{
    return tfm__marian_load(paths[0], paths[1], paths[2],
                            is_file(paths[3]) ? paths[3] : NULL, out);
}

/* GPT-2's vocabulary file and its merges file in directory dir. */
static tfm_status load_pair(const char *dir, size_t dir_len,
                            const char *vocab, const char *merges,
                            tfm_tokenizer **out)
{
    char a[4096], b[4096];
    if (!join(a, sizeof a, dir, dir_len, vocab) ||
        !join(b, sizeof b, dir, dir_len, merges))
        return tfm__fail(TFM_ERR_IO, "path too long");
    if (!is_file(b))
        return tfm__fail(TFM_ERR_IO, "%.200s: no %s beside it", a, merges);
    return tfm__bpe_load_gpt2(a, b, out);
}

tfm_status tfm__tokenizer_load_files(const char *path, tfm_tokenizer **out)
{
    struct stat s;
    if (stat(path, &s) != 0)
        return TFM_ERR_NOT_FOUND;  /* the model-file reader says why */
    if (S_ISDIR(s.st_mode)) {
        size_t n = strlen(path);
        char p[4096], q[4096];
        if (!join(p, sizeof p, path, n, "tokenizer.json"))
            return tfm__fail(TFM_ERR_IO, "path too long");
        /* SentencePiece model files, by the names checkpoints give them
         * (Llama, T5, XLM-R / mBART, Marian). */
        static const char *const SPM[] = {
            "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
            "source.spm",
        };
        int spm = -1;
        for (size_t i = 0; spm < 0 && i < sizeof SPM / sizeof SPM[0]; i++)
            if (join(q, sizeof q, path, n, SPM[i]) && is_file(q))
                spm = (int)i;
        /* Marian's: vocab.json with both SentencePiece models. */
        char marian[4][4096];
        int is_marian = marian_files(path, n, marian);
        if (is_file(p)) {
            tfm_status st = tfm__tokenizer_json_load(p, out);
            /* A tokenizer.json this library cannot run, beside the
             * SentencePiece model it was made from: the model. */
            if (st != TFM_ERR_UNSUPPORTED || (spm < 0 && !is_marian))
                return st;
        }
        if (is_marian)
            return load_marian(marian, out);
        if (spm == 3) { /* source.spm: Marian's, ids from vocab.json */
            char v[4096];
            const int has_vocab = join(v, sizeof v, path, n, "vocab.json") &&
                                  is_file(v);
            return tfm__fail(TFM_ERR_FORMAT,
                             "%.200s has source.spm but no %s: a Marian "
                             "tokenizer needs source.spm, target.spm and "
                             "vocab.json (its ids are vocab.json's, not the "
                             "SentencePiece model's)", path,
                             has_vocab ? "target.spm" : "vocab.json");
        }
        if (spm >= 0)
            return tfm__spm_load(q, out);
        static const char *const PAIRS[][2] = {
            { "encoder.json", "vocab.bpe" }, { "vocab.json", "merges.txt" },
        };
        for (size_t i = 0; i < sizeof PAIRS / sizeof PAIRS[0]; i++) {
            if (join(p, sizeof p, path, n, PAIRS[i][0]) &&
                join(q, sizeof q, path, n, PAIRS[i][1]) && is_file(p) &&
                is_file(q))
                return tfm__bpe_load_gpt2(p, q, out);
        }
        if (join(p, sizeof p, path, n, "vocab.txt") && is_file(p)) {
            int cfg = join(q, sizeof q, path, n, "tokenizer_config.json") &&
                      is_file(q);
            return tfm__wordpiece_load_vocab_txt(p, cfg ? q : NULL, out);
        }
        return tfm__fail(TFM_ERR_IO,
                         "%.200s: no tokenizer.json, encoder.json + "
                         "vocab.bpe, vocab.json + merges.txt, vocab.txt or "
                         "SentencePiece model (tokenizer.model, spiece.model, "
                         "sentencepiece.bpe.model, source.spm) in this "
                         "directory", path);
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dir_len = (size_t)(base - path);
    if (strcmp(base, "encoder.json") == 0)
        return load_pair(path, dir_len, "encoder.json", "vocab.bpe", out);
    if (strcmp(base, "vocab.json") == 0) {
        char marian[4][4096];
        if (marian_files(path, dir_len, marian))
            return load_marian(marian, out);
        return load_pair(path, dir_len, "vocab.json", "merges.txt", out);
    }
    if (ends_with(base, ".json"))
        return tfm__tokenizer_json_load(path, out);
    if (ends_with(base, ".model") || ends_with(base, ".spm"))
        return tfm__spm_load(path, out);
    if (ends_with(base, ".txt")) {  /* BERT's vocab.txt */
        char q[4096];
        int cfg = join(q, sizeof q, path, dir_len, "tokenizer_config.json") &&
                  is_file(q);
        return tfm__wordpiece_load_vocab_txt(path, cfg ? q : NULL, out);
    }
    return TFM_ERR_NOT_FOUND;
}

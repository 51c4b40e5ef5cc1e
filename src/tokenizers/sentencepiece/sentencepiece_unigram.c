/* SentencePiece's unigram model (sentencepiece_impl.h), as sentencepiece
 * 0.1.97's unigram_model.cc EncodeOptimized: the Viterbi segmentation of
 * highest total score over the pieces' trie, an unknown character scored
 * below every piece (Kudo 2018, "Subword Regularization", section 3; T5's
 * and Marian's models). */
#include "base/alloc.h"
#include "base/error.h"
#include "tokenizers/sentencepiece/sentencepiece_impl.h"

typedef struct uni_node {
    float score;       /* best path score ending here */
    int32_t id;
    int64_t starts_at; /* -1 until reached */
} uni_node;

tfm_status tfm__spm_encode_unigram(const spm *m, const char *norm, size_t n,
                                 spm_segs *out)
{
    uni_node *best = tfm__malloc((n + 1) * sizeof *best);
    if (!best)
        return tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t i = 0; i <= n; i++) {
        best[i].score = 0.0f;
        best[i].id = -1;
        best[i].starts_at = -1;
    }
    const float unk_score = m->min_score - 10.0f;  /* kUnkPenalty */
    const unsigned char *s = (const unsigned char *)norm;
    for (size_t at = 0; at < n;) {
        const float till_here = best[at].score;
        size_t mblen = one_char_len(s[at]);
        if (mblen > n - at)
            mblen = n - at;
        int has_single = 0;
        int32_t node = 0;
        for (size_t k = at; k < n; k++) {
            node = trie_child(&m->pieces, node, s[k]);
            if (node < 0)
                break;
            int32_t id = m->pieces.value[node];
            if (id < 0 || m->f.types[id] == TFM__SPM_UNUSED)
                continue;
            size_t end = k + 1, length = end - at;
            /* As the reference: a user-defined piece scores
             * length * max_score - 0.1 (float product, double difference),
             * the candidate is a double compared with the float stored. */
            double score = m->f.types[id] == TFM__SPM_USER_DEFINED
                               ? (double)((float)length * m->max_score) - 0.1
                               : (double)m->f.scores[id];
            double cand = score + (double)till_here;
            if (best[end].starts_at == -1 || cand > (double)best[end].score) {
                best[end].score = (float)cand;
                best[end].starts_at = (int64_t)at;
                best[end].id = id;
            }
            if (length == mblen)
                has_single = 1;
        }
        if (!has_single) {
            uni_node *t = &best[at + mblen];
            float cand = unk_score + till_here;
            if (t->starts_at == -1 || cand > t->score) {
                t->score = cand;
                t->starts_at = (int64_t)at;
                t->id = m->unk;
            }
        }
        at += mblen;
    }
    /* Backtrack, then reverse. */
    size_t first = out->n;
    int ok = 1;
    for (size_t end = n; ok && end > 0;) {
        size_t begin = (size_t)best[end].starts_at;
        ok = segs_push(out, begin, end - begin, best[end].id);
        end = begin;
    }
    for (size_t i = first, j = out->n; ok && j > i + 1; i++, j--) {
        spm_seg t = out->v[i];
        out->v[i] = out->v[j - 1];
        out->v[j - 1] = t;
    }
    tfm__free(best);
    return ok ? TFM_OK : tfm__fail(TFM_ERR_OUT_OF_MEMORY, "out of memory");
}

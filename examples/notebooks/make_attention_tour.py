#!/usr/bin/env python3
"""Writes attention_tour.ipynb, the notebook tour of attention with
libtransformer, from the cell texts below.

The notebook is generated so that its JSON is reproducible and reviewable:
edit this file, not the .ipynb, then run

    /usr/bin/python3 examples/notebooks/make_attention_tour.py

The written notebook has no outputs (run it to see them).  The test
bindings/python/tests/test_notebook.py executes it headlessly and checks
that the committed file is what this script writes.

Needs Debian's python3-nbformat.
"""

import argparse
import pathlib
import textwrap

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
NOTEBOOK = HERE / "attention_tour.ipynb"

# (id, kind, source): "md" for markdown, "py" for code.  The ids are the
# cells' nbformat ids, fixed so that regenerating changes nothing.
CELLS = []


def md(cell_id, text):
    CELLS.append((cell_id, "md", text))


def py(cell_id, text):
    CELLS.append((cell_id, "py", text))


md("intro", r"""
# A tour of attention with libtransformer

This notebook builds the attention mechanism of the Transformer step by
step and checks every claim it makes with a computation, using
libtransformer's Python bindings (the `transformer` package) for the
attention itself. The reference is

> A. Vaswani, N. Shazeer, N. Parmar, J. Uszkoreit, L. Jones, A. N. Gomez,
> Ł. Kaiser, I. Polosukhin. *Attention Is All You Need.* NeurIPS 2017,
> [arXiv:1706.03762](https://arxiv.org/abs/1706.03762).

Its central formula (section 3.2.1, "scaled dot-product attention") is

$$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$

where the softmax is taken over each row.

1. Self-attention on a tiny example, step by step
2. Why divide by $\sqrt{d_k}$: softmax saturation
3. Permutation equivariance, and positional encodings
4. The causal mask
5. Multi-head attention: parameters and multiplies
6. Attention heatmaps
7. Beyond the paper: attention variants
8. Text from the shipped model

To run it yourself, build the library with its Python bindings and start
Jupyter with `PYTHONPATH=<build>/bindings/python` (see the README).
""")

py("setup", r"""
%matplotlib inline
# The inline backend renders figures with matplotlib's Agg backend and shows
# them as PNG images in the notebook; nothing is written to disk.
import numpy as np
import matplotlib.pyplot as plt

import transformer

np.set_printoptions(precision=3, suppress=True, linewidth=100)
print("libtransformer", transformer.__version__)
""")

md("step1", r"""
## 1. Self-attention, step by step

Take a sequence of $L = 5$ positions, each a vector of $d_{model} = 6$
features (in a real model these are token embeddings; here they are seeded
random numbers). The rows of $X \in \mathbb{R}^{5 \times 6}$ are the
positions.

*Self*-attention derives queries, keys and values from the same sequence
with three learned projections:

$$Q = X W^Q, \qquad K = X W^K, \qquad V = X W^V, \qquad
W^Q, W^K, W^V \in \mathbb{R}^{d_{model} \times d_k}$$

Query $i$ asks "what am I looking for?", key $j$ says "what do I
contain?", and value $j$ is what position $j$ hands over when attended to.
The projections are plain matrix products, done here in numpy.
""")

py("projections", r"""
rng = np.random.default_rng(4)
L, d_model, d_k = 5, 6, 6
words = ["the", "cat", "sat", "on", "mats"]   # labels for the 5 positions

X = rng.standard_normal((L, d_model)).astype(np.float32)
W_Q, W_K, W_V = (rng.standard_normal((3, d_model, d_k)) / np.sqrt(d_model)).astype(np.float32)

Q, K, V = X @ W_Q, X @ W_K, X @ W_V
print("X", X.shape, "-> Q", Q.shape, " K", K.shape, " V", V.shape)
print("Q =\n", Q)
""")

md("sdpa", r"""
Now the attention itself, with the library's
`transformer.scaled_dot_product_attention` (same arguments as PyTorch's
`torch.nn.functional.scaled_dot_product_attention`; `need_weights=True`
also returns the attention matrix):

$$A = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) \in \mathbb{R}^{L \times L},
\qquad \text{output} = A V$$

Entry $A_{ij}$ is how much position $i$ attends to position $j$. We also
recompute $A$ by hand in numpy to see that the library does exactly this.
""")

py("attention", r"""
out, A = transformer.scaled_dot_product_attention(Q, K, V, need_weights=True)
print("attention matrix A (row i: how position i spreads its attention):")
print(A)

# The same formula by hand.
scores = Q @ K.T / np.sqrt(d_k)
A_by_hand = np.exp(scores - scores.max(axis=1, keepdims=True))
A_by_hand /= A_by_hand.sum(axis=1, keepdims=True)
assert np.allclose(A, A_by_hand, atol=1e-6)
assert np.allclose(out, A @ V, atol=1e-6)
print("\nlibrary == softmax(Q K^T / sqrt(d_k)) and output == A @ V: OK")
""")

md("sums", r"""
Each **row** of $A$ is a softmax, i.e. a probability distribution over the
positions: non-negative and summing to 1. So each output row is a weighted
*average* of the value vectors.

The **columns** are not normalised: a column sum says how much attention a
position receives in total, and some positions are far more popular than
others.
""")

py("row_col_sums", r"""
row_sums, col_sums = A.sum(axis=1), A.sum(axis=0)
print("row sums   :", row_sums)
print("column sums:", col_sums)
for w, c in zip(words, col_sums):
    print(f"  {w:>4} receives {c:.3f}")

assert (A >= 0).all()
assert np.allclose(row_sums, 1.0, atol=1e-6)
assert col_sums.max() - col_sums.min() > 0.1, col_sums      # columns vary
print("\nevery row sums to 1; column sums range from "
      f"{col_sums.min():.3f} to {col_sums.max():.3f}")
""")

md("scale", r"""
## 2. Why divide by $\sqrt{d_k}$?

If the components of $q$ and $k$ are independent with mean 0 and variance
1, their dot product $q \cdot k = \sum_{m=1}^{d_k} q_m k_m$ has mean 0 and
variance $d_k$ (Vaswani et al., footnote 4). As $d_k$ grows, the logits
spread out, and the softmax of widely spread logits is nearly one-hot: it
*saturates*, and its gradients become tiny, which hampers training.
Dividing by $\sqrt{d_k}$ brings the logits back to variance 1, whatever
$d_k$ is.

Below: 2000 random queries, each attending over 10 random keys, with
$q, k \sim \mathcal{N}(0, 1)$. We count the share of queries whose largest
attention weight exceeds 0.99, once with the library's default scale
$1/\sqrt{d_k}$ and once with `scale=1.0` (no scaling).
""")

py("saturation", r"""
rng = np.random.default_rng(0)
n_queries, n_keys = 2000, 10
saturation = {}
print(" d_k   logit std (scaled / unscaled)   rows with max weight > 0.99 (scaled / unscaled)")
for dk in (4, 50, 400):
    q = rng.standard_normal((n_queries, dk)).astype(np.float32)
    k = rng.standard_normal((n_keys, dk)).astype(np.float32)
    v = np.eye(n_keys, dtype=np.float32)          # values do not matter here
    _, w_scaled = transformer.scaled_dot_product_attention(q, k, v, need_weights=True)
    _, w_raw = transformer.scaled_dot_product_attention(q, k, v, scale=1.0, need_weights=True)
    logits = q @ k.T
    share = ((w_scaled.max(axis=1) > 0.99).mean(), (w_raw.max(axis=1) > 0.99).mean())
    saturation[dk] = (w_scaled, w_raw, share)
    print(f"{dk:4d}   {(logits / np.sqrt(dk)).std():6.2f} / {logits.std():6.2f}"
          f"                  {share[0]:6.1%} / {share[1]:6.1%}")

scaled_share = [saturation[dk][2][0] for dk in (4, 50, 400)]
raw_share = [saturation[dk][2][1] for dk in (4, 50, 400)]
assert raw_share[0] < raw_share[1] < raw_share[2], raw_share   # grows with d_k ...
assert raw_share[2] > 0.5, raw_share                           # ... to most rows at 400
assert max(scaled_share) < 0.01, scaled_share                  # scaling prevents it
""")

md("perm", r"""
## 3. Permutation equivariance, and positional encodings

Nothing in $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$ refers to *where* a
position is. Permuting the input rows with a permutation matrix $P$ permutes
$Q$, $K$ and $V$ the same way, and

$$\mathrm{softmax}\!\left(\frac{PQ\,(PK)^\top}{\sqrt{d_k}}\right) PV
= P\,\mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) P^\top P V
= P \cdot \mathrm{Attention}(Q, K, V):$$

the outputs are permuted in the same way, and nothing else changes. To
self-attention, "the cat sat on mats" is a bag of words.

We check it with the library's `transformer.MultiheadAttention` module
(PyTorch's `nn.MultiheadAttention` interface; it does the projections
too), loaded with random weights in PyTorch's `state_dict` layout.
""")

py("mha_helper", r"""
def random_mha(embed_dim, num_heads, seed):
    '''A MultiheadAttention layer with seeded random weights.'''
    r = np.random.default_rng(seed)
    mha = transformer.MultiheadAttention(embed_dim, num_heads, batch_first=True)
    s = 1 / np.sqrt(embed_dim)
    mha.load_state_dict({
        "in_proj_weight": r.normal(0, s, (3 * embed_dim, embed_dim)),
        "in_proj_bias": r.normal(0, 0.1, 3 * embed_dim),
        "out_proj.weight": r.normal(0, s, (embed_dim, embed_dim)),
        "out_proj.bias": r.normal(0, 0.1, embed_dim),
    })
    return mha

mha = random_mha(d_model, num_heads=2, seed=1)
print(mha)

def self_attention(x, **kwargs):
    '''[L, E] -> ([L, E] output, [L, L] weights averaged over heads).'''
    y, w = mha(x[None], x[None], x[None], **kwargs)   # batch of one: [1, L, E]
    return y[0], w[0]

perm = np.array([3, 0, 4, 1, 2])
print("permuted order:", [words[p] for p in perm])

y, w = self_attention(X)
y_perm, w_perm = self_attention(X[perm])
assert np.allclose(y_perm, y[perm], atol=1e-6)
assert np.allclose(w_perm, w[perm][:, perm], atol=1e-6)
print("self-attention(X[perm]) == self-attention(X)[perm]: OK (equivariant)")
""")

md("pe", r"""
Order has to be put into the input. The original Transformer adds a
**sinusoidal positional encoding** to the embeddings (section 3.5):

$$PE_{(pos,\,2i)} = \sin\!\left(pos / 10000^{2i/d_{model}}\right), \qquad
PE_{(pos,\,2i+1)} = \cos\!\left(pos / 10000^{2i/d_{model}}\right)$$

The encoding belongs to the *slot*, not to the word: after permuting the
words, slot 0 still gets $PE_0$. So the words now carry their position, and
the outputs are no longer just a permutation of each other.
""")

py("pe_breaks", r"""
PE = transformer.sinusoidal_positional_encoding(L, d_model)
print("positional encoding [L, d_model]:\n", PE)

y_pe, _ = self_attention(X + PE)
y_pe_perm, _ = self_attention(X[perm] + PE)
diff = np.abs(y_pe_perm - y_pe[perm]).max()
print(f"\nwith positional encoding: max |attn(X[perm] + PE) - attn(X + PE)[perm]| = {diff:.3f}")
assert not np.allclose(y_pe_perm, y_pe[perm], atol=1e-3)
print("no longer equivariant: word order now matters")
""")

md("causal", r"""
## 4. The causal mask

A language model predicts each token from the ones *before* it, so
position $i$ must not see positions $j > i$. The decoder's self-attention
(section 3.2.3) sets those logits to $-\infty$ before the softmax:

$$A = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + M\right), \qquad
M_{ij} = \begin{cases} 0 & j \le i \\ -\infty & j > i \end{cases}$$

$e^{-\infty} = 0$, so $A$ is lower triangular, and each row is still a
distribution over the positions it may see. Position 0 can only attend to
itself. With `is_causal=True` the library applies $M$ without building it.
""")

py("causal_mask", r"""
y_c, A_causal = self_attention(X, is_causal=True)
print("causal attention weights:\n", A_causal)

assert (np.triu(A_causal, k=1) == 0).all()                   # exactly zero above the diagonal
assert np.allclose(A_causal.sum(axis=1), 1.0, atol=1e-6)     # rows still sum to 1
assert A_causal[0, 0] == 1.0                                 # position 0 sees only itself
print("\nzeros above the diagonal; row sums:", A_causal.sum(axis=1))
""")

md("causal_exact", r"""
Consequently, changing a *later* input cannot affect *earlier* outputs at
all: not approximately, but bit for bit (the masked weights are exact
zeros). This is what lets a model be trained on all positions of a text in
one pass, and lets generation cache the keys and values of the past.
""")

py("causal_change", r"""
X_changed = X.copy()
X_changed[4] = 10 * np.random.default_rng(5).standard_normal(d_model)   # the last input only

y_c2, _ = self_attention(X_changed, is_causal=True)
print("changed output rows:", [i for i in range(L) if not np.array_equal(y_c[i], y_c2[i])])
assert np.array_equal(y_c[:4], y_c2[:4])     # earlier outputs exactly unchanged
assert not np.array_equal(y_c[4], y_c2[4])

y_full, _ = self_attention(X)                # without the mask, everything changes
y_full2, _ = self_attention(X_changed)
print("without the mask:  ", [i for i in range(L) if not np.array_equal(y_full[i], y_full2[i])])
assert all(not np.allclose(y_full[i], y_full2[i]) for i in range(L))
""")

md("heads", r"""
## 5. Multi-head attention: parameters and multiplies

Multi-head attention (section 3.2.2) runs $h$ attentions in parallel on
$h$ smaller projections, $d_k = d_v = d_{model}/h$, and mixes their outputs:

$$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
\qquad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q, K W_i^K, V W_i^V)$$

with $W_i^Q, W_i^K, W_i^V \in \mathbb{R}^{d_{model} \times d_k}$ and
$W^O \in \mathbb{R}^{h d_v \times d_{model}}$. How do parameters and
compute change with $h$ at $d_{model} = 48$? The library counts them:
`num_parameters()`, and `forward_macs(batch, L)`, the multiply-accumulates
of the matrix products in one forward pass.
""")

py("head_table", r"""
d, L_seq = 48, 32
print(f"d_model = {d}, sequence length L = {L_seq}\n")
print(" heads  d_k  parameters  multiply-accumulates")
rows = []
for h in (1, 2, 3, 6):
    layer = transformer.MultiheadAttention(d, h)
    rows.append((h, d // h, layer.num_parameters(), layer.forward_macs(1, L_seq)))
    print(f"{h:6d} {d // h:4d} {rows[-1][2]:11,d} {rows[-1][3]:20,d}")

params = 4 * (d * d + d)                        # W_Q, W_K, W_V, W_O and their biases
macs = 4 * L_seq * d * d + 2 * L_seq * L_seq * d  # projections + (Q K^T and A V)
assert all(r[2] == params and r[3] == macs for r in rows)
print(f"\nall equal: 4 (d^2 + d) = {params:,d} parameters, "
      f"4 L d^2 + 2 L^2 d = {macs:,d} multiply-accumulates")
""")

md("heads_why", r"""
Neither depends on the number of heads, because the heads *split* the
model width instead of adding to it:

* **Parameters.** Head $i$ has its own $d_{model} \times d_k$ matrices, but
  side by side the $h$ of them form one $d_{model} \times h d_k =
  d_{model} \times d_{model}$ matrix, exactly the size of a single head's
  with $d_k = d_{model}$. Same for $W^O$. Total: $4(d_{model}^2 + d_{model})$
  with biases.
* **Multiplies.** The projections cost $4 L d_{model}^2$ whatever the split.
  Each head computes $QK^\top$ and $AV$ with $L \cdot L \cdot d_k$
  multiplies each; $h$ heads make $2 L^2 h d_k = 2 L^2 d_{model}$.

What more heads do buy is $h$ independent attention patterns (each head
can look for something else); what they cost is $h$ softmaxes over $L^2$
logits and $h$ attention matrices to store, which are not multiplies.
""")

md("heatmaps", r"""
## 6. Attention heatmaps

Attention matrices are best looked at as images: row $i$ (a query) shows
where position $i$ looks. Left to right: the tiny example; its causal
version (lower triangular); and 10 random queries over 10 keys at
$d_k = 400$ with and without the $1/\sqrt{d_k}$ scale, where the unscaled
rows are almost one-hot.
""")

py("heatmap_plot", r"""
panels = [
    ("self-attention", A, words, words),
    ("causal self-attention", A_causal, words, words),
    ("d_k = 400, scaled", saturation[400][0][:10], None, None),
    ("d_k = 400, not scaled", saturation[400][1][:10], None, None),
]
fig, axes = plt.subplots(1, 4, figsize=(16, 4), constrained_layout=True)
for ax, (title, weights, xlabels, ylabels) in zip(axes, panels):
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    if xlabels:
        ax.set_xticks(range(len(xlabels)), xlabels)
        ax.set_yticks(range(len(ylabels)), ylabels)
fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
plt.show()
""")

md("heatmap_heads_md", r"""
And the per-head patterns of a 6-head layer at $d_{model} = 48$ on 12
positions (random embeddings plus the sinusoidal positional encoding),
from `average_attn_weights=False`. Each head has its own distribution;
the layer's output mixes all of them through $W^O$.
""")

py("heatmap_heads", r"""
heads, L12 = 6, 12
mha6 = random_mha(48, heads, seed=6)
x12 = np.random.default_rng(12).standard_normal((1, L12, 48)).astype(np.float32)
x12 += transformer.sinusoidal_positional_encoding(L12, 48)
_, w_heads = mha6(x12, x12, x12, average_attn_weights=False)   # [1, heads, L, L]
print("per-head weights:", w_heads.shape)
assert np.allclose(w_heads.sum(axis=-1), 1.0, atol=1e-5)

fig, axes = plt.subplots(1, heads, figsize=(18, 3.8), constrained_layout=True)
for h, ax in enumerate(axes):
    im = ax.imshow(w_heads[0, h], cmap="magma", vmin=0, vmax=1)
    ax.set_title(f"head {h + 1} (d_k = {48 // heads})")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_xticks(range(0, L12, 4))
    ax.set_yticks(range(0, L12, 4))
fig.suptitle(f"Per-head attention weights of a {heads}-head layer "
             f"(d_model = 48, {L12} positions)")
fig.colorbar(im, ax=axes, shrink=0.9, label="attention weight")
plt.show()
plt.close("all")
""")

md("variants", r"""
## 7. Beyond the paper: attention variants

Later work changed the attention of the paper in a few places, and
libtransformer offers the common changes as options of the same layers
(`include/transformer/variants.h`; keywords of `MultiheadAttention`,
`TransformerEncoderLayer` and `transformer.Attention`, which works on
per-head arrays `[N, H, L, d_k]`):

* **where position enters**: rotary embeddings (RoPE, Su et al. 2021)
  rotate queries and keys by position, so $q_i \cdot k_j$ depends only on
  $j - i$; ALiBi (Press et al. 2022) adds $-m_h\,|j - i|$ to the logits,
  with a different slope $m_h$ per head; T5 (Raffel et al. 2020) and Shaw
  et al. (2018) learn relative terms;
* **which keys a query sees**: a sliding window (Longformer), global
  tokens, BigBird's blocks — patterns the library computes from positions,
  without an $L 	imes S$ mask;
* **how many key/value heads**: grouped-query attention (Ainslie et al.
  2023) shares each key/value head among several query heads.

With RoPE, a query repeated at every position and a key repeated at every
position give logits that depend only on the offset $j - i$; so the ratio
of the weights on the key at the same position and on the one just before
is the same in every row.
""")

py("variants_rope", r"""
rng = np.random.default_rng(8)
L8, d8 = 8, 16
q8 = np.repeat(rng.standard_normal((1, 1, 1, d8)), L8, axis=2)
k8 = np.repeat(rng.standard_normal((1, 1, 1, d8)), L8, axis=2)
q8, k8 = q8.astype(np.float32), k8.astype(np.float32)
v8 = rng.standard_normal((1, 1, L8, d8)).astype(np.float32)

rope = transformer.Attention(d8, 1, rope="half")          # GPT-NeoX layout
_, w_rope = rope(q8, k8, v8, is_causal=True, need_weights=True)
ratios = [w_rope[0, 0, i, i] / w_rope[0, 0, i, i - 1] for i in range(1, L8)]
print("w[i, i] / w[i, i-1] per row:", np.round(ratios, 5))
assert np.allclose(ratios, ratios[0], rtol=1e-4)

# Without RoPE every key is the same key: uniform weights over the past.
_, w_plain = transformer.Attention(d8, 1)(q8, k8, v8, is_causal=True,
                                          need_weights=True)
assert np.allclose(w_plain[0, 0, 3, :4], 0.25)
""")

md("variants_alibi_md", r"""
ALiBi with zero queries and keys leaves only its bias: each head's weights
fall off geometrically with distance, by $e^{-m_h}$ per step, the slopes
being $2^{-2}, 2^{-4}, 2^{-6}, 2^{-8}$ for 4 heads (local heads and almost
uniform ones). A sliding window of 2 keys each side and BigBird's blocks
(window, one global block) show the sparse patterns; the keys outside the
pattern get exactly zero weight.
""")

py("variants_alibi", r"""
L12, d4 = 12, 4
zeros = np.zeros((1, 4, L12, d4), np.float32)
v12 = np.random.default_rng(12).standard_normal((1, 4, L12, d4))
v12 = v12.astype(np.float32)
_, w_alibi = transformer.Attention(d4, 4, relative="alibi")(
    zeros, zeros, v12, is_causal=True, need_weights=True)
slopes = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
for h, m in enumerate(slopes):
    ratio = w_alibi[0, h, 9, 9] / w_alibi[0, h, 9, 8]
    assert np.isclose(ratio, np.exp(m), rtol=1e-5)

window = transformer.Attention(d4, 4, sparsity="sliding_window", window=2)
_, w_window = window(zeros, zeros, v12, need_weights=True)
band = np.abs(np.subtract.outer(np.arange(L12), np.arange(L12))) <= 2
assert np.all(w_window[0, 0][~band] == 0) and np.all(w_window[0, 0][band] > 0)

bigbird = transformer.Attention(d4, 4, sparsity="bigbird", block_size=2,
                                window=1, n_global=1)
_, w_bigbird = bigbird(zeros, zeros, v12, need_weights=True)

panels = [("ALiBi head 1 (m = 1/4)", w_alibi[0, 0]),
          ("ALiBi head 4 (m = 1/256)", w_alibi[0, 3]),
          ("sliding window, 2 each side", w_window[0, 0]),
          ("BigBird: blocks of 2, 1 global", w_bigbird[0, 0])]
fig, axes = plt.subplots(1, 4, figsize=(16, 4), constrained_layout=True)
for ax, (title, weights) in zip(axes, panels):
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
plt.show()
plt.close("all")
""")

md("variants_gqa_md", r"""
Grouped-query attention keeps all query heads but fewer key/value heads:
the key and value projections shrink, and so does what a KV cache stores
per position. The variant is read back with `attention_config`.
""")

py("variants_gqa", r"""
full = transformer.MultiheadAttention(64, 8, batch_first=True)
gqa = transformer.MultiheadAttention(64, 8, batch_first=True, n_kv_heads=2)
print("in_proj_weight:", full.state_dict()["in_proj_weight"].shape, "->",
      gqa.state_dict()["in_proj_weight"].shape)
print("parameters:", full.num_parameters(), "->", gqa.num_parameters())
assert gqa.state_dict()["in_proj_weight"].shape == (64 + 2 * 2 * 8, 64)
print({k: v for k, v in gqa.attention_config.items()
       if k in ("score", "n_kv_heads", "rope")})
assert gqa.attention_config["n_kv_heads"] == 2
""")

md("model", r"""
## 8. Text from the shipped model

libtransformer ships a small decoder-only, character-level Transformer
trained on the King James Bible: a stack of causal multi-head
self-attention and feed-forward layers on top of token and position
embeddings. `transformer.load_model()` loads it
(`transformer.default_model_path()` says from where).

A language model turns each position into *logits* over the vocabulary;
softmax makes them a distribution for the next character.
""")

py("model_load", r"""
import os
path = transformer.default_model_path()
model = transformer.load_model(path)
print("loaded", os.path.basename(path))
print(model)
print(f"{model.num_parameters():,d} parameters")

prompt = "And God said unto Mose"
ids = model.tokenizer.encode(prompt)
logits = model.logits(ids)                       # [len(prompt), vocab_size]
p = np.exp(logits[-1] - logits[-1].max())
p /= p.sum()
print(f"\nafter {prompt!r}, the most likely next characters:")
for i in np.argsort(p)[::-1][:5]:
    print(f"  {model.tokenizer.decode([int(i)])!r:6} {p[i]:.3f}")
assert model.tokenizer.decode([int(p.argmax())]) == "s"      # "Moses"

# Causal: the logits of a prefix do not depend on what follows it.
prefix_logits = model.logits(ids[:10])
assert np.allclose(prefix_logits, logits[:10], atol=1e-4)
""")

md("generate_md", r"""
Generation repeats this: sample a character from the distribution, append
it, predict again (with a cache of past keys and values, which the causal
mask makes valid). `temperature` divides the logits before the softmax:
below 1 it sharpens the distribution, above 1 it flattens it. The same
`seed` gives the same text.
""")

py("generate", r"""
text = model.generate("And God said", max_new_tokens=240, temperature=0.8, seed=2017)
print("And God said" + text)

assert len(text) == 240
assert text == model.generate("And God said", max_new_tokens=240, temperature=0.8, seed=2017)
""")

md("train_md", r"""
## 9. One training step, then a hundred

Attention's scores stay where gradients reach them: the softmax's
Jacobian is $\mathrm{diag}(p) - p p^\top$, and the $1/\sqrt{d_k}$ keeps
it from vanishing. In training mode (`model.train()`) `model.loss(ids,
targets)` is the cross-entropy of the logits against the next characters
(label smoothing as the paper's 0.1), `model.backward()` accumulates every
parameter's gradient, as `loss.backward()` does in PyTorch, and an AdamW
step from `transformer.optim` (torch.optim's arguments) changes the
weights. Fine-tuning the shipped model on one verse, the loss of that
verse falls step after step.
""")

py("train", r"""
from transformer.optim import AdamW

verse = "In the beginning God created the heaven and the earth."
seq = np.array(model.tokenizer.encode(verse), np.int32)
ids, targets = seq[None, :-1], seq[None, 1:]     # predict the next character

model.train()                                    # allocates the gradients
opt = AdamW(model, lr=1e-3)
losses = []
for step in range(20):
    opt.zero_grad()
    losses.append(model.loss(ids, targets, label_smoothing=0.1))
    model.backward()                             # d loss / d every parameter
    opt.step()
model.eval()
print("loss per step:", " ".join(f"{x:.3f}" for x in losses[::4]), "...",
      f"{losses[-1]:.3f}")
g = model.grad("layers.0.self_attn.in_proj_weight")
print("a gradient:", g.shape, "norm", float(np.linalg.norm(g)))
assert losses[-1] < 0.8 * losses[0]
""")

md("scratch_md", r"""
## 10. A tiny model from scratch, in a few seconds

The same loop trains a new model. A decoder-only model of two pre-norm
layers (width 64, PyTorch's initialisation from `transformer.manual_seed`)
learns the first chapter of Genesis character by character: random
windows as batches, AdamW with a linear warm-up and cosine decay
(`get_cosine_schedule_with_warmup`, Hugging Face's), gradients clipped to
norm 1. A progress bar follows the loop and the loss curve is plotted at
the end; the command-line `transformer-train` (docs/TRAINING.md) runs this
recipe on whole books, with checkpoints.
""")

py("scratch", r"""
import time
from IPython.display import display, HTML
import matplotlib.pyplot as plt
from transformer.optim import AdamW
from transformer.optim.lr_scheduler import get_cosine_schedule_with_warmup
from transformer.nn.utils import clip_grad_norm_

text = ("In the beginning God created the heaven and the earth. And the earth "
        "was without form, and void; and darkness was upon the face of the "
        "deep. And the Spirit of God moved upon the face of the waters. And "
        "God said, Let there be light: and there was light. And God saw the "
        "light, that it was good: and God divided the light from the darkness.")
chars = sorted(set(text))
data = np.array([chars.index(c) for c in text], np.int32)
transformer.manual_seed(0)
tiny = transformer.Model(dict(architecture="decoder_only",
                              vocab_size=len(chars), d_model=64, n_heads=4,
                              d_ff=256, n_layers=2, context_length=32,
                              norm_first=True, activation="gelu",
                              tied_embeddings=True)).train()
opt = AdamW(tiny, lr=3e-3, weight_decay=0.01)
steps, batch, L = 150, 16, 32
sched = get_cosine_schedule_with_warmup(opt, 15, steps)
rng = np.random.default_rng(0)

bar = display(HTML(""), display_id=True)
losses, t0 = [], time.perf_counter()
for step in range(steps):
    starts = rng.integers(0, len(data) - L - 1, batch)
    windows = np.stack([data[s:s + L + 1] for s in starts])
    opt.zero_grad()
    losses.append(tiny.loss(windows[:, :-1], windows[:, 1:]))
    tiny.backward()
    clip_grad_norm_(opt, 1.0)
    opt.step()
    sched.step()
    if step % 10 == 9 or step == steps - 1:
        bar.update(HTML(f"<progress value='{step + 1}' max='{steps}'></progress> "
                        f"step {step + 1}/{steps}, loss {losses[-1]:.3f}, "
                        f"{time.perf_counter() - t0:.1f} s"))
tiny.eval()

# The first steps start far above chance (the tied N(0, 1) embeddings give
# large logits), so the y axis is logarithmic: the descent below chance,
# the interesting part, stays visible.
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(np.arange(1, steps + 1), np.array(losses) / np.log(2), label="training loss")
ax.axhline(np.log2(len(chars)), color="gray", ls="--",
           label="chance: log2(%d)" % len(chars))
ax.set_yscale("log")
ax.minorticks_off()
ax.set_yticks([2, 5, 10, 20, 50], labels=["2", "5", "10", "20", "50"])
ax.set_xlabel("step"); ax.set_ylabel("bits per character (log scale)")
ax.set_title("training a 2-layer model from scratch")
ax.legend()
plt.show()
print("bits per character: first %.2f, last %.2f (chance: log2(%d) = %.2f)"
      % (losses[0] / np.log(2), losses[-1] / np.log(2), len(chars),
         np.log2(len(chars))))
assert losses[-1] < 0.5 * losses[0]
""")

md("end", r"""
## Summary

* Attention is $\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$: each output is a
  weighted average of values, with weights (rows summing to 1) from
  query-key similarity.
* Without the $1/\sqrt{d_k}$ scale, the logits grow like $\sqrt{d_k}$ and
  the softmax saturates.
* Self-attention alone ignores order (it is permutation-equivariant);
  positional encodings put order in.
* The causal mask makes outputs depend only on the past, exactly.
* Multi-head attention splits $d_{model}$ among the heads: same parameters,
  same multiplies, more patterns.
* Later variants change where position enters (RoPE, ALiBi), which keys
  a query sees (windows, BigBird) and how many key/value heads there are
  (grouped-query attention), all as options of the same layers.
* The same layers train: `loss`, `backward` and an optimizer step, with
  the gradients torch.autograd gives, also from scratch.

Further reading: Vaswani et al. (2017), *Attention Is All You Need*,
[arXiv:1706.03762](https://arxiv.org/abs/1706.03762); the module
docstrings, e.g. `help(transformer.MultiheadAttention)`.
""")


def build_notebook():
    """The notebook as an nbformat NotebookNode, without outputs."""
    nb = nbformat.v4.new_notebook()
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python",
                       "name": "python3"},
        "language_info": {"name": "python"},
    }
    for cell_id, kind, text in CELLS:
        source = textwrap.dedent(text).strip("\n")
        if kind == "md":
            cell = nbformat.v4.new_markdown_cell(source)
        else:
            cell = nbformat.v4.new_code_cell(source)
        cell.id = cell_id
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", default=str(NOTEBOOK),
                        help=f"where to write the notebook (default "
                             f"{NOTEBOOK.name} next to this script)")
    args = parser.parse_args()
    with open(args.output, "w", encoding="utf-8", newline="\n") as f:
        f.write(nbformat.writes(build_notebook()))
        f.write("\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()

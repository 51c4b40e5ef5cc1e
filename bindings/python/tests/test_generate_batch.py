"""Model.generate with a list of prompts (tfm_model_generate_batch): each
item equals generate on that prompt alone (greedy, sampled with the
processors, EOS, stop strings, str and id prompts), and the greedy batch
equals Hugging Face's way of decoding a left-padded batch, done here in
PyTorch (torch 1.13) on the shipped model's weights: the prompts padded on
the left, an attention mask (0 on the padding: a key padding mask under
the causal one) and position_ids = cumsum(mask) - 1, a full forward of the
whole padded batch per step.  Each sequence's logits of every step equal
our full pass over it alone within 1e-5 of their scale, and the tokens
are the same."""

import numpy as np
import pytest
import torch

import transformer
from conftest import assert_close, model_path_or_skip
from torch_models import TorchModel

PROMPTS = ["A", "And G", "In the beginning ", "And the earth was without "
           "form, and void; and "]


@pytest.fixture(scope="module")
def kjv():
    return transformer.load_model(model_path_or_skip())


def test_items_equal_generate_alone(kjv):
    for kw in (dict(max_new_tokens=30),
               dict(max_new_tokens=25, temperature=0.8, top_k=20, top_p=0.9,
                    seed=3, repetition_penalty=1.2, no_repeat_ngram_size=3),
               dict(max_new_tokens=40, eos_token_id=[kjv.tokenizer.encode(
                   "e")[0]], min_new_tokens=3),
               dict(max_new_tokens=40, stop_strings=["the"])):
        got = kjv.generate(PROMPTS, **kw)
        assert isinstance(got, list) and len(got) == len(PROMPTS)
        assert got == [kjv.generate(p, **kw) for p in PROMPTS], kw
    ids = [kjv.tokenizer.encode(p) for p in PROMPTS]
    got = kjv.generate(ids, max_new_tokens=20)
    assert got == [kjv.generate(p, max_new_tokens=20) for p in ids]
    assert all(isinstance(x, list) for x in got)
    # Mixed str and ids, a tuple, one prompt in a list.
    mixed = kjv.generate((PROMPTS[0], ids[1]), max_new_tokens=5)
    assert mixed == [kjv.generate(PROMPTS[0], max_new_tokens=5),
                     kjv.generate(ids[1], max_new_tokens=5)]
    assert kjv.generate([PROMPTS[2]], max_new_tokens=7) == \
        [kjv.generate(PROMPTS[2], max_new_tokens=7)]
    # A list of ints stays one prompt.
    assert kjv.generate(ids[1], max_new_tokens=4) == \
        kjv.generate(np.asarray(ids[1]), max_new_tokens=4)


def test_sequences_stop_on_their_own(kjv):
    eos = kjv.tokenizer.encode(",")[0]
    got = kjv.generate(PROMPTS, max_new_tokens=60, eos_token_id=eos)
    lengths = [len(g) for g in got]
    assert len(set(lengths)) > 1, lengths
    assert got == [kjv.generate(p, max_new_tokens=60, eos_token_id=eos)
                   for p in PROMPTS]


def test_long_prompts(kjv):
    # Issue 44: a prompt longer than the context (128) is its last 128
    # characters, beside short ones, greedy and sampled with the
    # processors: each item as the tail alone.
    long = "And God said, Let there be light: and there was light. " * 3
    for kw in (dict(max_new_tokens=30),
               dict(max_new_tokens=30, temperature=0.9, top_k=20, seed=5,
                    repetition_penalty=1.3, no_repeat_ngram_size=3)):
        got = kjv.generate([long, "A", long[-128:]], **kw)
        want = kjv.generate(long[-128:], **kw)
        assert got == [want, kjv.generate("A", **kw), want]
        assert kjv.generate(long, **kw) == want


def test_errors(kjv):
    with pytest.raises(transformer.InvalidArgumentError, match="prompt 1"):
        kjv.generate(["ab", []], max_new_tokens=3)
    # A prompt longer than the context is taken (test_long_prompts), its
    # dropped ids checked.
    with pytest.raises(transformer.InvalidArgumentError, match="prompt 1"):
        kjv.generate(["a", [kjv.config["vocab_size"]] + [1] *
                      kjv.config["context_length"]], max_new_tokens=3)
    with pytest.raises(transformer.InvalidArgumentError):
        kjv.generate([[1, kjv.config["vocab_size"]]], max_new_tokens=3)
    with pytest.raises(transformer.InvalidArgumentError):
        kjv.generate(["a", "b"], max_new_tokens=3,
                     eos_token_id=kjv.config["vocab_size"])
    with pytest.raises(transformer.InvalidArgumentError, match="beam"):
        kjv.generate(["a", "b"], num_beams=2)
    with pytest.raises(TypeError, match=r"prompts\[1\]"):
        kjv.generate(["a", 5], max_new_tokens=2)
    # One prompt where several are given is refused, not run as their
    # concatenation: stream takes one prompt, and an ids array of several
    # rows is not one sequence ([1, n] is).
    with pytest.raises(TypeError, match="one prompt"):
        list(kjv.stream([[1, 2], [3, 4]], 3))
    with pytest.raises(TypeError, match="one prompt"):
        list(kjv.stream(["And", "God"], 3))
    with pytest.raises(transformer.ShapeError, match="one sequence"):
        kjv.generate(np.array([[1, 2], [3, 4]]), 3)
    with pytest.raises(transformer.ShapeError, match="one sequence"):
        list(kjv.stream(np.array([[1, 2], [3, 4]]), 3))
    assert kjv.generate(np.array([[1, 2, 3]]), 3) == \
        kjv.generate([1, 2, 3], 3)


def padded_greedy(ref, prompts, max_new_tokens, n_heads, pad=0):
    """HF generate's greedy decoding of a left-padded batch, full forwards:
    returns (new ids per sequence, per step the [B, vocab] logits)."""
    B = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.full((B, width), pad, dtype=torch.long)
    mask = torch.zeros((B, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    new, steps = [[] for _ in range(B)], []
    for _ in range(max_new_tokens):
        L = ids.shape[1]
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        h = ref.token_embedding(ids) + ref.position_embedding(position_ids)
        # causal and key padding, additive; finite so that the padding's
        # own rows (which see no key) stay finite
        allowed = torch.tril(torch.ones(L, L, dtype=torch.bool))[None] & \
            mask.bool()[:, None, :]
        add = torch.zeros(B, L, L).masked_fill(~allowed, -1e9)
        add = add.repeat_interleave(n_heads, dim=0)
        for layer in ref.layers:
            h = layer(h, src_mask=add)
        h = ref.norm(h)
        w = (ref.token_embedding.weight if ref.c["tied_embeddings"]
             else ref.lm_head.weight)
        logits = h[:, -1] @ w.T
        steps.append(logits.detach().numpy())
        nxt = logits.argmax(-1)
        for i in range(B):
            new[i].append(int(nxt[i]))
        ids = torch.cat([ids, nxt[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones(B, 1, dtype=torch.long)], dim=1)
    return new, steps


def test_greedy_batch_equals_left_padded_pytorch(kjv):
    c = kjv.config
    ref = TorchModel(c)
    missing, unexpected = ref.load_state_dict(
        {k: torch.from_numpy(v.copy()) for k, v in kjv.state_dict().items()},
        strict=False)
    assert not unexpected
    ref.eval()
    prompts = [kjv.tokenizer.encode(p) for p in PROMPTS]
    M = 24
    assert max(len(p) for p in prompts) + M <= c["context_length"]
    with torch.no_grad():
        ref_new, steps = padded_greedy(ref, prompts, M, c["n_heads"])
    ours = kjv.generate(prompts, max_new_tokens=M)
    assert ours == ref_new
    # Each sequence's logits at every step: the padded batch's against our
    # pass over the sequence alone (what the batch's rows equal, C test).
    for i, p in enumerate(prompts):
        seq = np.asarray(p + ours[i], np.int32)
        alone = kjv.logits(seq)[len(p) - 1:len(p) - 1 + M]
        assert_close(alone, np.stack([s[i] for s in steps]))

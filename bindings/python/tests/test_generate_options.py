"""Stopping and shaping (tfm_generator / tfm_model_generate_v2 through
model.generate and model.stream) against a reference written here from
Hugging Face's definitions (transformers/generation/logits_process.py and
stopping_criteria.py), in PyTorch: every step recomputes the logits of the
tokens the cache holds with model.logits (no KV cache): past the context
length W, with past_context="auto" on these models with learned positions,
the half-window shift (once W tokens are held, the next token restarts the
window at the last ceil(W/2) tokens), with "reencode" the last W tokens;
then applies
RepetitionPenaltyLogitsProcessor, NoRepeatNGramLogitsProcessor and
MinNewTokensLengthLogitsProcessor as HF writes them, then argmax (or the
library's Sampler, whose draws test_sampling checks), then the EOS and
stop-string criteria."""

import numpy as np
import pytest
import torch

import transformer
from conftest import TEST_MODELS, model_path_or_skip

SMALL = TEST_MODELS / "decoder_learned_prenorm_gelu.safetensors"


def hf_repetition_penalty(input_ids, scores, penalty):
    # RepetitionPenaltyLogitsProcessor.__call__
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


def hf_no_repeat_ngram(input_ids, scores, n):
    # NoRepeatNGramLogitsProcessor via _get_ngrams/_get_generated_ngrams
    tokens = input_ids[0].tolist()
    cur_len = len(tokens)
    if cur_len + 1 < n:
        return scores
    ngrams = {}
    for ngram in zip(*[tokens[i:] for i in range(n)]):
        ngrams.setdefault(tuple(ngram[:-1]), []).append(ngram[-1])
    banned = ngrams.get(tuple(tokens[cur_len + 1 - n:cur_len]), [])
    scores = scores.clone()
    scores[0, banned] = -float("inf")
    return scores


def reference(model, prompt, max_new_tokens, eos=(), min_new_tokens=0,
              repetition_penalty=1.0, no_repeat_ngram_size=0,
              stop_strings=(), sampler=None, past_context="auto"):
    """The ids generate should return (decoder-only, greedy unless a
    Sampler is given)."""
    ctx = model.config["context_length"]
    seq = list(prompt)
    new = []
    start = 0                   # the first token the cache holds
    for _ in range(max_new_tokens):
        if past_context == "reencode":
            start = max(0, len(seq) - ctx)
        elif len(seq) - start > ctx:
            start = len(seq) - (ctx - ctx // 2)
        window = seq[start:]
        scores = torch.tensor(model.logits(window)[-1][None], dtype=torch.float32)
        input_ids = torch.tensor([seq])
        if repetition_penalty != 1.0:
            scores = hf_repetition_penalty(input_ids, scores,
                                           repetition_penalty)
        if no_repeat_ngram_size:
            scores = hf_no_repeat_ngram(input_ids, scores,
                                        no_repeat_ngram_size)
        if len(new) < min_new_tokens and eos:
            scores[0, list(eos)] = -float("inf")
        if sampler is None:
            token = int(torch.argmax(scores[0]))
        else:
            token = sampler(scores[0].numpy())
        seq.append(token)
        new.append(token)
        if token in eos:
            break
        if stop_strings:
            text = model.tokenizer.decode(new)
            if any(s in text for s in stop_strings):
                break
    return new


@pytest.fixture(scope="module")
def kjv():
    return transformer.load_model(model_path_or_skip())


@pytest.fixture(scope="module")
def small():
    return transformer.load_model(SMALL)


def test_plain_generate_unchanged(small):
    # The default path equals argmax over full passes of the tokens the
    # cache holds, past the context (12) too: the half-window shift.
    want = reference(small, [1, 2, 3], 40)
    assert small.generate([1, 2, 3], 40) == want
    assert want != reference(small, [1, 2, 3], 40, past_context="reencode")


def test_past_context_reencode(small):
    # past_context="reencode": every token past the context encodes the
    # last 12 tokens afresh (1.0's behaviour, and tfm_model_generate's).
    kw = dict(repetition_penalty=1.3)
    want = reference(small, [1, 2, 3], 40, past_context="reencode", **kw)
    assert small.generate([1, 2, 3], 40, past_context="reencode",
                          **kw) == want
    assert list(small.stream([1, 2, 3], 40, past_context="reencode",
                             **kw)) == want
    with pytest.raises(transformer.InvalidArgumentError,
                       match="past_context"):
        small.generate([1, 2, 3], 5, past_context="roll")


def test_past_context_logits(small):
    # Every step's logits, not only its argmax: with temperature sampling
    # a different logit at any step changes the draws that follow.
    sampler = transformer.Sampler(temperature=1.5, seed=11)
    want = reference(small, [7], 60, sampler=sampler)
    assert small.generate([7], 60, temperature=1.5, seed=11) == want


@pytest.mark.parametrize("kw", [
    dict(repetition_penalty=1.5),
    dict(repetition_penalty=0.7),
    dict(no_repeat_ngram_size=1),
    dict(no_repeat_ngram_size=2),
    dict(no_repeat_ngram_size=3, repetition_penalty=1.2),
])
def test_processors_greedy(small, kw):
    want = reference(small, [1, 2, 3, 1, 2], 25, **kw)
    assert small.generate([1, 2, 3, 1, 2], 25, **kw) == want


def test_processors_change_the_output(kjv):
    # So that the comparisons above cannot pass with processors ignored.
    prompt = kjv.tokenizer.encode("And the LORD said unto Moses, ")
    plain = kjv.generate(prompt, 80)
    for kw in (dict(repetition_penalty=1.3), dict(no_repeat_ngram_size=3)):
        ours = kjv.generate(prompt, 80, **kw)
        assert ours != plain, kw
        assert ours == reference(kjv, prompt, 80, **kw), kw
    # no_repeat_ngram_size really holds: no 3-gram twice.
    seq = prompt + kjv.generate(prompt, 80, no_repeat_ngram_size=3)
    grams = [tuple(seq[i:i + 3]) for i in range(len(seq) - 2)]
    assert len(grams) == len(set(grams))


def test_sampled_processors(small):
    kw = dict(repetition_penalty=1.4, no_repeat_ngram_size=2)
    want = reference(small, [4, 5], 30, sampler=transformer.Sampler(
        temperature=0.8, top_k=5, seed=3), **kw)
    assert small.generate([4, 5], 30, temperature=0.8, top_k=5, seed=3,
                          **kw) == want


def test_eos_and_min_new_tokens(kjv):
    prompt = kjv.tokenizer.encode("In the beginning")
    plain = kjv.generate(prompt, 60)
    eos = plain[10]                       # a token greedy decoding meets
    first = plain.index(eos)
    out = kjv.generate(prompt, 60, eos_token_id=eos)
    assert out == plain[:first + 1]       # EOS returned, then stop
    assert out == reference(kjv, prompt, 60, eos=(eos,))
    # min_new_tokens masks it until then: another continuation.
    out = kjv.generate(prompt, 60, eos_token_id=[eos], min_new_tokens=first + 2)
    assert len(out) >= first + 2 and eos not in out[:first + 2]
    assert out == reference(kjv, prompt, 60, eos=(eos,),
                            min_new_tokens=first + 2)
    # Several EOS ids: the first met ends it.
    two = [plain[20], plain[5]]
    n = min(plain.index(t) for t in two) + 1
    assert kjv.generate(prompt, 60, eos_token_id=two) == plain[:n]


def test_stop_strings_across_tokens(kjv):
    text = kjv.generate("And God said", 100)
    # A stop string of several characters (tokens), ending mid-text.
    stop = text[30:34]
    assert len(stop) == 4 and text.find(stop) >= 0
    end = text.find(stop) + len(stop)
    assert kjv.generate("And God said", 100, stop_strings=[stop]) == text[:end]
    assert kjv.generate("And God said", 100, stop_strings=stop) == text[:end]
    # The earliest of several; one never met changes nothing.
    other = text[50:53]
    end2 = min(end, text.find(other) + len(other))
    assert kjv.generate("And God said", 100,
                        stop_strings=["@@@", stop, other]) == text[:end2]
    ids = kjv.tokenizer.encode("And God said")
    assert kjv.tokenizer.decode(reference(
        kjv, ids, 100, stop_strings=[stop])) == text[:end]
    # The prompt's text is not searched.
    assert kjv.generate("And God said", 20, stop_strings=["God"]) == \
        kjv.generate("And God said", 20)


def test_stream_yields_what_generate_returns(kjv):
    kw = dict(max_new_tokens=50, repetition_penalty=1.2, stop_strings=["LORD"])
    pieces = list(kjv.stream("And God said", **kw))
    assert len(pieces) > 1
    assert "".join(pieces) == kjv.generate("And God said", **kw)
    ids = kjv.tokenizer.encode("And God said")
    assert list(kjv.stream(ids, max_new_tokens=30, seed=4)) == \
        kjv.generate(ids, 30, seed=4)
    # Breaking out early is fine, and the model stays usable.
    for i, _ in enumerate(kjv.stream("And", max_new_tokens=1000)):
        if i == 3:
            break
    assert len(kjv.generate("And", 5)) == 5
    with pytest.raises(TypeError):
        list(kjv.stream("And", max_new_tokens=3, num_beam=2))


def _v1(model, prompt, n, sampler_kw):
    """tfm_model_generate (1.0's call, which has always taken a long
    prompt as its last context_length ids) through the low-level module."""
    from transformer import _lowlevel as _ll
    from transformer.generation import _sampling
    s, seed = _sampling(greedy=None, do_sample=None, **{
        k: sampler_kw.get(k) for k in ("temperature", "top_k", "top_p",
                                       "seed")})
    out = np.zeros(n, dtype=np.int32)
    with model._use() as ptr:
        _ll.tfmpy_model_generate(ptr, np.asarray(prompt, np.int32), s, seed,
                                 out)   # raises on a failure
    return out.tolist()


def test_long_prompt_is_its_tail(small, kjv):
    # Issue 44: a prompt longer than the context (12 here) is its last 12
    # ids in generate, stream and the batch, as tfm_model_generate takes
    # one (and transformer-generate, llama.cpp): the reference above (HF's
    # processors in PyTorch) on the tail, and tfm_model_generate on the
    # long prompt itself with past_context="reencode" (its own).
    V = small.config["vocab_size"]
    long = [(7 * i + 3) % (V - 1) + 1 for i in range(12 + 9)]
    tail = long[-12:]
    other = [(5 * i) % V for i in range(9)] + tail    # another head
    for sampled in (False, True):
        sampler = (lambda: transformer.Sampler(temperature=0.8, seed=9)) \
            if sampled else (lambda: None)
        skw = dict(temperature=0.8, seed=9) if sampled else {}
        kw = dict(repetition_penalty=1.3, no_repeat_ngram_size=2, **skw)
        want = reference(small, tail, 30, repetition_penalty=1.3,
                         no_repeat_ngram_size=2, sampler=sampler())
        assert small.generate(tail, 30, **kw) == want
        assert small.generate(long, 30, **kw) == want
        assert small.generate(other, 30, **kw) == want
        assert list(small.stream(long, max_new_tokens=30, **kw)) == want
        assert small.generate([long, [1, 2, 3], other], 30, **kw) == \
            [want, small.generate([1, 2, 3], 30, **kw), want]
        v1 = _v1(small, long, 30, skw)
        assert v1 == _v1(small, tail, 30, skw)
        assert v1 == reference(small, tail, 30, sampler=sampler(),
                               past_context="reencode")
        assert small.generate(long, 30, past_context="reencode", **skw) == v1
        assert list(small.stream(long, max_new_tokens=30,
                                 past_context="reencode", **skw)) == v1
    # Text (the shipped model, context 128): its last 128 characters.
    text = "And God said, Let there be light: and there was light. " * 3
    assert kjv.generate(text, 20, seed=4) == kjv.generate(text[-128:], 20,
                                                          seed=4)


def test_bad_input(small, kjv):
    errors = transformer
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        small.generate([], 5)
    # A prompt longer than the context (12) is taken
    # (test_long_prompt_is_its_tail), its dropped ids still checked.
    with pytest.raises(errors.InvalidArgumentError, match="prompt"):
        small.generate([small.config["vocab_size"]] + list(range(1, 14)), 5)
    vocab = small.config["vocab_size"]
    for bad in (vocab, -1):
        with pytest.raises(errors.InvalidArgumentError, match="vocabulary"):
            small.generate([1, 2], 5, eos_token_id=bad)
    with pytest.raises(errors.InvalidArgumentError, match="vocabulary"):
        small.generate([1, 2], 5, eos_token_id=2**40)
    with pytest.raises(errors.InvalidArgumentError, match="repetition"):
        small.generate([1, 2], 5, repetition_penalty=0)
    with pytest.raises(errors.InvalidArgumentError):
        small.generate([1, 2], 5, no_repeat_ngram_size=-1)
    with pytest.raises(errors.InvalidArgumentError):
        small.generate([1, 2], 5, min_new_tokens=-1)
    with pytest.raises(errors.InvalidArgumentError, match="empty"):
        kjv.generate("And", 5, stop_strings=[""])
    with pytest.raises(errors.InvalidArgumentError, match="tokenizer"):
        small.generate([1, 2], 5, stop_strings=["a"])
    with pytest.raises(errors.InvalidArgumentError, match="TFM_MAX_NEW"):
        small.generate([1, 2], 2**30)
    with pytest.raises(errors.InvalidArgumentError, match="temperature"):
        small.generate([1, 2], 5, do_sample=True, temperature=-1)


def test_past_key_values_prefix_reuse(kjv, small):
    # A chat whose every prompt is the conversation so far, generated in
    # one KVCache (prefix reuse): each turn equals the full-pass reference,
    # and afterwards the cache holds the prompt and the new tokens but the
    # last (the one not yet fed).
    cache = kjv.kv_cache()
    conv = kjv.tokenizer.encode("And God said")
    user = kjv.tokenizer.encode(" Amen. ")
    for turn in range(3):           # 12+40, +7+40, +7+40 > 128: the shift
        kw = dict(seed=3, temperature=0.8) if turn == 1 else {}
        new = kjv.generate(conv, 40, past_key_values=cache, **kw)
        sampler = transformer.Sampler(temperature=0.8, seed=3) if kw else None
        assert new == reference(kjv, conv, 40, sampler=sampler)
        if len(conv) + 40 <= 128:
            assert len(cache) == len(conv) + 40 - 1
        conv = conv + new + user
    # The same through stream(), and a prompt that leaves the cached prefix.
    cache.reset()
    assert list(kjv.stream("And God", 20, past_key_values=cache)) == \
        list(kjv.stream("And God", 20))
    assert kjv.generate("And Gox", 20, past_key_values=cache) == \
        kjv.generate("And Gox", 20)
    # Learned positions past the context (12): the half-window shift is
    # the same with the cache.
    sc = small.kv_cache()
    assert small.generate([1, 2, 3], 30, past_key_values=sc) == \
        reference(small, [1, 2, 3], 30)


def test_past_key_values_errors(kjv, small):
    cache = kjv.kv_cache()
    with pytest.raises(transformer.InvalidArgumentError, match="this model"):
        small.generate([1, 2], 5, past_key_values=cache)
    with pytest.raises(transformer.InvalidArgumentError, match="this model"):
        kjv.generate("And", 5, past_key_values="cache")
    with pytest.raises(transformer.InvalidArgumentError, match="context"):
        kjv.generate("And", 5, past_key_values=kjv.kv_cache(64))
    with pytest.raises(transformer.InvalidArgumentError, match="beam"):
        kjv.generate("And", 5, num_beams=2, past_key_values=cache)
    with pytest.raises(transformer.UnsupportedError):
        kjv.kv_cache(rolling=True)          # learned positions
    # RoPE, no positions: "auto" rolls, and so must the cache (a plain one
    # would shift: other tokens past the context than without it).
    rope = transformer.Model(dict(
        architecture="decoder_only", vocab_size=11, d_model=16, n_heads=4,
        d_ff=24, context_length=6, n_layers=2, positional="none",
        attention=dict(rope="adjacent")))
    plain = rope.kv_cache()
    plain.decode([1, 2])
    with pytest.raises(transformer.InvalidArgumentError, match="rolling"):
        rope.generate([1, 2, 3], 20, past_key_values=plain)
    assert len(plain) == 2
    assert rope.generate([1, 2, 3], 20,
                         past_key_values=rope.kv_cache(rolling=True)) == \
        rope.generate([1, 2, 3], 20)
    assert rope.generate([1, 2, 3], 20, past_key_values=plain,
                         past_context="reencode") == \
        rope.generate([1, 2, 3], 20, past_context="reencode")
    # One generation at a time per cache: while a stream is running, the
    # cache refuses another generation, decode and reset (BusyError).
    it = kjv.stream("And", 10, past_key_values=cache)
    next(it)
    with pytest.raises(transformer.BusyError):
        kjv.generate("And", 5, past_key_values=cache)
    with pytest.raises(transformer.BusyError):
        cache.decode([1])
    with pytest.raises(transformer.BusyError):
        cache.reset()
    rest = list(it)                     # runs to the end and closes
    assert len(rest) == 9
    assert kjv.generate("And", 5, past_key_values=cache) == \
        kjv.generate("And", 5)


def test_past_key_values_claimed_while_created(kjv, monkeypatch):
    # The cache is taken before the generator is made: while another
    # thread's generation in it is being created (its prefill), a second
    # generation, decode and reset are refused (BusyError), not run on the
    # same cache at once.
    import threading
    from transformer import models
    cache = kjv.kv_cache()
    real = models._ll.tfmpy_generator_create
    entered, go = threading.Event(), threading.Event()

    def slow(*args):
        if threading.current_thread() is not threading.main_thread():
            entered.set()
            go.wait(10)
        return real(*args)
    monkeypatch.setattr(models._ll, "tfmpy_generator_create", slow)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "a", kjv.generate("And God", 10, past_key_values=cache)))
    t.start()
    assert entered.wait(10)
    try:
        with pytest.raises(transformer.BusyError):
            kjv.generate("And", 5, past_key_values=cache)
        with pytest.raises(transformer.BusyError):
            cache.decode([1])
        with pytest.raises(transformer.BusyError):
            cache.reset()
    finally:
        go.set()
        t.join()
    assert result["a"] == kjv.generate("And God", 10)
    assert len(cache) == len("And God") + 10 - 1
    # A failed creation gives the cache back.
    with pytest.raises(transformer.InvalidArgumentError):
        kjv.generate("And", 5, past_key_values=cache, repetition_penalty=0)
    assert kjv.generate("And", 5, past_key_values=cache) == \
        kjv.generate("And", 5)


def test_cli_options_match_generate(kjv):
    import os
    import subprocess
    cli = os.environ.get("TRANSFORMER_GENERATE")
    if not cli:
        pytest.skip("TRANSFORMER_GENERATE (transformer-generate) not set")
    prompt = "And God said"
    for args, kw, reason in (
            (["--stop", "LORD", "--stop", "@@"],
             dict(stop_strings=["LORD", "@@"]), "stop string"),
            (["--repetition-penalty", "1.3", "--no-repeat-ngram-size", "3",
              "--seed", "5", "--top-k", "8"],
             dict(repetition_penalty=1.3, no_repeat_ngram_size=3, seed=5,
                  top_k=8), "max-tokens reached"),
            (["--eos-token-id", "1", "--min-new-tokens", "3"],
             dict(eos_token_id=1, min_new_tokens=3), "end-of-sequence")):
        r = subprocess.run([cli, "--model", model_path_or_skip(), "--prompt",
                            prompt, "--max-new-tokens", "90"] + args,
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert r.stdout == prompt + kjv.generate(prompt, 90, **kw) + "\n"
        assert f"stopped: {reason}" in r.stderr
    # A prompt longer than the context (128): taken as tfm_model_generate
    # takes one (issue 44): its last 128 characters are the model's input,
    # the whole prompt is printed.
    long = "And God said, Let there be light: and there was light. " * 3
    r = subprocess.run([cli, "--model", model_path_or_skip(), "--prompt",
                        long, "--max-new-tokens", "30"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "its last 128 are the model's input" in r.stderr
    assert r.stdout == long + kjv.generate(long[-128:], 30) + "\n"
    r = subprocess.run([cli, "--stop", ""], capture_output=True, text=True)
    assert r.returncode == 1 and "--stop" in r.stderr

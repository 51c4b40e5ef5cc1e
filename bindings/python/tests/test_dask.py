"""Batch generation over a Dask cluster (transformer.dask): a LocalCluster
of 2 worker processes gives exactly the local model.generate results, in
the order of the prompts, for the shipped model and for a model made here
with random weights (so it is the client's weights that travel, not a file
the workers could read); each worker loads a model once for many calls;
errors are clear.  Needs Debian's python3-distributed
(tools/install-deps.sh)."""

import logging

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
# tornado 6.2 under distributed 2022.12 (Debian 12)
pytestmark = pytest.mark.filterwarnings(
    "ignore:make_current is deprecated:DeprecationWarning")

import transformer  # noqa: E402
import transformer.dask as tdask  # noqa: E402

# Six prompts of different lengths (one of them token ids).
PROMPTS = ["And God said", "In the beginning", "A",
           "And it came to pass, when the men of the city saw",
           [30, 42, 45, 1, 31, 48], "Blessed are the poor in spirit: for "]


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                  processes=True, dashboard_address=":0",
                                  silence_logs=logging.ERROR) as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def model():
    return transformer.load_model()


def _local(model, prompts, **kwargs):
    return [model.generate(p, **kwargs) for p in prompts]


def _loads(client):
    """{worker address: models that worker process has loaded so far}."""
    return {w: n for w, (_, n) in client.run(tdask._cached_keys).items()}


def test_greedy_and_sampled_equal_local(client, model):
    greedy = tdask.generate(client, model, PROMPTS, max_new_tokens=40)
    assert greedy == _local(model, PROMPTS, max_new_tokens=40)
    assert [type(r) for r in greedy] == [str] * 4 + [list, str]
    assert len(set(map(str, greedy))) == len(PROMPTS)   # not one answer
    sampled = dict(max_new_tokens=40, temperature=0.8, top_p=0.9, seed=7)
    # uneven chunks (4 + 2) and one prompt per task
    for chunk_size in (4, 1):
        assert tdask.generate(client, model, PROMPTS, chunk_size=chunk_size,
                              **sampled) == _local(model, PROMPTS, **sampled)
    beams = dict(max_new_tokens=12, num_beams=3)
    assert tdask.generate(client, model, PROMPTS[:3], **beams) == \
        _local(model, PROMPTS[:3], **beams)


def test_random_weights_travel(client, model):
    transformer.manual_seed(11)
    fresh = transformer.Model(dict(
        architecture="decoder_only", vocab_size=model.config["vocab_size"],
        d_model=32, n_heads=4, d_ff=64, n_layers=2, context_length=64,
        norm_first=True, activation="gelu", tied_embeddings=True))
    fresh.tokenizer = transformer.Tokenizer(model.tokenizer.vocab)
    before = _loads(client)
    kwargs = dict(max_new_tokens=30, temperature=1.0, seed=3)
    ours = tdask.generate(client, fresh, PROMPTS, **kwargs)
    assert ours == _local(fresh, PROMPTS, **kwargs)
    assert ours != _local(model, PROMPTS, **kwargs)
    # a second call: the workers use the model they loaded (each has loaded
    # it at most once, and some worker has)
    again = tdask.generate(client, fresh, PROMPTS, max_new_tokens=30)
    assert again == _local(fresh, PROMPTS, max_new_tokens=30)
    after = _loads(client)
    assert all(after[w] - before.get(w, 0) <= 1 for w in after), (before, after)
    assert sum(after.values()) > sum(before.values())
    # the bytes are the model file: Model.load reads the same weights back
    data = tdask.model_bytes(fresh)
    assert data == tdask.model_bytes(fresh)      # so the key is stable
    copy = tdask._load(data, None)
    for name, value in fresh.state_dict().items():
        np.testing.assert_array_equal(copy.state_dict()[name], value)
    assert copy.tokenizer.vocab == model.tokenizer.vocab


def test_ship_once_for_several_calls(client, model):
    ids_model = transformer.Model(dict(
        architecture="decoder_only", vocab_size=20, d_model=16, n_heads=2,
        d_ff=32, n_layers=1, context_length=32))
    prompts = [[1, 2, 3], [4], [5, 6, 7, 8, 9]]
    with tdask.ship(client, ids_model) as shipped:
        assert "bytes" in repr(shipped)
        for seed in (1, 2):
            assert shipped.generate(prompts, max_new_tokens=8, seed=seed) == \
                _local(ids_model, prompts, max_new_tokens=8, seed=seed)
        # no tokenizer: str prompts are refused before anything runs
        with pytest.raises(transformer.InvalidArgumentError,
                           match="no tokenizer"):
            shipped.generate(["text"])
    with pytest.raises(ValueError, match="released"):
        tdask.generate(client, shipped, prompts)


def test_errors(client, model):
    with pytest.raises(TypeError, match="distributed.Client"):
        tdask.generate("tcp://127.0.0.1:8786", model, PROMPTS)
    with pytest.raises(TypeError, match="distributed.Client"):
        tdask.generate(None, model, PROMPTS)
    with pytest.raises(TypeError, match="transformer.Model"):
        tdask.generate(client, "kjv-char.safetensors", PROMPTS)
    with pytest.raises(TypeError, match="not one str"):
        tdask.generate(client, model, "And God said")
    with pytest.raises(TypeError, match="list of prompts"):
        tdask.generate(client, model, 3)
    with pytest.raises(ValueError, match="empty"):
        tdask.generate(client, model, [])
    with pytest.raises(ValueError, match="chunk_size"):
        tdask.generate(client, model, PROMPTS, chunk_size=0)
    with pytest.raises(TypeError, match="max_tokens"):
        tdask.generate(client, model, PROMPTS, max_tokens=5)
    # a failure on a worker comes back with its type, message and prompt
    # (a prompt longer than the context is no failure: test_long_prompt)
    bad = [1, model.config["vocab_size"]]
    with pytest.raises(transformer.InvalidArgumentError,
                       match="vocabulary") as info:
        tdask.generate(client, model, ["And", "God", bad], max_new_tokens=2,
                       chunk_size=2)
    assert "prompt 2" in " ".join(getattr(info.value, "__notes__", []))
    # and the cluster still works after it
    assert tdask.generate(client, model, ["And"], max_new_tokens=5) == \
        _local(model, ["And"], max_new_tokens=5)


def test_long_prompt(client, model):
    # Issue 44: a prompt longer than the context (128) is its last 128
    # characters on a worker too, as locally, greedy and sampled.
    long = "And God said, Let there be light: and there was light. " * 3
    for kw in (dict(max_new_tokens=20),
               dict(max_new_tokens=20, temperature=0.8, seed=7)):
        got = tdask.generate(client, model, [long, "And", long], **kw)
        want = model.generate(long[-128:], **kw)
        assert got == [want, model.generate("And", **kw), want]


def test_readme_example(model):
    """docs/USAGE.md's "Generating on a Dask cluster" runs and gives the
    local texts."""
    import pathlib
    import re
    readme = (pathlib.Path(__file__).resolve().parents[3] / "docs" /
              "USAGE.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
              if "transformer.dask" in b]
    assert len(blocks) == 1
    code = blocks[0].replace("print(", "(lambda *a: None)(")
    # any free port for the dashboard: 8787 may be taken (a parallel run)
    code = code.replace("threads_per_worker=1)",
                        "threads_per_worker=1, dashboard_address=\":0\")")
    assert "dashboard_address" in code
    env = {"__name__": "__main__"}
    exec(compile(code, "docs/USAGE.md", "exec"), env)
    assert env["texts"] == _local(model, env["prompts"], max_new_tokens=100,
                                  temperature=0.8, top_p=0.9, seed=1)

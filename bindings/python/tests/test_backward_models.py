"""Model.backward against torch.autograd (torch 1.13): a torch module
written here with our models' structure and parameter names (token and
learned position embeddings, optionally scaled by sqrt(d_model);
nn.TransformerEncoderLayer blocks, causal for decoder-only, and a final
LayerNorm; nn.Transformer for encoder-decoder; a tied or separate head),
loaded with our model's weights.  The loss is torch's cross entropy of
the logits against random targets; its gradient with respect to the
logits goes to Model.backward, and every parameter's gradient by name must
equal torch's within 1e-4 of the largest magnitude."""

import numpy as np
import pytest
import torch

import transformer
from grad_check import close
from torch_models import TorchModel


CASES = [(a, tied, nf) for a in ("decoder_only", "encoder_only",
                                 "encoder_decoder")
         for tied in (True, False) for nf in (False, True)]


@pytest.mark.parametrize("arch,tied,norm_first", CASES)
def test_model_backward_matches_autograd(arch, tied, norm_first):
    cfg = dict(architecture=arch, vocab_size=11, d_model=12, n_heads=3,
               d_ff=20, context_length=8, norm_first=norm_first,
               activation="gelu", tied_embeddings=tied,
               embedding_scale=not tied)
    if arch == "encoder_decoder":
        cfg.update(n_encoder_layers=2, n_decoder_layers=2)
    else:
        cfg["n_layers"] = 2
    transformer.manual_seed(5)
    ours = transformer.Model(cfg)
    ref = TorchModel(ours.config)
    sd = {k: torch.from_numpy(v.copy()) for k, v in ours.state_dict().items()}
    missing, unexpected = ref.load_state_dict(sd, strict=False)
    assert not unexpected
    assert not [k for k in missing if k != "lm_head.weight" or not tied]
    torch.manual_seed(6)
    ids = torch.randint(0, 11, (2, 6))
    tgt = torch.randint(0, 11, (2, 5)) if arch == "encoder_decoder" else None
    targets = torch.randint(0, 11, (2, 6 if tgt is None else 5))
    logits = ref(ids, tgt)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11),
                                             targets.reshape(-1))
    (dlogits,) = torch.autograd.grad(loss, logits, retain_graph=True)
    loss.backward()
    ours.train()
    got = ours.logits(ids.numpy()) if tgt is None else \
        ours.logits(ids.numpy(), tgt.numpy())
    close(got, logits.detach(), 1e-4)
    assert ours.backward(dlogits.numpy()) is None
    for name, p in ref.named_parameters():
        close(ours.grad(name), p.grad, 1e-4)


def test_model_backward_errors_and_accumulation():
    cfg = dict(architecture="decoder_only", vocab_size=9, d_model=8,
               n_heads=2, d_ff=16, n_layers=1, context_length=6)
    transformer.manual_seed(2)
    m = transformer.Model(cfg)
    ids = np.array([[1, 2, 3, 4]], np.int32)
    with pytest.raises(transformer.InvalidArgumentError):
        m.backward(np.zeros((1, 4, 9), np.float32))   # no training call
    m.train()
    m.logits(ids)
    g = np.random.default_rng(0).standard_normal((1, 4, 9)).astype(np.float32)
    m.backward(g)
    once = m.grad("token_embedding.weight").copy()
    m.backward(g)
    close(m.grad("token_embedding.weight"), 2 * once, 1e-5)
    with pytest.raises(transformer.ShapeError):
        m.backward(np.zeros((1, 5, 9), np.float32))
    bad = g.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(transformer.NonFiniteError):
        m.backward(bad)
    close(m.grad("token_embedding.weight"), 2 * once, 1e-5)


def test_unbatched_model_backward():
    """An unbatched logits call ([L] ids) takes [L, V] grad_logits, the same
    gradients as the batched call; another shape names the logits' shape."""
    cfg = dict(architecture="decoder_only", vocab_size=9, d_model=8,
               n_heads=2, d_ff=16, n_layers=1, context_length=6)
    transformer.manual_seed(4)
    m = transformer.Model(cfg).train()
    ids = np.array([1, 2, 3, 4], np.int32)
    g = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    m.logits(ids)
    m.backward(g)
    once = m.grad("token_embedding.weight").copy()
    m.zero_grad()
    m.logits(ids[None])
    m.backward(g[None])
    np.testing.assert_array_equal(m.grad("token_embedding.weight"), once)
    m.logits(ids)
    with pytest.raises(transformer.ShapeError, match=r"\[4, 9\]"):
        m.backward(g[None])


@pytest.mark.parametrize("arch,tied,norm_first",
                         [c for c in CASES if c[0] != "encoder_decoder"])
def test_loss_backward_matches_autograd(arch, tied, norm_first):
    # Model.loss_backward (tfm_model_loss_backward: one forward for the
    # loss and the backward) against torch.autograd of
    # (cross_entropy(..., ignore_index, label_smoothing) * 0.25).backward().
    cfg = dict(architecture=arch, vocab_size=11, d_model=12, n_heads=3,
               d_ff=20, context_length=8, norm_first=norm_first,
               activation="gelu", tied_embeddings=tied,
               embedding_scale=not tied, n_layers=2)
    transformer.manual_seed(7)
    ours = transformer.Model(cfg)
    ref = TorchModel(ours.config)
    sd = {k: torch.from_numpy(v.copy()) for k, v in ours.state_dict().items()}
    ref.load_state_dict(sd, strict=False)
    torch.manual_seed(8)
    ids = torch.randint(0, 11, (3, 7))
    targets = torch.randint(0, 11, (3, 7))
    targets[0, 2] = targets[2, 6] = -100
    for reduction in ("mean", "sum"):
        ref.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            ref(ids, None).reshape(-1, 11), targets.reshape(-1),
            ignore_index=-100, label_smoothing=0.1, reduction=reduction)
        (loss * 0.25).backward()
        ours.train()
        ours.zero_grad()
        got = ours.loss_backward(ids.numpy(), targets.numpy(),
                                 label_smoothing=0.1, reduction=reduction,
                                 grad_scale=0.25)
        assert abs(got - float(loss)) <= 1e-5 * abs(float(loss))
        for name, p in ref.named_parameters():
            close(ours.grad(name), p.grad, 1e-4)
    # Refusals change no gradient.
    before = ours.grad("token_embedding.weight").copy()
    bad = targets.numpy().copy()
    bad[1, 1] = 11
    with pytest.raises(transformer.InvalidArgumentError, match="target"):
        ours.loss_backward(ids.numpy(), bad)
    with pytest.raises(transformer.ShapeError):
        ours.loss_backward(ids.numpy(), targets.numpy()[:, :5])
    with pytest.raises(transformer.InvalidArgumentError, match="reduction"):
        ours.loss_backward(ids.numpy(), targets.numpy(), reduction="none")
    np.testing.assert_array_equal(ours.grad("token_embedding.weight"), before)

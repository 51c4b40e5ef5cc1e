"""Helpers of the backward-pass tests: compare with torch.autograd."""

import numpy as np
import torch


def close(ours, ref, tol=2e-5):
    """ours equals ref (a tensor or array) within tol of its largest
    magnitude (at least 1): float32 accumulation-order differences."""
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=tol * scale)


def load(ours, ref):
    """Copies torch module ref's state dict into our module."""
    ours.load_state_dict({k: v.detach().numpy()
                          for k, v in ref.state_dict().items()})

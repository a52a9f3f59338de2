"""The small tabular MLP in torch, and a synthetic batch for it: what chapter *CPU or GPU?
Cost per prediction* and the labs *Small model: CPU or GPU?*, *Dynamic batching* and
*Compile, fuse, calibrate* time. Its counts (parameters, FLOPs, bytes, kernels) and the
latency model are `tabular`'s, which needs no torch.
"""

from __future__ import annotations

from . import device as _device
from . import validate as _v
from .tabular import (DEFAULT_FEATURES, DEFAULT_HIDDEN, DEFAULT_OUTPUTS, check_batch,
                      layer_widths)


def mlp(n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN, n_outputs=DEFAULT_OUTPUTS, *,
        dtype="fp32", device="cpu", seed=0):
    """The MLP as a torch.nn.Sequential in eval mode (weights seeded), on `device`."""
    import torch

    w = layer_widths(n_features, hidden, n_outputs)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        layers = []
        for i, (a, b) in enumerate(zip(w[:-1], w[1:])):
            layers.append(torch.nn.Linear(a, b))
            if i < len(w) - 2:
                layers.append(torch.nn.ReLU())
        model = torch.nn.Sequential(*layers)
    finally:
        torch.random.set_rng_state(gen_state)
    return model.to(device=device, dtype=_device.torch_dtype(dtype)).eval()


def synthetic_batch(batch, n_features=DEFAULT_FEATURES, *, n_categorical=8, categories=4,
                    dtype="fp32", device="cpu", seed=0):
    """A tabular batch [batch, n_features]: standardised numeric columns (normal, mean 0,
    variance 1) followed by `n_categorical` one-hot encoded columns of `categories`
    levels each (n_categorical x categories columns)."""
    import torch

    b = check_batch(batch)
    n_features = _v.count("n_features", n_features, maximum=1 << 24)
    n_categorical = _v.count("n_categorical", n_categorical, minimum=0, maximum=1 << 20)
    categories = _v.count("categories", categories, minimum=1, maximum=1 << 20)
    n_onehot = n_categorical * categories
    if not 0 <= n_onehot <= n_features:
        raise ValueError(f"{n_categorical} categorical columns x {categories} levels "
                         f"= {n_onehot} one-hot columns do not fit in {n_features} features")
    gen = torch.Generator().manual_seed(seed)
    numeric = torch.randn(b, n_features - n_onehot, generator=gen)  # [batch, numeric]
    parts = [numeric]
    if n_categorical:
        codes = torch.randint(0, categories, (b, n_categorical), generator=gen)
        onehot = torch.nn.functional.one_hot(codes, categories).reshape(b, n_onehot)
        parts.append(onehot.float())  # [batch, n_categorical * categories]
    x = torch.cat(parts, dim=1)
    return x.to(device=device, dtype=_device.torch_dtype(dtype))

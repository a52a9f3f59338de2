"""A small model on tabular data: an MLP, its parameters, FLOPs and bytes, a synthetic
batch, and a latency model of fixed per-kernel overhead plus roofline work.

Chapter: *CPU or GPU? Cost per prediction*; lab: *Small model: CPU or GPU?*. SI units:
seconds, bytes, FLOP, FLOP/s, bytes/s.

The MLP is Linear -> ReLU -> ... -> Linear. In eager PyTorch each Linear runs as one
kernel (addmm: matmul and bias together) and each ReLU as another, so a forward pass of
L hidden layers launches 2L + 1 kernels, whatever the batch. At batch 1 the work per
kernel is tiny and the fixed cost per kernel (Python and framework dispatch, and on a GPU
the launch) is most of the time; at a large batch the work dominates.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dtypes

DEFAULT_FEATURES = 64
DEFAULT_HIDDEN = (1024, 1024, 1024)
DEFAULT_OUTPUTS = 1

# NVIDIA's "Getting Started with CUDA Graphs" (Gray, 2019): time per kernel of a short
# kernel (2.9 us of GPU work) launched 20 times a step, by how it was launched.
CUDA_GRAPHS_BLOG_PER_KERNEL_S = {
    "kernel alone": 2.9e-6,
    "synchronised after each launch": 9.6e-6,
    "launched back to back": 3.8e-6,
    "replayed as a CUDA graph": 3.4e-6,
}
CUDA_GRAPHS_BLOG_URL = "https://developer.nvidia.com/blog/cuda-graphs/"


def _widths(n_features, hidden, n_outputs) -> list[int]:
    hidden = tuple(hidden)
    widths = [n_features, *hidden, n_outputs]
    for w in widths:
        if isinstance(w, bool) or int(w) != w or w <= 0:
            raise ValueError(f"layer widths must be positive integers, got n_features="
                             f"{n_features!r}, hidden={hidden!r}, n_outputs={n_outputs!r}")
    return [int(w) for w in widths]


def mlp_params(n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
               n_outputs=DEFAULT_OUTPUTS) -> int:
    """Parameters of the MLP: sum over layers of in x out weights + out biases."""
    w = _widths(n_features, hidden, n_outputs)
    return sum(a * b + b for a, b in zip(w[:-1], w[1:]))


def mlp_flops(batch=1, n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
              n_outputs=DEFAULT_OUTPUTS) -> float:
    """FLOPs of one forward pass over `batch` rows: 2 per weight per row (a multiply and an
    add); biases and ReLUs (one operation per activation, under 0.2% here) are left out."""
    w = _widths(n_features, hidden, n_outputs)
    b = _batch(batch)
    return 2.0 * b * sum(a * c for a, c in zip(w[:-1], w[1:]))


def mlp_bytes(batch=1, n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
              n_outputs=DEFAULT_OUTPUTS, dtype="fp32", *, fused=False) -> float:
    """DRAM bytes of one eager forward pass: every parameter read once, and every
    kernel's input read and output written once: each Linear reads [batch, in] and
    writes [batch, out]; each ReLU, a separate kernel in eager mode, reads and writes
    [batch, width] again; `fused=True` counts the ReLU inside the matmul kernel (an
    epilogue, as TensorRT fuses it), so it adds no traffic. Small batches may stay in
    cache."""
    w = _widths(n_features, hidden, n_outputs)
    b = _batch(batch)
    bpe = _dtypes.bytes_per_element(dtype)
    linear = sum(b * (a + c) for a, c in zip(w[:-1], w[1:]))
    relu = 0 if fused else sum(2 * b * h for h in w[1:-1])
    activations = linear + relu
    return bpe * (mlp_params(n_features, hidden, n_outputs) + activations)


def mlp_kernels(hidden=DEFAULT_HIDDEN) -> int:
    """Kernels an eager forward pass launches: one addmm per Linear, one per ReLU."""
    _widths(1, hidden, 1)
    return 2 * len(tuple(hidden)) + 1


def _batch(batch):
    if isinstance(batch, bool) or int(batch) != batch or batch <= 0:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    return int(batch)


def mlp(n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN, n_outputs=DEFAULT_OUTPUTS, *,
        dtype="fp32", device="cpu", seed=0):
    """The MLP as a torch.nn.Sequential in eval mode (weights seeded), on `device`."""
    import torch

    w = _widths(n_features, hidden, n_outputs)
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
    return model.to(device=device, dtype=_dtypes.torch_dtype(dtype)).eval()


def synthetic_batch(batch, n_features=DEFAULT_FEATURES, *, n_categorical=8, categories=4,
                    dtype="fp32", device="cpu", seed=0):
    """A tabular batch [batch, n_features]: standardised numeric columns (normal, mean 0,
    variance 1) followed by `n_categorical` one-hot encoded columns of `categories`
    levels each (n_categorical x categories columns)."""
    import torch

    b = _batch(batch)
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
    return x.to(device=device, dtype=_dtypes.torch_dtype(dtype))


def predicted_latency_s(batch, accelerator, overhead_per_kernel_s, *,
                        n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
                        n_outputs=DEFAULT_OUTPUTS, dtype="fp32"):
    """Seconds per forward pass: kernels x overhead_per_kernel_s + the roofline time of the
    work, max(bytes / bandwidth, FLOPs / peak), for `accelerator` (name or catalogue
    entry). The two add rather than overlap: a lower bound for batch 1 on an idle queue,
    a good guide when either term dominates. Vectorised over `batch`."""
    from . import hardware as _hardware

    acc = _hardware.get(accelerator)
    if not overhead_per_kernel_s >= 0:
        raise ValueError(f"overhead_per_kernel_s must be >= 0 seconds, got "
                         f"{overhead_per_kernel_s!r}")
    batches = np.atleast_1d(np.asarray(batch))
    out = []
    for b in batches:
        work = max(mlp_bytes(int(b), n_features, hidden, n_outputs, dtype) / acc.bandwidth,
                   mlp_flops(int(b), n_features, hidden, n_outputs) / acc.peak_flops(dtype))
        out.append(mlp_kernels(hidden) * overhead_per_kernel_s + work)
    return float(out[0]) if np.ndim(batch) == 0 else np.array(out)

"""A small model on tabular data: an MLP's parameters, FLOPs and bytes, and a latency
model of fixed per-kernel overhead plus roofline work. The MLP itself in torch and a
synthetic batch for it are `tabular_model`'s (this module needs no torch).

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

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v

DEFAULT_FEATURES = 64
DEFAULT_HIDDEN = (1024, 1024, 1024)
DEFAULT_OUTPUTS = 1

# NVIDIA's "Getting Started with CUDA Graphs" (Gray, 2019): time per kernel of a short
# kernel launched 20 times a step, by how it was launched. Each includes the kernel's own
# 2.9 us of GPU work: launched back to back, the overhead a kernel adds is 3.8 - 2.9 =
# 0.9 us (launches overlap the previous kernel); synchronised after each launch, 6.7 us;
# replayed as a graph, 0.5 us.
CUDA_GRAPHS_BLOG_PER_KERNEL_S = {
    "kernel alone": 2.9e-6,
    "synchronised after each launch": 9.6e-6,
    "launched back to back": 3.8e-6,
    "replayed as a CUDA graph": 3.4e-6,
}
CUDA_GRAPHS_BLOG_URL = "https://developer.nvidia.com/blog/cuda-graphs/"

#: Fixed cost of one small host <-> device copy (cudaMemcpy), seconds: NVIDIA's GDRCopy
#: README, "a cudaMemcpy can incur a 6-7us overhead" (the middle of it taken); Wu et al.
#: 2026 (DualPath, sec. 5.2, arXiv 2602.21548) measured 5-7 us per cudaMemcpyAsync. An
#: illustrative setting: measure yours (lab *Small model: CPU or GPU?*).
HOST_COPY_LATENCY_S = 6.5e-6
HOST_COPY_SOURCE = "https://github.com/NVIDIA/gdrcopy"


def layer_widths(n_features, hidden, n_outputs) -> list[int]:
    """[n_features, *hidden, n_outputs], each checked (a whole number, not too large)."""
    if isinstance(hidden, (str, bytes)) or not hasattr(hidden, "__iter__"):
        raise TypeError(f"hidden must be a tuple of layer widths, got {hidden!r}")
    hidden = tuple(hidden)
    return [_v.count("n_features", n_features, maximum=1 << 24),
            *(_v.count("each hidden width", h, maximum=1 << 24) for h in hidden),
            _v.count("n_outputs", n_outputs, maximum=1 << 24)]


def check_batch(batch) -> int:
    """`batch` checked: a whole number of rows >= 1."""
    return _v.count("batch", batch, maximum=1 << 30)


def mlp_params(n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
               n_outputs=DEFAULT_OUTPUTS) -> int:
    """Parameters of the MLP: sum over layers of in x out weights + out biases."""
    w = layer_widths(n_features, hidden, n_outputs)
    return sum(a * b + b for a, b in zip(w[:-1], w[1:]))


def mlp_ops(batch=1, n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
            n_outputs=DEFAULT_OUTPUTS, dtype="fp32", *, fused=False):
    """One eager forward pass as a table of operations (`roofline.evaluate` times it):
    a row per kernel, in the order they run. `linear{i}`: [batch, in] @ [in, out] + bias,
    2 FLOPs per weight per row (bias adds, under 0.2%, left out), reading the weights,
    the bias and its input, writing its output; `relu{i}`: a separate kernel in eager
    mode, reading and writing [batch, width]. `fused=True`: the ReLU runs inside the
    matmul kernel (an epilogue, as TensorRT fuses it) and adds no traffic. Small batches
    may stay in cache, so the bytes are an upper bound there."""
    import pandas as pd

    w = layer_widths(n_features, hidden, n_outputs)
    b = check_batch(batch)
    bpe = _dtypes.bytes_per_element(dtype)
    compute = _dtypes.canonical(dtype)
    rows = {}
    for i, (n_in, n_out) in enumerate(zip(w[:-1], w[1:])):
        rows[f"linear{i}"] = {"flops": 2.0 * b * n_in * n_out,
                              "bytes": bpe * (n_in * n_out + n_out + b * (n_in + n_out)),
                              "dtype": compute}
        if i < len(w) - 2 and not fused:
            rows[f"relu{i}"] = {"flops": float(b * n_out), "bytes": bpe * 2 * b * n_out,
                                "dtype": compute}
    return pd.DataFrame.from_dict(rows, orient="index")


def mlp_flops(batch=1, n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
              n_outputs=DEFAULT_OUTPUTS) -> float:
    """FLOPs of one forward pass over `batch` rows: 2 per weight per row (a multiply and an
    add); biases and ReLUs (one operation per activation, under 0.2% here) are left out."""
    ops = mlp_ops(batch, n_features, hidden, n_outputs)
    return float(ops.loc[ops.index.str.startswith("linear"), "flops"].sum())


def mlp_bytes(batch=1, n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
              n_outputs=DEFAULT_OUTPUTS, dtype="fp32", *, fused=False) -> float:
    """DRAM bytes of one eager forward pass: the sum of `mlp_ops`' bytes (every parameter
    read once; each kernel's input read and output written once)."""
    return float(mlp_ops(batch, n_features, hidden, n_outputs, dtype, fused=fused)["bytes"].sum())


def mlp_kernels(hidden=DEFAULT_HIDDEN) -> int:
    """Kernels an eager forward pass launches: one addmm per Linear, one per ReLU."""
    layer_widths(1, hidden, 1)
    return 2 * len(tuple(hidden)) + 1


def host_copy_s(n_bytes, link, latency_s=HOST_COPY_LATENCY_S):
    """Seconds to copy `n_bytes` between host and device over `link` (a
    `hardware.Interconnect` or its name, e.g. `hardware.host_link(acc)`: a T4 is PCIe
    Gen3 x16): a fixed `latency_s` per copy plus bytes / the link's per-direction
    bandwidth. Vectorised over `n_bytes`."""
    from gpuinfer.hardware import device_links

    ic = device_links.get_interconnect(link)
    nbytes = _v.non_negative("n_bytes", n_bytes, array=True)
    lat = _v.non_negative("latency_s", latency_s)
    return _v.scalar_or_array(lat + nbytes / ic.bandwidth_bytes_per_s)


def overlapped_s(kernels, launch_s, device_s, *, overlap=True):
    """Chapter *CPU or GPU?*'s host-overlap model: seconds for `kernels` kernels that
    each cost the host `launch_s` (dispatch and launch) and together take the device
    `device_s` (their sum).
    - overlap (CUDA's asynchronous launches): max(kernels x launch_s, launch_s +
      device_s): the host launches ahead while the device works, so the slower of the
      two streams sets the pace, and the first launch is always paid;
    - no overlap (a CPU runs the framework's dispatch, then the kernel):
      kernels x launch_s + device_s.
    Vectorised over `device_s`."""
    n = _v.non_negative("kernels", kernels)
    launch = _v.non_negative("launch_s", launch_s)
    device = _v.non_negative("device_s", device_s, array=True)
    if not isinstance(overlap, bool):
        raise TypeError(f"overlap must be True or False, got {overlap!r}")
    host = n * launch
    t = np.maximum(host, launch + device) if overlap else host + device
    return _v.scalar_or_array(t)


def _device(name, value):
    """`accelerator` as a catalogue device (`hardware.get`)."""
    from gpuinfer import hardware as _hardware

    return _hardware.get(value)


def _overlap_or_none(name, value):
    """True, False, or None (decided from the device: True on a GPU)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None, got {value!r}")
    return value


@_v.checked(batch=_v.rule(_v.positive, integer=True, array=True), accelerator=_device,
            overhead_per_kernel_s=_v.non_negative, min_kernel_s=_v.non_negative,
            overlap=_overlap_or_none)
def predicted_latency_s(batch, accelerator, overhead_per_kernel_s, *,
                        n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN,
                        n_outputs=DEFAULT_OUTPUTS, dtype="fp32", fused=False,
                        host_link=None, overlap=None, min_kernel_s=0.0):
    """Seconds per forward pass, an estimate. Each kernel costs the host
    `overhead_per_kernel_s` (dispatch and launch) and the device its roofline time
    (`mlp_ops` on `accelerator`), at least `min_kernel_s` (the shortest a kernel runs);
    with `host_link`, the batch is copied to the device and the predictions back
    (`host_copy_s` each).

    `overlap` (default: True on a GPU, False on a CPU) says whether the host's dispatch
    of the next kernel overlaps the device's run of this one, as CUDA's asynchronous
    launches do (`overlapped_s`, the host-overlap model):
    - no overlap (a CPU runs the framework's dispatch, then the kernel):
      copies + kernels x overhead + sum of the kernels' times;
    - overlap: copies + max(kernels x overhead, overhead + sum of the kernels' times):
      the host launches ahead while the device works, so the slower of the two streams
      sets the pace, and the first launch is always paid.
    Vectorised over `batch`."""
    from gpuinfer.predict import roofline as _roofline

    if overlap is None:
        overlap = accelerator.kind == "gpu"
    bpe = _dtypes.bytes_per_element(dtype)
    out = []
    for b in np.atleast_1d(batch):
        ops = _roofline.evaluate(mlp_ops(int(b), n_features, hidden, n_outputs, dtype,
                                         fused=fused), accelerator)
        device = float(np.maximum(ops["seconds"].to_numpy(), min_kernel_s).sum())
        t = overlapped_s(len(ops), overhead_per_kernel_s, device, overlap=overlap)
        if host_link is not None:
            t += (host_copy_s(int(b) * n_features * bpe, host_link)
                  + host_copy_s(int(b) * n_outputs * bpe, host_link))
        out.append(t)
    return float(out[0]) if np.ndim(batch) == 0 else np.array(out)



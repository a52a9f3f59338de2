"""The small tabular MLP in torch, and a synthetic batch for it: what chapter *CPU or GPU?
Cost per prediction* and the labs *Small model: CPU or GPU?*, *Dynamic batching* and
*Compile, fuse, calibrate* time. Its counts (parameters, FLOPs, bytes, kernels) and the
latency model are `tabular`'s, which needs no torch.

The chapter compares a GPU with the CPU as a practitioner would deploy the model:
`cpu_paths` times the same weights by eager PyTorch, plain numpy (`numpy_forward`) and
ONNX Runtime on one thread, and `cpu_path_verdict` says which was fastest on the run, only
where the noise gate (`lab_verdicts.compare`) orders them.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import pathlib
import tempfile

import numpy as np

import torch

from gpuinfer.measure import bench as _bench
from gpuinfer.measure import torch_device as _device
from gpuinfer.measure import spread as _spread
from gpuinfer import validate as _v
from gpuinfer.predict.tabular import (DEFAULT_FEATURES, DEFAULT_HIDDEN, DEFAULT_OUTPUTS,
                                      check_batch, layer_widths)


def mlp(n_features=DEFAULT_FEATURES, hidden=DEFAULT_HIDDEN, n_outputs=DEFAULT_OUTPUTS, *,
        dtype="fp32", device="cpu", seed=0):
    """The MLP as a torch.nn.Sequential in eval mode (weights seeded), on `device`."""

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


#: The CPU paths `cpu_paths` times: eager PyTorch (`mlp` itself), plain numpy
#: (`numpy_forward`) and ONNX Runtime (one intra-op thread, every graph optimisation on),
#: each on one thread. Which is fastest depends on the CPU, its BLAS and the torch build.
CPU_PATHS = ("eager PyTorch", "numpy", "ONNX Runtime")


def numpy_forward(model):
    """`model`'s forward pass (an `mlp`) in plain numpy, fp32, from its weights: what a
    service that keeps torch out of its serving path runs. Returns fn(x) for an ndarray
    x [batch, features], giving [batch, outputs]."""

    layers = [(m.weight.detach().float().cpu().numpy().T.copy(),      # [in, out]
               m.bias.detach().float().cpu().numpy().copy())            # [out]
              for m in model if isinstance(m, torch.nn.Linear)]
    _v.ensure(len(layers) > 0, "model must hold at least one torch.nn.Linear layer")

    def forward(x):
        for i, (w, b) in enumerate(layers):
            x = x @ w                                                   # [batch, out]
            x += b
            if i < len(layers) - 1:
                np.maximum(x, 0, out=x)                                 # ReLU in place
        return x
    return forward


def _openblas():
    """The OpenBLAS bundled with numpy's wheels (numpy.libs/ or numpy/.dylibs/) and its
    (set, get) thread-count functions, or None where numpy's BLAS is another."""
    root = pathlib.Path(np.__file__).parent
    for path in sorted(glob.glob(str(root.parent / "numpy.libs" / "libopenblas*"))
                       + glob.glob(str(root / ".dylibs" / "libopenblas*"))):
        lib = ctypes.CDLL(path)
        for suffix in ("64_", ""):
            setter = getattr(lib, f"openblas_set_num_threads{suffix}", None)
            getter = getattr(lib, f"openblas_get_num_threads{suffix}", None)
            if setter is not None and getter is not None:
                return setter, getter
    return None


@contextlib.contextmanager
def blas_threads(n):
    """numpy's BLAS held to `n` threads inside the block where it is the OpenBLAS of
    numpy's wheels; yields the count in force, or None where this cannot set it (another
    BLAS: it then runs with its own threads, OPENBLAS_NUM_THREADS/MKL_NUM_THREADS)."""
    n = _v.count("n", n, maximum=1 << 12)
    blas = _openblas()
    if blas is None:
        yield None
        return
    setter, getter = blas
    before = getter()
    setter(n)
    try:
        yield getter()
    finally:
        setter(before)


def _ort_forward(model, x):
    """`model` exported to ONNX and run by ONNX Runtime on one intra-op thread, or None
    where onnxruntime (the `serving` extra) is missing or the export fails."""
    try:
        from gpuinfer.measure import onnx_runtime
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    folder = tempfile.mkdtemp(prefix="gpuinfer-mlp-")
    try:
        path = onnx_runtime.export(model, x, pathlib.Path(folder) / "mlp.onnx")
        sess = onnx_runtime.session(path, "all", threads=1)
    except Exception:  # noqa: BLE001 - an exporter this torch lacks: the path is skipped
        return None
    name = sess.get_inputs()[0].name
    return lambda xn: sess.run(None, {name: xn})


def first_core():
    """The lowest-numbered core this process may run on (`os.sched_getaffinity`): the core
    the chapter pins its CPU timings to. Core 0 is not always allowed (a container's
    cpuset can exclude it). None where the OS has no affinity call (timings run unpinned)."""
    import os

    if not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return None
    return min(os.sched_getaffinity(0))


def cpu_paths(model, batch, *, repeats=5, pin_core=None, paths=CPU_PATHS):
    """Seconds per forward pass of `model` (an fp32 `mlp` on the CPU) on a
    `synthetic_batch` of `batch`, by each of `paths` this machine can run (ONNX Runtime
    needs the `serving` extra), all on one thread (torch's threads, numpy's OpenBLAS,
    ONNX Runtime's intra-op pool) with the calling thread pinned to `pin_core`
    (`bench.time_fn`; default `first_core()`, the first core this process may use). Each
    path is timed `repeats` times; returns {path: array of the `repeats` medians, in
    seconds}. Chapter *CPU or GPU?* prices the fastest."""

    b = check_batch(batch)
    pin_core = first_core() if pin_core is None else pin_core
    repeats = _v.count("repeats", repeats, maximum=1000)
    unknown = [p for p in paths if p not in CPU_PATHS]
    _v.ensure(not unknown, f"paths must be among {CPU_PATHS}, got {unknown}")
    x = synthetic_batch(b)
    xn = x.numpy()
    runs = {"eager PyTorch": lambda: model(x)}
    if "numpy" in paths:
        forward = numpy_forward(model)
        runs["numpy"] = lambda: forward(xn)
    if "ONNX Runtime" in paths:
        ort = _ort_forward(model, x)
        if ort is not None:
            runs["ONNX Runtime"] = lambda: ort(xn)
    out = {}
    with torch.inference_mode(), blas_threads(1):
        for path, fn in runs.items():
            if path in paths:
                out[path] = np.array([_bench.time_fn(fn, device="cpu", num_threads=1,
                                                     pin_core=pin_core).median_s
                                      for _ in range(repeats)])
    return out


def cpu_path_verdict(runs, batch) -> str:
    """The sentence chapter *CPU or GPU?* prints from `cpu_paths`' timings at `batch`
    ({path: seconds of each run}): the fastest path by its best run, and by how much it
    beats the next, only where `spread.compare` orders the two beyond their spreads
    (else "inconclusive"; the page prices the faster best run either way)."""
    b = check_batch(batch)
    _v.ensure(isinstance(runs, dict) and len(runs) >= 1,
              f"runs must be a dict of at least one path's timings, got {runs!r}", TypeError)
    best = {p: float(np.min(_v.number(f"runs[{p!r}]", t, array=True))) for p, t in runs.items()}
    ranked = sorted(best, key=best.get)
    fastest = ranked[0]
    if len(ranked) == 1:
        return (f"Only {fastest} was timed at batch {b:,}: nothing to compare it with; the "
                "cost section prices it.")
    rival = ranked[1]
    spread = {p: _spread.Spread.of(runs[p]) for p in (fastest, rival)}
    if _spread.compare(spread[rival], spread[fastest]) != "larger":
        worst = max(spread[fastest].spread, spread[rival].spread)
        shown = "too few runs" if np.isinf(worst) else f"{worst:.0%} of the median"
        return (f"Inconclusive on this run: at batch {b:,} {fastest} and {rival} are within "
                f"their spread ({shown}), so neither is the faster CPU path here; the cost "
                f"section prices the better best run, {fastest}'s, all the same.")
    return (f"On this run {fastest} was the fastest CPU path at batch {b:,}: its best run "
            f"served {best[rival] / best[fastest]:.2f} times the predictions/s of "
            f"{rival}'s, beyond the spread of either. The cost section prices {fastest}.")

"""Serving systems: what an inference compiler saves, and what fits on one GPU.

Chapter: *Serving systems and sharing a GPU*. Bytes, seconds, SI units.

- Layer fusion: an unfused chain of elementwise ops writes every intermediate tensor to
  memory and reads it back; a fused kernel reads its inputs once and writes its output
  once. `elementwise_chain_bytes` counts both; `gelu_tanh_unfused` is such a chain.
- Kernel auto-tuning: `autotune` times equivalent implementations with
  `bench.time_fn`, checks they agree, and picks the fastest (TensorRT does this per
  layer when it builds an engine; it calls the candidates tactics).
- A memory plan for several models on one GPU: each deployment holds `instances`
  copies of its weights (Triton loads the model once per instance), a KV cache and a
  workspace per instance; the plan sums them against the accelerator's memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import validate as _v


# --- layer fusion -------------------------------------------------------------------------

def elementwise_chain_bytes(n_elements, op_inputs: Sequence[int], dtype="fp32", *,
                            fused=False, external_inputs=1) -> float:
    """DRAM bytes moved by a chain of elementwise ops over `n_elements` each.

    Unfused, op i reads `op_inputs[i]` full-size tensors and writes one:
    sum(op_inputs[i] + 1) x n x bytes. Fused into one kernel, the chain reads its
    `external_inputs` distinct tensors once and writes the result once:
    (external_inputs + 1) x n x bytes. Scalars and caches are not counted.
    """
    n = _v.count("n_elements", n_elements, maximum=1 << 50)
    if isinstance(op_inputs, (str, int, float)) or not hasattr(op_inputs, "__iter__"):
        raise TypeError(f"op_inputs must be a list of input counts, one per op, got {op_inputs!r}")
    ops = list(op_inputs)
    if not ops:
        raise ValueError("op_inputs is empty: give the tensor inputs of each op in the chain")
    ops = [_v.count("each op's input count", k, minimum=0, maximum=64) for k in ops]
    ext = _v.count("external_inputs", external_inputs, minimum=0, maximum=64)
    bpe = _dtypes.bytes_per_element(dtype)
    if fused:
        return (ext + 1) * n * bpe
    return sum(k + 1 for k in ops) * n * bpe


def gelu_tanh_unfused(x):
    """GELU, tanh approximation, one elementwise op per line, as an unfused graph runs
    it: every line is a kernel that reads its tensor inputs and writes a new tensor.
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016)."""
    import torch

    y = torch.pow(x, 3)                 # reads x
    y = y * 0.044715                    # reads y
    y = x + y                           # reads x, y
    y = y * math.sqrt(2.0 / math.pi)    # reads y
    y = torch.tanh(y)                   # reads y
    y = y + 1.0                         # reads y
    y = x * y                           # reads x, y
    return y * 0.5                      # reads y


#: Tensor inputs of each op in `gelu_tanh_unfused`, in order.
GELU_TANH_OP_INPUTS = (1, 1, 2, 1, 1, 1, 2, 1)


def gelu_tanh_fused(x):
    """The same GELU as one kernel: torch's fused `gelu(approximate="tanh")`."""
    import torch.nn.functional as F

    return F.gelu(x, approximate="tanh")


# --- kernel auto-tuning ---------------------------------------------------------------------

def autotune(candidates: Mapping[str, Callable], *, device=None, min_run_time=None,
             rtol=1e-3, atol=1e-4, num_threads=None):
    """Time each equivalent implementation (`{name: fn}`, each called with no arguments)
    with `bench.time_fn` and return a DataFrame, fastest first: `candidate`,
    `seconds` (median), `iqr_s` (the spread of its timed blocks), `speedup_vs_slowest`,
    and `tie_with_fastest`: True where the gap to the fastest median is within the larger
    of the two IQRs (noise, not a better kernel). The outputs must agree
    (torch.allclose with `rtol`, `atol`), or ValueError names the one that differs.
    `num_threads`: CPU threads for the timing (`bench.time_fn`); one thread on a shared
    machine keeps threads from waiting on each other."""
    import pandas as pd
    import torch

    from . import bench as _bench

    if not isinstance(candidates, Mapping):
        raise TypeError(f"candidates must be a mapping {{name: fn}}, got {type(candidates).__name__}")
    if not candidates:
        raise ValueError("candidates is empty: give {name: fn} of equivalent implementations")
    for name, fn in candidates.items():
        _v.callable_(f"candidates[{name!r}]", fn)
    names = list(candidates)
    reference = candidates[names[0]]()
    for name in names[1:]:
        out = candidates[name]()
        if out.shape != reference.shape or not torch.allclose(out.float(), reference.float(),
                                                               rtol=rtol, atol=atol):
            raise ValueError(f"candidate {name!r} does not compute what {names[0]!r} "
                             f"computes (rtol={rtol}, atol={atol}): not an equivalent kernel")
    rows = []
    for name in names:
        t = _bench.time_fn(candidates[name], device=device, min_run_time=min_run_time,
                           num_threads=num_threads)
        rows.append({"candidate": name, "seconds": t.median_s, "iqr_s": t.iqr_s})
    df = pd.DataFrame(rows).sort_values("seconds", kind="stable").reset_index(drop=True)
    df["speedup_vs_slowest"] = df["seconds"].max() / df["seconds"]
    best, best_iqr = df.loc[0, "seconds"], df.loc[0, "iqr_s"]
    df["tie_with_fastest"] = (df["seconds"] - best) <= np.maximum(df["iqr_s"], best_iqr)
    return df


# --- several models on one GPU ----------------------------------------------------------------

#: Whether a Triton backend's instances of one model on one GPU share its weights.
#: TensorRT: "CUDA engine shared across all model instances using the same (or no) DLA
#: core on same GPU" (tensorrt_backend, src/model_state.h); each instance adds an
#: execution context (activation memory), not a copy of the weights. PyTorch (libtorch)
#: and Python backends load the model once per instance (a Python instance is its own
#: stub process), so every instance holds a copy.
BACKENDS = {
    "tensorrt": {"shares_weights": True,
                 "source": "https://github.com/triton-inference-server/tensorrt_backend/"
                           "blob/main/src/model_state.h"},
    "pytorch": {"shares_weights": False,
                "source": "https://github.com/triton-inference-server/pytorch_backend/"
                          "blob/main/src/libtorch.cc"},
    "python": {"shares_weights": False,
               "source": "https://github.com/triton-inference-server/python_backend"},
}


@dataclass(frozen=True)
class Deployment:
    """One model served with `instances` instances on one GPU. Each instance holds its
    KV cache and workspace (bytes per instance); the weights are held once per instance,
    or once in all when the backend shares them (`shares_weights`: Triton's TensorRT
    backend shares one engine across the instances on a GPU)."""

    name: str
    weight_bytes: float
    instances: int = 1
    kv_cache_bytes: float = 0.0
    workspace_bytes: float = 0.0
    shares_weights: bool = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Deployment name must be a non-empty string, got {self.name!r}")
        for field in ("weight_bytes", "kv_cache_bytes", "workspace_bytes"):
            _v.non_negative(f"{self.name}: {field}", getattr(self, field))
        _v.count(f"{self.name}: instances", self.instances, maximum=10_000)
        if not isinstance(self.shares_weights, bool):
            raise TypeError(f"{self.name}: shares_weights must be True or False, got "
                            f"{self.shares_weights!r}")

    @property
    def weight_copies(self) -> int:
        return 1 if self.shares_weights else self.instances

    @property
    def per_instance_bytes(self) -> float:
        """What one more instance adds: its KV cache and workspace, and a copy of the
        weights unless the backend shares them."""
        weights = 0.0 if self.shares_weights else self.weight_bytes
        return weights + self.kv_cache_bytes + self.workspace_bytes

    @property
    def total_bytes(self) -> float:
        return (self.weight_copies * self.weight_bytes
                + self.instances * (self.kv_cache_bytes + self.workspace_bytes))


def deployment(name, model=None, *, n_params=None, dtype="fp16", instances=1, batch=0,
               context=0, kv_dtype=None, workspace_bytes=0.0, backend="pytorch") -> Deployment:
    """A Deployment from a catalogue model (`llm.get` name: weights from its config, KV
    cache for `batch` sequences of `context` tokens per instance) or from a parameter
    count `n_params` (no KV cache). Weights in `dtype`. `backend` ("pytorch", "python",
    "tensorrt": `BACKENDS`) says whether the instances share the weights."""
    if (model is None) == (n_params is None):
        raise ValueError(f"{name}: give exactly one of model (a catalogue name) or n_params")
    b = _v.count("batch", batch, minimum=0, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    shares = BACKENDS[_v.choice("backend", backend, list(BACKENDS))]["shares_weights"]
    if model is not None:
        weights = _llm.weight_bytes(model, dtype)
        _, kv, _ = _dtypes.formats(dtype, kv_dtype)
        kv_bytes = b * c * _llm.kv_cache_bytes_per_token(model, kv)
    else:
        if b and c:
            raise ValueError(f"{name}: a KV cache needs a catalogue model, not n_params")
        weights = _v.positive("n_params", n_params) * _dtypes.bytes_per_element(dtype)
        kv_bytes = 0.0
    return Deployment(name, float(weights), _v.count("instances", instances, maximum=10_000),
                      float(kv_bytes), _v.non_negative("workspace_bytes", workspace_bytes),
                      shares)


@dataclass(frozen=True)
class MemoryPlan:
    """The deployments' bytes beside the accelerator's memory (the bytes the card has)
    less a reserve (the CUDA context and the server's own buffers)."""

    deployments: tuple
    accelerator: object
    reserve_bytes: float = 0.0

    @property
    def capacity_bytes(self) -> float:
        return self.accelerator.memory_bytes - self.reserve_bytes

    @property
    def used_bytes(self) -> float:
        return sum(d.total_bytes for d in self.deployments)

    @property
    def free_bytes(self) -> float:
        return self.capacity_bytes - self.used_bytes

    @property
    def fits(self) -> bool:
        return self.free_bytes >= 0

    def table(self):
        """One row per deployment: bytes in total by kind, and the share of the
        accelerator's memory."""
        import pandas as pd

        rows = [{"deployment": d.name, "instances": d.instances,
                 "weights_bytes": d.weight_copies * d.weight_bytes,
                 "kv_cache_bytes": d.instances * d.kv_cache_bytes,
                 "workspace_bytes": d.instances * d.workspace_bytes,
                 "total_bytes": d.total_bytes,
                 "fraction_of_memory": d.total_bytes / self.accelerator.memory_bytes}
                for d in self.deployments]
        return pd.DataFrame(rows)

    def __repr__(self):
        verdict = "fits" if self.fits else "does NOT fit"
        return (f"MemoryPlan on {self.accelerator.name}: {self.used_bytes / 1e9:.1f} GB of "
                f"{self.capacity_bytes / 1e9:.1f} GB usable, {verdict} "
                f"({self.free_bytes / 1e9:+.1f} GB free)")


def memory_plan(deployments: Sequence[Deployment], accelerator, *,
                reserve_bytes=None) -> MemoryPlan:
    """Sum the deployments against `accelerator`'s memory less `reserve_bytes` (default
    `llm.DEFAULT_RESERVE_BYTES`: the CUDA context and the server's own buffers)."""
    acc = _hardware.get(accelerator)
    if isinstance(deployments, (str, Deployment)) or not hasattr(deployments, "__iter__"):
        raise TypeError(f"deployments must be a list of Deployment objects, got "
                        f"{type(deployments).__name__}")
    deps = tuple(deployments)
    if not deps:
        raise ValueError("deployments is empty: give at least one Deployment")
    for d in deps:
        if not isinstance(d, Deployment):
            raise TypeError(f"expected Deployment objects (see serving.deployment), got {d!r}")
    reserve = _llm.DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    if reserve >= acc.memory_bytes:
        raise ValueError(f"reserve_bytes {reserve:.3g} leaves nothing of "
                         f"{acc.name}'s {acc.memory_bytes:.3g} bytes")
    return MemoryPlan(deps, acc, float(reserve))


def max_instances(dep: Deployment, accelerator, *, others: Sequence[Deployment] = (),
                  reserve_bytes=None) -> int:
    """How many instances of `dep` fit beside `others` on `accelerator` (0 if none).
    With shared weights the first instance brings them and each further one only its
    KV cache and workspace."""
    if not isinstance(dep, Deployment):
        raise TypeError(f"dep must be a Deployment (see serving.deployment), got {dep!r}")
    if not dep.per_instance_bytes > 0:
        raise ValueError(f"{dep.name}: an instance of 0 bytes fits without limit")
    plan = memory_plan(list(others) or [dep], accelerator, reserve_bytes=reserve_bytes)
    room = plan.capacity_bytes - sum(d.total_bytes for d in others)
    if dep.shares_weights:
        room -= dep.weight_bytes
        if room < 0:
            return 0
    return max(0, int(room // dep.per_instance_bytes))


# --- sharing one GPU: MIG slices ---------------------------------------------------------

def mig_options(model, gpu, batch, context, dtype="fp16"):
    """Chapter *Serving systems and sharing a GPU*: every MIG profile of `gpu` (the
    `+me` media variants left out), smallest first (fewest compute slices, then fewest
    memory slices), as a DataFrame: the profile's `max_instances` on one GPU, the most
    sequences of `context` tokens it holds (`llm.max_batch` on `hardware.mig_slice`, the
    stated reserve held back) and the decode step time at `batch` in seconds (NaN where
    `batch` does not fit)."""
    import pandas as pd

    b = _v.count("batch", batch, maximum=1 << 30)
    profiles = _hardware.mig_profiles(gpu)
    rows = []
    for name, p in profiles.iterrows():
        if name.endswith("+me"):
            continue
        part = _hardware.mig_slice(gpu, name)
        fits = _llm.max_batch(model, part, context, dtype)
        tpot = (float(_llm.decode_step_time(model, part, b, context, dtype))
                if fits >= b else math.nan)
        rows.append({"profile": name, "compute_fraction": p["compute_fraction"],
                     "memory_fraction": p["memory_fraction"],
                     "max_instances": int(p["max_instances"]), "max_batch": int(fits),
                     "tpot_s": tpot})
    table = pd.DataFrame(rows).set_index("profile")
    return table.sort_values(["compute_fraction", "memory_fraction"], kind="stable")


def smallest_mig_profile(model, gpu, batch, context, tpot_s, dtype="fp16"):
    """The first profile of `mig_options` that holds `batch` sequences and meets a time
    per output token of `tpot_s` seconds; None if no profile does."""
    limit = _v.positive("tpot_s", tpot_s)
    table = mig_options(model, gpu, batch, context, dtype)
    ok = table[table["tpot_s"] <= limit]
    return ok.index[0] if len(ok) else None

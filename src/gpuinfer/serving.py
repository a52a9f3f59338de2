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

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm


def _nonneg(name, value, *, positive=False, integer=False):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        kind = "positive" if positive else "non-negative"
        raise ValueError(f"{name} must be {kind} and finite, got {value!r}")
    if integer and v != int(v):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return v


# --- layer fusion -------------------------------------------------------------------------

def elementwise_chain_bytes(n_elements, op_inputs: Sequence[int], dtype="fp32", *,
                            fused=False, external_inputs=1) -> float:
    """DRAM bytes moved by a chain of elementwise ops over `n_elements` each.

    Unfused, op i reads `op_inputs[i]` full-size tensors and writes one:
    sum(op_inputs[i] + 1) x n x bytes. Fused into one kernel, the chain reads its
    `external_inputs` distinct tensors once and writes the result once:
    (external_inputs + 1) x n x bytes. Scalars and caches are not counted.
    """
    n = _nonneg("n_elements", n_elements, positive=True, integer=True)
    ops = list(op_inputs)
    if not ops:
        raise ValueError("op_inputs is empty: give the tensor inputs of each op in the chain")
    for k in ops:
        _nonneg("each op's input count", k, integer=True)
    ext = _nonneg("external_inputs", external_inputs, integer=True)
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
             rtol=1e-3, atol=1e-4):
    """Time each equivalent implementation (`{name: fn}`, each called with no arguments)
    with `bench.time_fn` and return a DataFrame, fastest first: `candidate`,
    `seconds`, `speedup_vs_slowest`. The outputs must agree (torch.allclose with
    `rtol`, `atol`), or ValueError names the one that differs."""
    import pandas as pd
    import torch

    from . import bench as _bench

    if not candidates:
        raise ValueError("candidates is empty: give {name: fn} of equivalent implementations")
    names = list(candidates)
    reference = candidates[names[0]]()
    for name in names[1:]:
        out = candidates[name]()
        if out.shape != reference.shape or not torch.allclose(out.float(), reference.float(),
                                                               rtol=rtol, atol=atol):
            raise ValueError(f"candidate {name!r} does not compute what {names[0]!r} "
                             f"computes (rtol={rtol}, atol={atol}): not an equivalent kernel")
    rows = [{"candidate": name,
             "seconds": _bench.time_fn(candidates[name], device=device,
                                       min_run_time=min_run_time).median_s}
            for name in names]
    df = pd.DataFrame(rows).sort_values("seconds", kind="stable").reset_index(drop=True)
    df["speedup_vs_slowest"] = df["seconds"].max() / df["seconds"]
    return df


# --- several models on one GPU ----------------------------------------------------------------

@dataclass(frozen=True)
class Deployment:
    """One model served with `instances` copies, each holding its own weights, KV cache
    and workspace (bytes per instance)."""

    name: str
    weight_bytes: float
    instances: int = 1
    kv_cache_bytes: float = 0.0
    workspace_bytes: float = 0.0

    def __post_init__(self):
        for field in ("weight_bytes", "kv_cache_bytes", "workspace_bytes"):
            _nonneg(f"{self.name}: {field}", getattr(self, field))
        _nonneg(f"{self.name}: instances", self.instances, positive=True, integer=True)

    @property
    def per_instance_bytes(self) -> float:
        return self.weight_bytes + self.kv_cache_bytes + self.workspace_bytes

    @property
    def total_bytes(self) -> float:
        return self.instances * self.per_instance_bytes


def deployment(name, model=None, *, n_params=None, dtype="fp16", instances=1, batch=0,
               context=0, kv_dtype=None, workspace_bytes=0.0) -> Deployment:
    """A Deployment from a catalogue model (`llm.get` name: weights from its config, KV
    cache for `batch` sequences of `context` tokens per instance) or from a parameter
    count `n_params` (no KV cache). Weights in `dtype`."""
    if (model is None) == (n_params is None):
        raise ValueError(f"{name}: give exactly one of model (a catalogue name) or n_params")
    _nonneg("batch", batch, integer=True)
    _nonneg("context", context, integer=True)
    if model is not None:
        weights = _llm.weight_bytes(model, dtype)
        kv = _dtypes.canonical(kv_dtype) if kv_dtype else (
            "fp16" if _dtypes.canonical(dtype) in ("fp8", "int8", "int4") else dtype)
        kv_bytes = batch * context * _llm.kv_cache_bytes_per_token(model, kv)
    else:
        if batch and context:
            raise ValueError(f"{name}: a KV cache needs a catalogue model, not n_params")
        weights = _nonneg("n_params", n_params, positive=True) * _dtypes.bytes_per_element(dtype)
        kv_bytes = 0.0
    return Deployment(name, float(weights), int(instances), float(kv_bytes),
                      float(workspace_bytes))


@dataclass(frozen=True)
class MemoryPlan:
    """The deployments' bytes beside the accelerator's memory."""

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
        """One row per deployment: bytes per instance and in total, and the share of
        the accelerator's memory."""
        import pandas as pd

        rows = [{"deployment": d.name, "instances": d.instances,
                 "weights_bytes": d.instances * d.weight_bytes,
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
                reserve_bytes=0.0) -> MemoryPlan:
    """Sum the deployments against `accelerator`'s memory less `reserve_bytes` (e.g.
    the CUDA context and the server's own buffers)."""
    acc = _hardware.get(accelerator)
    deps = tuple(deployments)
    if not deps:
        raise ValueError("deployments is empty: give at least one Deployment")
    for d in deps:
        if not isinstance(d, Deployment):
            raise ValueError(f"expected Deployment objects (see serving.deployment), got {d!r}")
    _nonneg("reserve_bytes", reserve_bytes)
    if reserve_bytes >= acc.memory_bytes:
        raise ValueError(f"reserve_bytes {reserve_bytes:.3g} leaves nothing of "
                         f"{acc.name}'s {acc.memory_bytes:.3g} bytes")
    return MemoryPlan(deps, acc, float(reserve_bytes))


def max_instances(dep: Deployment, accelerator, *, others: Sequence[Deployment] = (),
                  reserve_bytes=0.0) -> int:
    """How many instances of `dep` fit beside `others` on `accelerator` (0 if none)."""
    if not dep.per_instance_bytes > 0:
        raise ValueError(f"{dep.name}: an instance of 0 bytes fits without limit")
    plan = memory_plan(list(others) or [dep], accelerator, reserve_bytes=reserve_bytes)
    room = plan.capacity_bytes - sum(d.total_bytes for d in others)
    return max(0, int(room // dep.per_instance_bytes))

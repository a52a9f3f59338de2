"""Several models on one GPU: a memory plan. Each deployment holds `instances` copies of
its weights (Triton loads the model once per instance, unless its backend shares them:
`BACKENDS`), a KV cache and a workspace per instance; the plan sums them against the
accelerator's memory (`memory_plan`), and `max_instances` says how many copies fit.

Chapter: *Serving systems and sharing a GPU*. Bytes, SI units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import step_model
from gpuinfer import validate as _v


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
        weights = step_model.weight_bytes(model, dtype)
        _, kv, _ = _dtypes.formats(dtype, kv_dtype)
        kv_bytes = b * c * step_model.kv_cache_bytes_per_token(model, kv)
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

    def __post_init__(self):
        # A NaN reserve made every verdict NaN, inf a capacity of -inf, and a negative
        # one more memory than the card has.
        object.__setattr__(self, "reserve_bytes",
                           _v.non_negative("reserve_bytes", self.reserve_bytes))
        if self.reserve_bytes >= self.accelerator.memory_bytes:  # a negative capacity
            raise ValueError(f"reserve_bytes {self.reserve_bytes:.3g} leaves nothing of "
                             f"{self.accelerator.name}'s {self.accelerator.memory_bytes:.3g} "
                             f"bytes of memory")

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


def engine_memory_fraction(dep: Deployment, accelerator, *, activation_bytes=None) -> float:
    """Chapter *Serving systems and sharing a GPU*: the `gpu_memory_utilization` to start
    one LLM-engine instance of `dep` with (vLLM's per-instance fraction of the whole
    card), so that it claims what the memory plan gave it and no more: a copy of the
    weights, its KV cache, its workspace and `activation_bytes` (the activations the
    engine profiles at start; default `llm.DEFAULT_RESERVE_BYTES`), over the card's
    memory. An engine sizes its cache from a fraction, not from a batch x context:
    vLLM's default fraction (0.92, `paged_kv.VLLM_GPU_MEMORY_UTILIZATION`) is most of the
    card for one instance, and TensorRT-LLM gives 0.9 of the memory free after its
    weights to the cache, so a second engine started beside one with the defaults finds
    no room; each instance's fraction must be lowered to its share of the plan."""
    if not isinstance(dep, Deployment):
        raise TypeError(f"dep must be a Deployment (see serving.deployment), got {dep!r}")
    acc = _hardware.get(accelerator)
    act = _llm.DEFAULT_RESERVE_BYTES if activation_bytes is None else _v.non_negative(
        "activation_bytes", activation_bytes)
    return (dep.weight_bytes + dep.kv_cache_bytes + dep.workspace_bytes + act) / acc.memory_bytes

"""The engine's step timer: one forward step of a serving engine, as `simulate_llm`,
`offline_throughput` and `paging_gain` time it.

Chapters: *Serving LLMs: prefill, decode and the KV cache*; *Beyond one GPU*. Seconds.

`EngineStep` is `llm.StepCost` (the per-operation roofline of a step's rows, summed in
closed form from its aggregates, `llm.step_aggregates`) in the configuration an engine
runs: a compute format (`compute_dtype`: W8A8 fp8/int8, W4A4 fp4 at that format's peak),
tensor parallelism (`tp`: one device's shard, `parallel.shard`, plus the step's
all-reduces), and either the ceiling (the roofline, a lower bound on a step's time) or
the calibrated achievable model (`gpuinfer.predict.achievable`: derated rates, kernel gaps, a
fixed cost a step). `tp_step_s` times one step of it. (`parallel` holds the chapter's
decode-only TP functions: `parallel.tp_decode_step_s` is this step on the achievable
model, `tp_decode_breakdown`'s `ceiling_s` this step on the ceiling.)

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import step_cost
from gpuinfer.predict import parallel as _parallel
from gpuinfer.predict import collectives
from gpuinfer import validate as _v


def tp_shard(model, tp):
    """What one GPU of a tensor-parallel group of `tp` holds: `parallel.shard(model, tp)`,
    or the whole model for `tp=1` (a `tp` the model's heads do not divide: ValueError)."""
    m = architectures.get(model)
    n = _parallel.check_tp_degree(m, tp, "tp")
    return _parallel.shard(m, n) if n > 1 else m


class EngineStep(step_cost.StepCost):
    """`llm.StepCost` as an engine runs the step: `compute_dtype` (W8A8: "fp8"/"int8";
    W4A4: "fp4") sets the peak the matmuls run at; `tp` > 1 times one device's shard
    (`parallel.shard`: an MoE model's experts split 1/N in width) and adds its 2 x layers
    + 1 all-reduces of [tokens, d_model] (the ceiling, a lower bound on time:
    `collectives.allreduce_floor_s`, each GPU sending and receiving the message once at
    NCCL's bus bandwidth for the link, no latency; the achievable model: NCCL's fastest
    ring or tree and protocol with its latency, `collectives.interconnect_allreduce_s`). `efficiency` (an
    `achievable.Efficiency`; default the ceiling) derates each row's peak and bandwidth
    (`achievable.row_rates`) and adds the step's overheads (`achievable.overheads`)."""

    def __init__(self, model, accelerator, dtype="fp16", kv_dtype=None, compute_dtype=None,
                 tp=1, efficiency=None, interconnect=None):
        m = architectures.get(model)
        acc = _hardware.get(accelerator)
        self.tp = _parallel.check_tp_degree(m, tp, "tp")
        self.eff = eff = _achievable.CEILING if efficiency is None else efficiency
        weight, _, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
        super().__init__(_parallel.shard(m, self.tp) if self.tp > 1 else m, acc, dtype,
                         kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                         rates=lambda rows: _achievable.row_rates(rows, acc, eff, weight))
        self.n_layers = m.n_layers
        # Tensor parallelism: the all-reduces of each step, by its token count.
        self.n_allreduces = 2 * m.n_layers + 1 if self.tp > 1 else 0
        # The ceiling all-reduces in the compute format; engines in 16 bits (the matmuls'
        # output), whatever the matmuls' input format: parallel's rule.
        self.message_per_token = m.d_model * _parallel.tp_message_bytes_per_value(compute, eff)
        self._comm = {}
        if self.tp > 1:
            ic = (device_links.interconnect_for(acc) if interconnect is None
                  else device_links.get_interconnect(interconnect))

            def one(tokens):
                s = tokens * self.message_per_token
                if eff.is_ceiling:
                    return collectives.allreduce_floor_s(s, self.tp, ic)
                return collectives.interconnect_allreduce_s(s, self.tp, ic)
            self._one = one

    def comm_s(self, tokens):
        """Seconds of one step's all-reduces for steps of `tokens` new tokens (array)."""
        t = np.atleast_1d(np.asarray(tokens, dtype=float))
        if not self.n_allreduces:
            return np.zeros(t.shape)
        out = np.empty(t.shape)
        for i, x in enumerate(t):
            if x not in self._comm:
                self._comm[x] = self.n_allreduces * self._one(float(x))
            out[i] = self._comm[x]
        return out

    def many(self, z):
        """Seconds of several steps at once: `z` holds one step's aggregates a column
        (`llm.step_aggregates`): the shard's rows, the all-reduces, the overheads."""
        z = np.asarray(z, dtype=float)
        device = super().many(z) + self.comm_s(z[1])
        return _achievable.overheads(device, self.n_layers, self.eff)


def tp_step_s(model, accelerator, tp, new_tokens, context=0, logits=None, *,
              dtype="fp16", kv_dtype=None, compute_dtype=None, interconnect=None,
              achievable=False, parts=False):
    """Chapter *Beyond one GPU*: seconds of one forward step of a tensor-parallel group of
    `tp` GPUs, as `simulate_llm` and `offline_throughput` time it: sequence i brings
    `new_tokens[i]` tokens on top of `context[i]` cached ones (arrays, or numbers for
    one sequence), `logits[i]` rows of the LM head (default: one each). One device's
    shard (`parallel.shard`) on the per-operation roofline, plus 2 x layers + 1
    all-reduces of [tokens, d_model].

    `achievable=False`: the ceiling, a lower bound on the step's time: the roofline,
    and each all-reduce at `parallel.allreduce_floor_s` (NCCL's bus bandwidth for the
    link, no latency, messages in the compute format; for a decode step, the same number
    as `parallel.tp_decode_breakdown(...)["ceiling_s"]`). True (or an
    `achievable.Efficiency`): the achievable model (derated rates, kernel gaps, the
    step's fixed cost) and NCCL's fastest ring or tree with its latency
    (`collectives.interconnect_allreduce_s`), messages in 16 bits; for a decode step,
    the same number as `parallel.tp_decode_step_s`, which the chapter's decisions use.
    `parallel.tp_decode_step_s(..., achievable=False)` is neither: the roofline with NCCL's latencies, a
    model, not this bound. With `parts=True` returns {"total_s", "comm_s",
    "n_allreduces"}."""
    q = np.atleast_1d(_v.positive("new_tokens", new_tokens, integer=True, array=True))
    c = np.atleast_1d(_v.non_negative("context", context, integer=True, array=True))
    lg = (np.ones_like(q) if logits is None else
          np.atleast_1d(_v.non_negative("logits", logits, integer=True, array=True)))
    q, c, lg = np.broadcast_arrays(q.astype(float), c.astype(float), lg.astype(float))
    if np.any(lg > q):
        raise ValueError("logits must be at most new_tokens for each sequence")
    timer = EngineStep(model, accelerator, dtype, kv_dtype, compute_dtype, tp=tp,
                        efficiency=_achievable.as_efficiency(achievable),
                        interconnect=interconnect)
    z = step_cost.step_aggregates(q, c, lg)
    total = float(timer.many(z[:, None])[0])
    if not math.isfinite(total):
        raise ValueError(f"{_hardware.get(accelerator).name} has no peak for "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]} in the catalogue")
    if not parts:
        return total
    return {"total_s": total, "comm_s": float(timer.comm_s([q.sum()])[0]),
            "n_allreduces": timer.n_allreduces}


# Names before the seconds suffix became `_s` everywhere (issue 25).

"""The engine's step timer: one forward step of a serving engine, as `simulate_llm`,
`offline_throughput` and `paging_gain` time it.

Chapters: *Serving LLMs: prefill, decode and the KV cache*; *Beyond one GPU*. Seconds.

`EngineStep` is `llm.StepCost` (the per-operation roofline of a step's rows, summed in
closed form from its aggregates, `llm.step_aggregates`) in the configuration an engine
runs: a compute format (`compute_dtype`: W8A8 fp8/int8, W4A4 fp4 at that format's peak),
tensor parallelism (`n_devices`: one device's shard, `parallel.shard`, plus the step's
all-reduces), and either the ceiling (the roofline, a lower bound on a step's time) or
the calibrated achievable model (`gpuinfer.predict.achievable`: derated rates, kernel gaps, a
fixed cost a step). One step of it, with its parts, is `parallel.tp_step_s` (the same
number, priced row by row; the tests hold the two equal); this class times many steps at
once, as the simulator needs.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import step_cost
from gpuinfer.predict import parallel as _parallel
from gpuinfer.predict import collectives


def tp_shard(model, n_devices):
    """What one GPU of a tensor-parallel group of `n_devices` holds: `parallel.shard(model, tp)`,
    or the whole model for `n_devices=1` (a `n_devices` the model's heads do not divide: ValueError)."""
    m = architectures.get(model)
    n = _parallel.check_tp_degree(m, n_devices, "n_devices")
    return _parallel.shard(m, n) if n > 1 else m


class EngineStep(step_cost.StepCost):
    """`llm.StepCost` as an engine runs the step: `compute_dtype` (W8A8: "fp8"/"int8";
    W4A4: "fp4") sets the peak the matmuls run at; `n_devices` > 1 times one device's shard
    (`parallel.shard`: an MoE model's experts split 1/N in width) and adds its 2 x layers
    + 1 all-reduces of [tokens, d_model] (the ceiling, a lower bound on time:
    `collectives.allreduce_floor_s`, each GPU sending and receiving the message once at
    NCCL's bus bandwidth for the link, no latency; the achievable model: NCCL's fastest
    ring or tree and protocol with its latency, `collectives.interconnect_allreduce_s`).
    `achievable` (True: `achievable.FITTED`, the default; False: the ceiling; or an
    `achievable.Efficiency`) derates each row's peak and bandwidth
    (`achievable.row_rates`) and adds the step's overheads (`achievable.overheads`)."""

    def __init__(self, model, accelerator, dtype="fp16", kv_dtype=None, compute_dtype=None,
                 n_devices=1, achievable=True, interconnect=None):
        m = architectures.get(model)
        acc = _hardware.get(accelerator)
        self.tp = _parallel.check_tp_degree(m, n_devices, "n_devices")
        self.eff = eff = _achievable.as_efficiency(achievable)
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
        (`llm.step_aggregates`): the shard's rows, the all-reduces, the overheads
        (`achievable.overheads`, with the step's sequences taken as its LM-head rows, z[2]:
        the sequences that sample a token pay the host's per-sequence cost)."""
        z = np.asarray(z, dtype=float)
        device = super().many(z) + self.comm_s(z[1])
        return _achievable.overheads(device, self.n_layers, self.eff, sequences=z[2])

"""Exercises of the chapter *CPU or GPU? Cost per prediction* and the lab *Small model:
CPU or GPU?*.

Each question states its units and rounding; hints name the common slips (pricing a
machine run flat out as if a queue that busy could meet a latency objective; counting the
CUDA-graphs blog's 3.8 us, which includes 2.9 us of work, as launch overhead).
"""

import functools

import numpy as np

from .. import batching, cost, tabular
from . import register

WHERE = "chapters/06_cpu_vs_gpu"
LAB = "labs/05_cpu_vs_gpu"

#: The batch-1 exercise's stated costs (s): one host-device copy, as the GDRCopy README
#: puts a cudaMemcpy's overhead ("6-7 us"; references.bib: gdrcopy), and one kernel's
#: dispatch and launch in eager PyTorch (an illustrative round figure; the chapter measures
#: PyTorch's dispatch on the machine that builds it).
COPY_S = tabular.HOST_COPY_LATENCY_S  # one cudaMemcpy (GDRCopy README: 6-7 us)
KERNEL_S = 4e-6

#: The decision exercise: a CPU machine whose cores each serve one prediction at a time in
#: `DECISION_CPU_SERVICE_S` (the chapter's batch-1 measurement, rounded; requests spread at
#: random over the cores, so each core is its own queue), against a T4 machine batching
#: dynamically, a batch of b taking `DECISION_GPU_FIXED_S + DECISION_GPU_PER_ITEM_S x b`
#: (the chapter's derated T4 estimate, rounded), for Poisson traffic at
#: `DECISION_DEMAND_PER_S` with a p99 objective of `DECISION_SLO_S`.
DECISION_DEMAND_PER_S = 6000.0
DECISION_SLO_S = 2e-3
DECISION_CPU_SERVICE_S = 480e-6
DECISION_CPU_CORES = 4
DECISION_GPU_FIXED_S = 60e-6
DECISION_GPU_PER_ITEM_S = 0.16e-6
DECISION_GPU_MAX_BATCH = 64
_CPU = cost.example_price("AWS c5.2xlarge")
_FIXED_S = 2 * COPY_S + tabular.mlp_kernels() * KERNEL_S
_WORK_T4_S = tabular.predicted_latency_s(1, "T4", 0.0, dtype="fp16")
_NO_COPIES = (tabular.mlp_kernels() * KERNEL_S) / (tabular.mlp_kernels() * KERNEL_S + _WORK_T4_S)
_GPU = cost.example_price("AWS g4dn.xlarge")


@register("cost-per-million-quarter-busy", where=WHERE,
          question="Cost per million predictions of a $0.526/h GPU machine that could serve "
          "2,000,000 predictions/s but is busy 25% of the time (USD, 3 significant figures)",
          unit="USD",
          hint="Price per second / predictions per second actually served, times a million.")
def _():
    return cost.cost_per_million(0.526, 2e6, utilisation=0.25)


@register("cost-break-even-utilisation", where=WHERE,
          question="Utilisation at which a $0.526/h GPU serving 2,000,000 predictions/s "
          "costs the same per prediction as a fully busy $0.34/h CPU serving 100,000/s "
          "(a fraction, 3 significant figures)",
          unit="fraction (0-1)",
          hint="Set the two costs per prediction equal: (price / throughput) of the GPU "
          "divided by that of the CPU.")
def _():
    return cost.break_even_utilisation(0.526, 2e6, 0.34, 1e5)


@register("tabular-fixed-share-t4", where=WHERE,
          question="Share of the batch-1 time of the chapter's MLP (64-1024-1024-1024-1, "
          "fp16) on a T4 that is fixed cost: two host-device copies of 6.5 us, 7 kernels "
          "at 4 us of dispatch and launch each, and the kernels' own work on the roofline "
          "at the datasheet 320 GB/s (a fraction, 2 significant figures)",
          unit="fraction (0-1)",
          hint="Fixed cost = 2 x 6.5 us + 7 x 4 us. The work: each kernel's bytes over "
          "320 GB/s (batch 1 is memory-bound), summed: tabular.predicted_latency_s(1, "
          "'T4', 0, dtype='fp16'). Share = fixed / (fixed + work).",
          slips={_NO_COPIES / (_FIXED_S / (_FIXED_S + _WORK_T4_S)): "You left out the two copies: the input goes to the GPU and the "
                        "result comes back, 6.5 us each."})
def _():
    fixed = 2 * COPY_S + tabular.mlp_kernels() * KERNEL_S
    work = tabular.predicted_latency_s(1, "T4", 0.0, dtype="fp16")  # memory-bound: 320 GB/s
    return fixed / (fixed + work)


def _gpu_batch_s(batch):
    return DECISION_GPU_FIXED_S + DECISION_GPU_PER_ITEM_S * np.asarray(batch, dtype=float)


@functools.lru_cache(maxsize=None)
def decision_table():
    """The decision exercise worked out: for each machine, the Poisson rate one machine
    sustains within the p99 objective (`batching.capacity`), the machines the demand
    needs, and USD per million predictions (`cost.cost_per_million_at_demand`)."""
    import pandas as pd

    per_core = batching.capacity(DECISION_CPU_SERVICE_S, 1, slo=DECISION_SLO_S)
    gpu = batching.capacity(_gpu_batch_s, DECISION_GPU_MAX_BATCH, slo=DECISION_SLO_S)
    rows = []
    for price, per_machine in ((_CPU, DECISION_CPU_CORES * per_core), (_GPU, gpu)):
        rows.append({"machine": price.name, "price_per_hour": price.price_per_hour,
                     "capacity_per_s": per_machine,
                     "machines": cost.machines_needed(DECISION_DEMAND_PER_S, per_machine),
                     "usd_per_million": cost.cost_per_million_at_demand(
                         price.price_per_hour, per_machine, DECISION_DEMAND_PER_S)})
    return pd.DataFrame(rows).set_index("machine")


@register("cpu-or-gpu-under-slo", where=WHERE,
          question=f"Poisson traffic of {DECISION_DEMAND_PER_S:,.0f} predictions/s must see "
          f"a p99 latency of at most {DECISION_SLO_S * 1e3:g} ms. Option 1: {_CPU.name} "
          f"machines (${_CPU.price_per_hour}/h), {DECISION_CPU_CORES} cores each, every "
          f"core serving one prediction at a time in {DECISION_CPU_SERVICE_S * 1e6:.0f} us "
          f"(requests spread at random over the cores). Option 2: {_GPU.name} machines "
          f"(${_GPU.price_per_hour}/h), one T4 batching dynamically (max_batch "
          f"{DECISION_GPU_MAX_BATCH}, no queue delay), a batch of b taking "
          f"{DECISION_GPU_FIXED_S * 1e6:.0f} us + {DECISION_GPU_PER_ITEM_S * 1e6:g} us x b. "
          "Renting just enough machines of one kind, what does a million predictions cost "
          "with the cheaper option (USD, 3 significant figures)?",
          unit="USD per million predictions",
          hint="Find the rate each machine sustains within the p99 with batching.capacity "
          "(a CPU core: service time 480e-6 s, max_batch 1; the T4: a function of the "
          "batch), then cost.cost_per_million_at_demand for each option; keep the cheaper.",
          slips={_CPU.price_per_hour / _GPU.price_per_hour:
                 "That prices one CPU machine run flat out (4 cores / 480 us = 8,333 "
                 "predictions/s): a queue that busy misses a 2 ms p99 by far. Size each "
                 "core with batching.capacity.",
                 2 * _CPU.price_per_hour / _GPU.price_per_hour:
                 "That is the CPU fleet sized correctly for the SLO, but it is not the "
                 "cheaper option here."})
def _():
    return float(decision_table()["usd_per_million"].min())


@register("lab-cpu-gpu-params", where=LAB,
          question="Parameters of an MLP 64 -> 256 -> 256 -> 1 (weights and biases)",
          unit="parameters", hint="Each layer has in x out weights and out biases.",
          rel_tol=0.0)
def _():
    return tabular.mlp_params(64, (256, 256), 1)


@register("lab-cpu-gpu-cost-at-demand", where=LAB,
          question="Cost per million predictions when 500 predictions/s arrive at one "
          "$0.526/h GPU machine able to serve 1,000,000/s", unit="USD",
          hint="You pay for the whole hour; only 500 x 3600 predictions share it.")
def _():
    return cost.cost_per_million_at_demand(0.526, 1e6, 500)


@register("lab-cpu-gpu-launch-bound-throughput", where=LAB,
          question="Most predictions/s a GPU can serve one at a time (batch 1) when each "
          "forward pass launches 7 kernels at 5 us each and the work itself is free",
          unit="predictions/s", hint="One prediction per (kernels x overhead) seconds.")
def _():
    return 1.0 / (tabular.mlp_kernels((1024, 1024, 1024)) * 5e-6)

"""Exercises of the chapter *CPU or GPU? Cost per prediction* and the lab *Small model:
CPU or GPU?*."""

from .. import cost, tabular
from . import register

WHERE = "chapters/06_cpu_vs_gpu"
LAB = "labs/05_cpu_vs_gpu"


@register("cost-per-million-quarter-busy", where=WHERE,
          question="Cost per million predictions of a $0.526/h GPU machine that could serve "
          "2,000,000 predictions/s but is busy 25% of the time", unit="USD",
          hint="Price per second / predictions per second actually served, times a million.")
def _():
    return cost.cost_per_million(0.526, 2e6, utilisation=0.25)


@register("cost-break-even-utilisation", where=WHERE,
          question="Utilisation at which a $0.526/h GPU serving 2,000,000 predictions/s "
          "costs the same per prediction as a fully busy $0.34/h CPU serving 100,000/s",
          unit="fraction (0-1)",
          hint="Set the two costs per prediction equal: (price / throughput) of the GPU "
          "divided by that of the CPU.")
def _():
    return cost.break_even_utilisation(0.526, 2e6, 0.34, 1e5)


@register("tabular-overhead-share-t4", where=WHERE,
          question="Share of the batch-1 latency of the chapter's MLP (64-1024-1024-1024-1, "
          "fp16) on a T4 that is per-kernel overhead, at 3.8 us per kernel",
          unit="fraction (0-1)",
          hint="7 kernels x 3.8 us, over that plus the weight read at the T4's bandwidth "
          "(the work is memory-bound at batch 1).")
def _():
    overhead = tabular.mlp_kernels() * 3.8e-6
    return overhead / tabular.predicted_latency_s(1, "T4", 3.8e-6, dtype="fp16")


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

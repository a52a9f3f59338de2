"""The exercises asked in `chapters/06_cpu_vs_gpu` (every registration here has
`where="chapters/06_cpu_vs_gpu"`) and the helpers only they use."""

import numpy as np

from gpuinfer.predict import cost, fleet_sizing, tabular
from gpuinfer.course.exercises import register

WHERE = "chapters/06_cpu_vs_gpu"

#: The batch-1 exercise's stated costs (s): one host-device copy, as the GDRCopy README
#: puts a cudaMemcpy's overhead ("6-7 us"; references.bib: gdrcopy); the host's dispatch
#: and launch of one kernel in eager PyTorch (an illustrative round figure; the chapter
#: measures PyTorch's dispatch on the machine that builds it); and the shortest a kernel
#: runs, taken as the 2.9 us short kernel of NVIDIA's CUDA-graphs post (an assumption the
#: chapter states).
COPY_S = tabular.HOST_COPY_LATENCY_S  # one cudaMemcpy (GDRCopy README: 6-7 us)
KERNEL_S = 4e-6
MIN_KERNEL_S = tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S["kernel alone"]

#: The decision exercise: a CPU machine whose cores each serve one prediction at a time in
#: `DECISION_CPU_SERVICE_S` by the fastest CPU path (plain numpy: a stated figure, half
#: `DECISION_CPU_EAGER_S`, eager PyTorch's, as a reviewer's run of the chapter found on one
#: machine; which path wins, and by how much, varies from machine to machine, so the
#: exercise states both rather than reading the build's; requests spread at random over the
#: cores, so each core is its own queue), against a T4 machine batching
#: dynamically, a batch of b taking `DECISION_GPU_FIXED_S + DECISION_GPU_PER_ITEM_S x b`
#: (about the chapter's T4 estimate: the achievable model's bandwidth and the best measured
#: fp16 GEMM rate, 44 us at batch 1 and 0.17 us a prediction at batch 65,536 where it was
#: built; extrapolated, no calibration run used a T4), for Poisson traffic at `DECISION_DEMAND_PER_S` with a p99
#: objective of `DECISION_SLO_S`. `DECISION_GPU_PER_ITEM_CEILING_S`: the same T4 on its
#: datasheet ceilings (0.125 us a prediction), the ceiling beside the decision.
DECISION_DEMAND_PER_S = 6000.0
DECISION_SLO_S = 2e-3
DECISION_CPU_SERVICE_S = 240e-6
DECISION_CPU_EAGER_S = 480e-6
DECISION_CPU_CORES = 4
DECISION_GPU_FIXED_S = 50e-6
DECISION_GPU_PER_ITEM_S = 0.17e-6
DECISION_GPU_PER_ITEM_CEILING_S = 0.125e-6
DECISION_GPU_MAX_BATCH = 64
#: Requests in each capacity search: `batching.capacity`'s default 4,000 (one seed) put a
#: core at 1,040 predictions/s; 40,000 give 992, within 1% of a 200,000-request run (985).
#: The machine counts, and so the answer, are the same either way.
DECISION_REQUESTS = 40_000
_CPU = cost.example_price("AWS c5.2xlarge")
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


def batch1_t4_s(overlap=True, min_kernel_s=MIN_KERNEL_S, copies=True):
    """The batch-1 exercise's pass on a T4 (fp16, datasheet ceilings), seconds: two copies
    of `COPY_S`, then `tabular.predicted_latency_s` with `KERNEL_S` of host time a kernel
    (overlapping the GPU's kernels unless `overlap` is False) and kernels of at least
    `min_kernel_s`."""
    pass_s = tabular.predicted_latency_s(1, "T4", KERNEL_S, dtype="fp16", overlap=overlap,
                                         min_kernel_s=min_kernel_s)
    return pass_s + (2 * COPY_S if copies else 0.0)


#: The roofline work of that pass (s): each kernel's bytes over 320 GB/s, summed.
WORK_T4_S = tabular.predicted_latency_s(1, "T4", 0.0, dtype="fp16")


def _fixed_share(**how):
    return 1 - WORK_T4_S / batch1_t4_s(**how)


@register("tabular-fixed-share-t4", where=WHERE,
          question="The chapter's MLP (64-1024-1024-1024-1, fp16) at batch 1 on a T4: two "
          "host-device copies of 6.5 us; the host dispatches each of the 7 kernels in 4 us "
          "while the GPU runs the one before; each kernel runs for its roofline time at the "
          "datasheet 320 GB/s, but at least 2.9 us. What share of the pass is not the "
          "roofline work, 1 - work / total (a fraction, 2 significant figures)?",
          unit="fraction (0-1)",
          hint="GPU: 4 us (the first dispatch) + each kernel's max(2.9 us, bytes / 320 GB/s), "
          "summed; host: 7 x 4 us; the slower of the two sets the pace. Add the copies. "
          "The work alone: tabular.predicted_latency_s(1, 'T4', 0, dtype='fp16').",
          slips={_fixed_share(overlap=False, min_kernel_s=0.0) / _fixed_share():
                 "You added the host's dispatch to the GPU's kernels. Launches are "
                 "asynchronous: the host dispatches the next kernel while the GPU runs this "
                 "one, so the slower of the two sets the pace (and a kernel runs at least "
                 "2.9 us).",
                 _fixed_share(overlap=False) / _fixed_share():
                 "You added the host's dispatch to the GPU's kernels. Launches are "
                 "asynchronous: the slower of the two streams sets the pace.",
                 _fixed_share(min_kernel_s=0.0) / _fixed_share():
                 "You left out the floor: five of the seven kernels would finish in under "
                 "2.9 us by the roofline, but no kernel runs shorter than that here.",
                 _fixed_share(copies=False) / _fixed_share():
                 "You left out the two copies: the input goes to the GPU and the result "
                 "comes back, 6.5 us each."})
def _():
    return _fixed_share()


def _t4_machine(per_item_s):
    """The decision's T4 machine, a batch of b taking `DECISION_GPU_FIXED_S` + per_item_s x b."""
    return fleet_sizing.Machine(
        _GPU.name, _GPU.price_per_hour,
        lambda b: DECISION_GPU_FIXED_S + per_item_s * np.asarray(b, dtype=float),
        max_batch=DECISION_GPU_MAX_BATCH)


#: The decision's two options for `fleet_sizing.fleet_options`: the CPU machine (its cores
#: each their own queue) and the T4 machine on the achievable estimate; and the same with
#: the T4 on its datasheet ceilings, the ceiling beside.
def _cpu_machine(service_s):
    """The decision's CPU machine, its cores each serving one prediction in `service_s`."""
    return fleet_sizing.Machine(_CPU.name, _CPU.price_per_hour, service_s, max_batch=1,
                                queues=DECISION_CPU_CORES)


_CPU_MACHINE = _cpu_machine(DECISION_CPU_SERVICE_S)
DECISION_MACHINES = (_CPU_MACHINE, _t4_machine(DECISION_GPU_PER_ITEM_S))
DECISION_MACHINES_CEILING = (_CPU_MACHINE, _t4_machine(DECISION_GPU_PER_ITEM_CEILING_S))
#: The CPU option at eager PyTorch's speed (the slip the decision names), alone: the T4's
#: row is the same as in `DECISION_MACHINES`.
DECISION_MACHINES_EAGER = (_cpu_machine(DECISION_CPU_EAGER_S),)


def decision_table(machines=DECISION_MACHINES):
    """The decision's `fleet_sizing.fleet_options` table for `machines`."""
    return fleet_sizing.fleet_options(machines, demand_per_s=DECISION_DEMAND_PER_S,
                                      slo_s=DECISION_SLO_S, n=DECISION_REQUESTS)


@register("cpu-or-gpu-under-slo", where=WHERE,
          question=f"Poisson traffic of {DECISION_DEMAND_PER_S:,.0f} predictions/s must see "
          f"a p99 latency of at most {DECISION_SLO_S * 1e3:g} ms. Option 1: {_CPU.name} "
          f"machines (${_CPU.price_per_hour}/h), {DECISION_CPU_CORES} cores each, every "
          f"core serving one prediction at a time in {DECISION_CPU_SERVICE_S * 1e6:.0f} us "
          "with the fastest CPU path, plain numpy (eager PyTorch took "
          f"{DECISION_CPU_EAGER_S * 1e6:.0f} us on the same machine; "
          "requests spread at random over the cores, each core its own queue; a shared "
          f"queue would do better). Option 2: {_GPU.name} machines "
          f"(${_GPU.price_per_hour}/h), one T4 batching dynamically (max_batch "
          f"{DECISION_GPU_MAX_BATCH}, no queue delay), a batch of b taking "
          f"{DECISION_GPU_FIXED_S * 1e6:.0f} us + {DECISION_GPU_PER_ITEM_S * 1e6:g} us x b "
          "(about the chapter's T4 estimate). "
          "Renting just enough machines of one kind, what does a million predictions cost "
          "with the cheaper option (USD, 3 significant figures)?",
          unit="USD per million predictions",
          hint="Find the rate each machine sustains within the p99 with batching.capacity "
          f"(a CPU core: service time {DECISION_CPU_SERVICE_S:g} s, max_batch 1; the T4: a function of the "
          "batch; n=40_000 requests for a steadier estimate), then "
          "cost.cost_per_million_at_demand for each option; keep the cheaper "
          "(fleet_sizing.fleet_options does all three).",
          slips={_GPU.price_per_hour / _CPU.price_per_hour:
                 "That is the T4 machine's cost: it would win against eager PyTorch's "
                 f"{DECISION_CPU_EAGER_S * 1e6:.0f} us a prediction, but the CPU machine "
                 f"here runs the faster path, {DECISION_CPU_SERVICE_S * 1e6:.0f} us. Size "
                 "its cores with batching.capacity at that service time."})
def _():
    return float(decision_table()["usd_per_million"].min())

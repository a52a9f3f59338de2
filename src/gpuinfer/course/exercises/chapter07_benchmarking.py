"""The exercises asked in `chapters/07_benchmarking` (every registration here has
`where="chapters/07_benchmarking"`) and the helpers only they use."""

import numpy as np

from gpuinfer.measure import bench, profiling
from gpuinfer.predict import cost, fleet_sizing, llm, roofline
from gpuinfer import hardware
from gpuinfer.course.exercises import register

WHERE = "chapters/07_benchmarking"

#: The per-call times of the mean-vs-median exercises: 19 calls of 2 ms and one of 42 ms.
SPIKY_CALLS_S = np.array([2.0e-3] * 19 + [42.0e-3])

#: The fleet decision: Poisson traffic at `FLEET_DEMAND_PER_S` with a p99 objective of
#: `FLEET_SLO_S`, on machines whose GPU runs a batch of b in fixed + per_request x b
#: seconds (illustrative servers, the A10G twice as fast as the T4), dynamic batching up
#: to `FLEET_MAX_BATCH` with no queue delay, priced by `cost.example_price`.
FLEET_DEMAND_PER_S = 2500.0
FLEET_SLO_S = 8e-3
FLEET_MAX_BATCH = 16
FLEET_SERVERS = {"AWS g4dn.xlarge": (2e-3, 0.25e-3), "AWS g5.xlarge": (1e-3, 0.125e-3)}
#: Requests in each capacity search: `batching.capacity`'s default 4,000 (one seed) moves
#: the T4 machine's capacity by +-5% from seed to seed; 40,000 by about +-1%. The machine
#: counts, and so the answer, are the same either way.
FLEET_REQUESTS = 40_000
_PRICE = {name: cost.example_price(name).price_per_hour for name in FLEET_SERVERS}


def fleet_batch_s(name):
    """The batch time (s) of one of `FLEET_SERVERS`, as a function of the batch."""
    fixed, per_request = FLEET_SERVERS[name]
    return lambda b: fixed + per_request * np.asarray(b, dtype=float)


#: The decision's machines for `fleet_sizing.fleet_options` (with `closed_loop=True`, the
#: throughput perf_analyzer reports at a concurrency of `FLEET_MAX_BATCH` beside).
FLEET_MACHINES = tuple(fleet_sizing.Machine(name, _PRICE[name], fleet_batch_s(name),
                                            max_batch=FLEET_MAX_BATCH)
                       for name in FLEET_SERVERS)


@register("bench-flush-pool-a100", where=WHERE,
          question="Bytes of the rotating pool gpuinfer.measure.bench reads from so that an A100's "
          "L2 cache cannot serve a timed read (bytes, exact)", unit="bytes",
          hint="The pool is CACHE_FLUSH_FACTOR times the last-level cache; the A100's L2 "
          "is in its catalogue entry (binary megabytes).")
def _():
    return bench.CACHE_FLUSH_FACTOR * hardware.get("A100 80GB").cache_bytes


@register("bench-mean-of-spiky-calls", where=WHERE,
          question="Mean seconds per call of 20 calls: 19 take 2 ms, one takes 42 ms "
          "(seconds, 3 significant figures)",
          unit="seconds", hint="Add all twenty and divide by twenty; then compare with "
          "the median, which ignores the one slow call.")
def _():
    return float(np.mean(SPIKY_CALLS_S))


@register("bench-throughput-of-spiky-calls", where=WHERE,
          question="The same 20 calls (19 of 2 ms, one of 42 ms) run back to back: how "
          "many calls per second did they deliver (calls/s, 3 significant figures)?",
          unit="calls/s",
          hint="Throughput is the work done over the time it took: 20 calls over the sum "
          "of their times.",
          slips={2.0: "That is 1 / median: it leaves out the slow call, whose 42 ms the "
                      "machine spent all the same. Throughput and cost use the total time."})
def _():
    return float(SPIKY_CALLS_S.size / SPIKY_CALLS_S.sum())


@register("bench-decode-fraction-l4", where=WHERE,
          question="Fraction of the weight-read ceiling reached by a batch-1 step through "
          "32 fp16 matrices of 4096 x 4096 that takes 5.0 ms on an L4 (a fraction, 3 "
          "significant figures; GB = 1e9 B)",
          unit="fraction (0-1)", hint="Bytes read = matrices x 4096^2 x 2; divide by the "
          "5.0 ms to get bytes/s and by the L4's datasheet bandwidth.")
def _():
    ceiling = llm.weight_read_ceiling(32 * 4096 * 4096, 2, hardware.get("L4").bandwidth)
    return (1 / 5.0e-3) / ceiling


@register("bench-mfu-h100-matmul", where=WHERE,
          question="Fraction of the dense fp16 peak reached by an 8192 x 8192 x 8192 fp16 "
          "matmul that takes 1.50 ms on an H100 SXM (a fraction, 3 significant figures)",
          unit="fraction (0-1)",
          hint="FLOPs = 2 m n k; divide by the time, then by the dense (not sparse) "
          "fp16 peak.")
def _():
    return roofline.matmul_flops(8192, 8192, 8192) / 1.50e-3 / hardware.get("H100 SXM").peak_flops("fp16")


@register("bench-closed-loop-throughput", where=WHERE,
          question="perf_analyzer in concurrency mode keeps 8 requests outstanding (each "
          "client sends its next request the moment the previous one returns) and "
          "measures a mean latency of 4.0 ms. What throughput does it report "
          "(requests/s, 3 significant figures)?",
          unit="requests/s",
          hint="Little's law: requests in the system = throughput x mean latency. A closed "
          "loop fixes the first, so the latency sets the throughput.",
          slips={1 / 8: "That is one client's rate: all 8 send at once."})
def _():
    return 8 / 4.0e-3


_T4, _A10G = FLEET_SERVERS
# A closed loop of N clients with no think time, N <= max_batch: every batch holds all N,
# so it reports N / batch time(N) requests/s at a latency of batch time(N), every time.
_CLOSED_S = float(fleet_batch_s(_T4)(FLEET_MAX_BATCH))


@register("bench-fleet-under-open-loop", where=WHERE,
          question=f"Poisson traffic of {FLEET_DEMAND_PER_S:,.0f} requests/s must see a p99 "
          f"latency of at most {FLEET_SLO_S * 1e3:g} ms. A {_T4} machine (${_PRICE[_T4]}/h) "
          f"runs a batch of b in 2 ms + 0.25 ms x b; a {_A10G} machine (${_PRICE[_A10G]}/h) "
          f"in 1 ms + 0.125 ms x b; both batch dynamically up to {FLEET_MAX_BATCH} with no "
          f"queue delay. perf_analyzer in concurrency mode at {FLEET_MAX_BATCH} reports "
          f"{FLEET_MAX_BATCH / _CLOSED_S:,.0f} requests/s at a p99 of {_CLOSED_S * 1e3:g} ms "
          "for the T4 machine. Renting just enough machines of one kind, "
          "what does a million requests cost with the cheaper option that meets the "
          "objective (USD, 3 significant figures)?",
          unit="USD per million requests",
          hint="A closed loop's throughput is not what open-loop traffic gets within the "
          "SLO: find each machine's rate with batching.capacity (max_batch 16, slo in "
          "seconds, n=40_000 requests), then cost.cost_per_million_at_demand; keep the "
          "cheaper (fleet_sizing.fleet_options does all three).",
          slips={_PRICE[_T4] / _PRICE[_A10G]:
                 "That sizes the T4 fleet from the closed-loop figure: one machine at "
                 f"{FLEET_MAX_BATCH / _CLOSED_S:,.0f}/s looks enough, but Poisson traffic queues behind running batches "
                 "and the p99 passes 8 ms well below 2,500/s.",
                 2 * _PRICE[_T4] / _PRICE[_A10G]:
                 "Two T4 machines do meet the objective, but they are not the cheaper "
                 "option."})
def _():
    table = fleet_sizing.fleet_options(FLEET_MACHINES, demand_per_s=FLEET_DEMAND_PER_S,
                                       slo_s=FLEET_SLO_S, n=FLEET_REQUESTS)
    return float(table["usd_per_million"].min())


#: The profiling exercise: a trace's aten::mm rows for the linear layers of one batch-1
#: decode step of Llama-2-7B (fp16, H100 SXM), summed (illustrative).
PROFILED_LINEAR_S = 6.10e-3


@register("bench-profile-linear-fraction", where=WHERE,
          question="A torch.profiler trace of one batch-1 decode step of Llama-2-7B in fp16 "
          "on an H100 SXM shows the linear layers' matrix products (aten::mm, the LM head "
          f"not included) taking {PROFILED_LINEAR_S * 1e3:.2f} ms in all. What fraction of "
          "their roofline time is that: roofline seconds / measured seconds (a fraction, "
          "3 significant figures)?",
          unit="fraction (0-1)",
          hint="At batch 1 the linear layers are memory-bound: their time on the roofline "
          "is their weights' bytes (32 layers of 4 matrices of 4096 x 4096 and 3 of "
          "4096 x 11008, 2 bytes each) over the H100's datasheet bandwidth.",
          slips={1 / 0.85: "That compares with the bandwidth a copy reaches, not the "
                           "datasheet's: the roofline uses the datasheet figure."})
def _():
    table = llm.decode_step_breakdown("llama-2-7b", "H100 SXM", 1, 0, "fp16")
    row = table.loc[["linear"], ["flops", "bytes"]].assign(seconds=PROFILED_LINEAR_S)
    return float(profiling.against_roofline(row, "H100 SXM", "fp16")["of_roofline"].iloc[0])


#: The interactivity exercise: a decode step of (10 + 0.2 B) ms at batch B on a server of
#: `INTERACTIVE_GPUS` GPUs (tensor parallel), against MLPerf's interactive Llama-2-70B
#: objective (TPOT 40 ms).
INTERACTIVE_GPUS = 4
_TPOT_S = profiling.MLPERF_LLM_OBJECTIVES[("llama2-70b", "interactive")][1]


def interactive_step_s(batch):
    """Seconds of the exercise's decode step at `batch`: 10 ms + 0.2 ms a sequence."""
    return (10 + batch / 5) * 1e-3


@register("bench-interactivity-per-gpu", where=WHERE,
          question=f"A decode step on a {INTERACTIVE_GPUS}-GPU tensor-parallel server takes "
          "10 ms + 0.2 ms x B at batch B (a fit to traces). MLPerf's interactive Llama-2-70B "
          f"category asks for a time per output token of at most {_TPOT_S * 1e3:.0f} ms. "
          "What is the most tokens/s per GPU the server gives within it (tokens/s per "
          "GPU, 3 significant figures)?",
          unit="tokens/s per GPU",
          hint="Each user gets one token a step, so the step time is the TPOT: find the "
          "largest batch whose step fits, then tokens/s per GPU = B / step / GPUs.",
          slips={INTERACTIVE_GPUS: "That is the server's tokens/s: throughput charts "
                                   "divide by the GPUs it takes."})
def _():
    table = profiling.curve(interactive_step_s, range(1, 1025), n_devices=INTERACTIVE_GPUS)
    return float(profiling.best_within(table, _TPOT_S)["tokens_per_s_per_gpu"])

"""The exercises asked in `labs/07_tensor_parallel` (every registration here has
`where="labs/07_tensor_parallel"`) and the helpers only they use."""


from gpuinfer.predict import parallel
from gpuinfer.predict import step_model
from gpuinfer.predict import collectives
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import costs, ll_slip

LAB_TP = "labs/07_tensor_parallel"


# --- lab 7: the fewest T4s that meet a time per output token over PCIe ------------------
#: Llama-2-13B in fp16 at batch 1 and this context, on T4s that talk over PCIe Gen3 x16
#: (a server of up to 8, as AWS's multi-T4 instances are): TP degrees considered and the
#: time-per-output-token objective, seconds.
TP_MODEL, TP_CONTEXT, TP_LINK = "llama-2-13b", 4096, "PCIe Gen3 x16"
TP_DEGREES = (1, 2, 4, 8)
TP_TPOT_S = 0.030


def tp_degree_rows():
    """Per TP degree: whether one sequence fits (`parallel.tp_max_batch` >= 1) and the
    batch-1 step time on the achievable model (`parallel.tp_step_s`, NaN where it does not
    fit)."""
    rows = {}
    for n in TP_DEGREES:
        fits = parallel.tp_max_batch(TP_MODEL, "T4", n, TP_CONTEXT) >= 1
        step = (parallel.tp_step_s(TP_MODEL, "T4", n, 1, TP_CONTEXT, interconnect=TP_LINK,
                                   achievable=True) if fits else float("nan"))
        rows[n] = {"fits": fits, "step_s": step}
    return rows


_TP_WEIGHT_GB = step_model.weight_bytes(TP_MODEL, "fp16") / 1e9
_TP2_MS = 1e3 * tp_degree_rows()[2]["step_s"]


@register("lab-tp-t4-fewest-for-tpot", where=LAB_TP,
          question="Llama-2-13B in fp16, one sequence of 4,096 tokens of context, on T4s "
          "joined by PCIe Gen3 x16 (tensor parallelism over 1, 2, 4 or 8 of them; NCCL's "
          "fastest all-reduce). Every T4 costs the same per hour. Which TP degree holds the "
          "model and meets a time per output token of 30 ms at the lowest cost? Give the "
          "number of T4s.", unit="devices (a whole number)",
          hint="For each degree N: does tp_max_batch(..., N, 4096) reach 1, and is "
          "tp_step_s('llama-2-13b', 'T4', N, 1, 4096, interconnect='PCIe Gen3 "
          f"x16') (the achievable model) within 0.030 s? The weight read alone is {_TP_WEIGHT_GB:.0f} GB / N over "
          "320 GB/s; the all-reduces (2 x 40 layers + 1) add to it. Take the smallest N "
          "that passes both.",
          rel_tol=0.0,
          slips={0.5: "Two T4s hold the model and one sequence, but a token takes about "
                      f"{_TP2_MS:.0f} ms there: the objective, not the memory, decides.",
                 0.25: f"One T4 cannot hold {_TP_WEIGHT_GB:.0f} GB of fp16 weights.",
                 2.0: "Eight meet the objective too, at twice the cost: fewer already do."})
def _():
    opts = tp_degree_rows()
    return next(n for n in TP_DEGREES if opts[n]["fits"] and opts[n]["step_s"] <= TP_TPOT_S)
LAB = "labs/07_tensor_parallel"


@register("lab-tp-bytes-sent", where=LAB,
          question="Bytes each of 4 ranks sends in a ring all-reduce of an 8 MiB tensor "
          "(8 x 2**20 bytes). An exact whole number of bytes.",
          unit="bytes", hint="Reduce-scatter then all-gather: each sends (N-1)/N of the "
          "tensor twice. MiB is 2**20 bytes, not 1e6.")
def _():
    return collectives.allreduce_bytes_sent(8 * 2**20, 4)


@register("lab-tp-bus-bandwidth", where=LAB,
          question="Bus bandwidth of a 2-rank all-reduce of 8e6 bytes that took 10 ms. "
          "Bytes per second.",
          unit="bytes/s", hint="Algorithm bandwidth (bytes / seconds) times 2(N-1)/N, "
          "as nccl-tests reports it; 10 ms is 0.010 s.")
def _():
    return collectives.allreduce_bus_bandwidth(8e6, 2, 0.010)


@register("lab-tp-pcie-allreduce", where=LAB,
          question="Time of an all-reduce of 1 MiB (2**20 bytes) between 2 GPUs over PCIe "
          "Gen4 x16 (31.5 GB/s each way), with NCCL's ring cost model: the faster of its LL "
          "and Simple protocols (LL128 is off on PCIe). Seconds, three significant figures.",
          unit="seconds",
          hint="Two devices: 2(N-1) = 2 steps, and each sends the message once, at the "
          f"protocol's share of 31.5 GB/s. {costs('PCIe Gen4 x16')}. Take the smaller.",
          slips={ll_slip(2**20, 2, "PCIe Gen4 x16"):
                 "That is LL's latency with the full bandwidth: LL reaches half of it. "
                 "Compute LL and Simple each with its own numbers."})
def _():
    return collectives.interconnect_allreduce_s(2**20, 2, "PCIe Gen4 x16")

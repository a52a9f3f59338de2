"""What `chapters/08_multi_gpu` computes for its prose, tables and figures: one function a
table, a figure or a block of glued values (`book.glue_all`). The page's visible tables
(the capacity, the TP sweep, the layouts, the trade-off, the prefill table) are built on
the page; these functions read them, and everything else comes from the catalogue and
`gpuinfer.predict`. Llama-2-70B in fp16 on H100 SXM servers at 4,096 tokens of context
throughout, unless a function says otherwise."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter08_multi_gpu as decision
from gpuinfer.hardware import device_links
from gpuinfer.measure import reference
from gpuinfer.predict import (achievable, architectures, calibration, collectives, llm,
                              multinode, paged_kv, parallel, step_model, tabular, validation)

MODEL = "llama-2-70b"
GPU = "H100 SXM"
CONTEXT = 4096                      # tokens of context, every sequence
VLLM = paged_kv.VLLM_GPU_MEMORY_UTILIZATION
#: FP8 W8A8 weights and matmuls, the KV cache left in fp16.
FP8 = dict(dtype="fp8_e4m3", compute_dtype="fp8_e4m3")
#: The engines' section: each variant's keyword arguments to `parallel.tp_options`.
ENGINE_VARIANTS = {"fp16, NCCL": {}, "fp16, custom all-reduce": dict(allreduce="custom"),
                   "FP8 W8A8, NCCL": FP8,
                   "FP8 W8A8, custom all-reduce": dict(allreduce="custom", **FP8)}
#: The page's exercises (`exercise_block` glues their answers).
EXERCISES = ("parallel-allreduce-batch64", "parallel-fewest-h100", "parallel-crossover-batch1",
             "parallel-kv-per-device-16", "parallel-launch-breakeven",
             "parallel-decision-gpu-tp")


def _model():
    return architectures.get(MODEL)


def _link():
    return device_links.interconnect_for(hardware.get(GPU))


def _message(batch) -> int:
    """Bytes of one all-reduce of `[batch, d_model]` fp16 activations."""
    return batch * _model().d_model * 2


def _step_s(n, batch, **kw) -> float:
    """The achievable model's TP step (seconds) of the page's model on the page's GPU."""
    return parallel.tp_step_s(MODEL, GPU, n, batch, CONTEXT, **kw)


def engine_reserve(accelerator, utilisation=VLLM) -> float:
    """What vLLM leaves unused of `accelerator` at `utilisation`, plus 1 GiB for the
    activations (chapter 9), bytes: the reserve that makes a batch vLLM's."""
    return ((1 - utilisation) * hardware.get(accelerator).memory_bytes
            + llm.DEFAULT_RESERVE_BYTES)


def fits_table(devices=("A100 80GB", "H100 SXM", "H200", "B200")) -> pd.DataFrame:
    """Each device's memory (GB), the model's fp16 weights (GB) and the sequences of
    `CONTEXT` tokens that fit (`llm.max_batch`), with the 1 GiB reserve and at vLLM's
    default utilisation."""
    rows = []
    for name in devices:
        acc = hardware.get(name)
        rows.append({"device": acc.name, "memory (GB)": acc.memory_bytes / 1e9,
                     "weights (GB)": step_model.weight_bytes(MODEL, "fp16") / 1e9,
                     f"batch at {CONTEXT:,}": llm.max_batch(MODEL, acc, CONTEXT),
                     f"at vLLM's {VLLM:g}": llm.max_batch(
                         MODEL, acc, CONTEXT, reserve_bytes=engine_reserve(acc))})
    return pd.DataFrame(rows).set_index("device")


def memory_block(fits) -> dict:
    """The "it does not fit" section's values from `fits_table()`: the weights, the H100's
    bytes, the batches of an H200 and a B200, and what vLLM's default leaves."""
    gpu, h200 = hardware.get(GPU), hardware.get("H200")
    h200_spare = VLLM * h200.memory_bytes - step_model.weight_bytes(MODEL, "fp16")
    return {"w70_gb": step_model.weight_bytes(MODEL, "fp16") / 1e9,
            "h100_gb": gpu.memory_bytes / 1e9,
            "reserve_gib": llm.DEFAULT_RESERVE_BYTES / 2**30,
            "h200_batch": float(fits.loc["H200", f"batch at {CONTEXT:,}"]),
            "b200_batch": float(fits.loc["B200", f"batch at {CONTEXT:,}"]),
            "b200_batch_09": float(fits.loc["B200", f"at vLLM's {VLLM:g}"]),
            "vllm_util": VLLM,
            "vllm_unused_pct": 100 * (1 - VLLM),
            "vllm_unused_gb": (1 - VLLM) * gpu.memory_bytes / 1e9,
            "h200_vllm_gb": VLLM * h200.memory_bytes / 1e9,
            "h200_vllm_spare_gb": h200_spare / 1e9,
            "kv70_kb": step_model.kv_cache_bytes_per_token(MODEL) / 1e3,
            "context": float(CONTEXT)}


def capacity_block(capacity) -> dict:
    """The capacity section's values from the page's `capacity` table (index N; columns
    "batch, H100 SXM", "batch, H200" and each at vLLM's default)."""
    h100, h100_09 = f"batch, {GPU}", f"{GPU}, vLLM's {VLLM:g}"
    return {"min_n": float(parallel.min_tp_degree(MODEL, GPU, CONTEXT, batch=1)),
            "batch_n2": float(capacity.loc[2, h100]),
            "batch_n8": float(capacity.loc[8, h100]),
            "h200_n8": float(capacity.loc[8, "batch, H200"]),
            "batch_n2_09": float(capacity.loc[2, h100_09]),
            "batch_n8_09": float(capacity.loc[8, h100_09]),
            "h200_n8_09": float(capacity.loc[8, f"H200, vLLM's {VLLM:g}"]),
            "n2_cache_lost_pct": 100 * (1 - capacity.loc[2, h100_09] / capacity.loc[2, h100])}


def capacity_figure(capacity):
    """Sequences that fit against the devices sharing the model, H100 and H200."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for col, style in ((f"batch, {GPU}", "o-"), ("batch, H200", "s--")):
        ax.plot(capacity.index, capacity[col], style, color="black",
                mfc="none", label=col.replace("batch, ", ""))
    ax.set_xscale("log", base=2)
    ax.set_xticks(capacity.index, [str(n) for n in capacity.index])
    ax.set_xlabel("devices sharing the model, N")
    ax.set_ylabel(f"sequences of {CONTEXT:,} tokens that fit")
    ax.set_title(f"{_model().name} fp16: what fits, split N ways")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def custom_allreduce_measured_s(n_bytes) -> float:
    """SGLang's one-shot all-reduce measured on 8 H100s without CUDA graphs at `n_bytes`
    (`collectives.CUSTOM_ALLREDUCE_MEASURED`), seconds."""
    return collectives.CUSTOM_ALLREDUCE_MEASURED["seconds_by_bytes"][int(n_bytes)]


def custom_step_s(parts) -> float:
    """A TP step (`tp_step_s(..., parts=True)`) with its all-reduces at SGLang's measured
    one-shot time instead of NCCL's, seconds."""
    return parts["shard_s"] + parts["n_allreduces"] * custom_allreduce_measured_s(
        parts["allreduce_bytes"])


def tp_block(tp8, pp8, one_device_s) -> dict:
    """TP8 against PP8 at batch 1 (the page's `tp8` parts, `pp8` breakdown and one
    device's step, seconds): the step and its terms, the measured one-shot all-reduce,
    the achievable model's constants, the ceiling's all-reduces and the published TP
    runs the achievable model was not fitted to."""
    custom_ar_s = custom_allreduce_measured_s(tp8["allreduce_bytes"])
    tp8_b8 = _step_s(8, 8, parts=True)
    pp8_ach = 1 / (_step_s(1, 1) / 8 + pp8["send_s"])
    ceil8 = _step_s(8, 1, achievable=False, parts=True)
    e = calibration.errors(split="heldout")
    e = e[(e.tp > 1) & e.accelerator.isin(["H100 SXM", "H200"])]
    gf = gptfast_tp_rows()
    gf8 = gf.loc[8]
    return {"tp8_ms": tp8["total_s"] * 1e3,
            "tp8_shard_ms": tp8["shard_s"] * 1e3,
            "tp8_comm_ms": tp8["comm_s"] * 1e3,
            "pp8_ms": pp8["latency_s"] * 1e3,
            "one_ms": one_device_s * 1e3,
            "pp8_tps": pp8["tokens_per_s"],
            "tp8_batch8_tps": 8 / tp8_b8["total_s"],
            "n_allreduce": float(tp8["n_allreduces"]),
            "ar_bytes": float(tp8["allreduce_bytes"]),
            "ar8_us": tp8["allreduce_s"] * 1e6,
            "logits_kb": _model().vocab_size * 2 / 1e3,
            "custom_ar_us": custom_ar_s * 1e6,
            "custom_ar_ratio": tp8["allreduce_s"] / custom_ar_s,
            "tp8_custom_ms": custom_step_s(tp8) * 1e3,
            "tp8_custom_comm_ms": tp8["n_allreduces"] * custom_ar_s * 1e3,
            "tp8_ms_ach": _step_s(8, 1) * 1e3,
            "tp8_batch8_tps_ach": 8 / _step_s(8, 8),
            "pp8_tps_ach": pp8_ach,
            "ach_bw_pct": 100 * achievable.FITTED.bandwidth,
            "ach_step_ms": achievable.FITTED.step_s * 1e3,
            "ach_gap_us": achievable.FITTED.kernel_gap_s * 1e6,
            "sim_ceil_comm_ms": ceil8["comm_s"] * 1e3,
            "tp_rows": float(len(e)),
            "tp_rows_median_pct": e.error_pct.abs().median(),
            "tp_rows_worst_pct": e.error_pct.abs().max(),
            "gf8_tps": gf8.measured * 8, "gf8_tpg": gf8.measured,
            "gf8_model_tpg": gf8.achievable,
            "gf8_over_pct": 100 * (gf8.achievable / gf8.measured - 1),
            "gf_worst_pct": 100 * (gf.achievable / gf.measured - 1).abs().max(),
            "gf_degrees": ", ".join(f"TP{n}" for n in gf.index),
            "tp_sources_text": tp_interval_sources()}


#: Who published the runs `validation.interval(..., "tp>1")` reads (the validation
#: data's `source` keys; references.bib holds each).
TP_SOURCE_LABELS = {
    "gptfast2023": "gpt-fast's batch-1 runs",
    "trtllm2025perfoverview": "TensorRT-LLM's throughput",
    "oraclemi300x2024": "vLLM's throughput (Oracle)",
    "sglang030vsvllm060": "SGLang's throughput",
    "vllm060bysglang": "vLLM's throughput (SGLang's run)"}


def gptfast_tp_rows() -> pd.DataFrame:
    """gpt-fast's batch-1 runs of the page's model in 16 bits at TP > 1 (A100s), from
    `validation.validation_errors()`: index tp; `measured` and `achievable` tokens/s per
    GPU."""
    e = validation.validation_errors()
    rows = e[(e.source == "gptfast2023") & (e.model == _model().name.lower())
             & (e.tp > 1) & e.weight_format.isin(["bf16", "fp16"])]
    return rows.set_index("tp")[["accelerator", "measured", "achievable"]].sort_index()


def tp_interval_sources() -> str:
    """The sources behind `validation.interval(..., "tp>1")`, each with its rows and the
    range of measured / predicted, in words."""
    e = validation.validation_errors()
    e = e[e.tp > 1].assign(ratio=lambda d: d.measured / d.achievable)
    parts = [f"{TP_SOURCE_LABELS[src]} on {', '.join(sorted(set(g.accelerator)))} "
             f"({len(g)} row{'s' * (len(g) > 1)}, "
             + (f"{g.ratio.min():.2f} to {g.ratio.max():.2f})" if len(g) > 1
                else f"{g.ratio.iloc[0]:.2f})")
             for src, g in sorted(e.groupby("source"), key=lambda kv: -len(kv[1]))]
    return f"{len(parts)} sources, each weighing the same: " + ", ".join(parts)


def tp_interval_nvlink() -> tuple:
    """`validation.interval(1.0, "tp>1")` on the rows measured on GPUs with NVLink alone
    (NVIDIA's: vLLM's MI300X runs left out), every source still weighing the same:
    (low, high) of measured / achievable."""
    e = validation.validation_errors()
    nvlink = [hardware.get(a).nvlink is not None for a in e.accelerator]
    return validation.interval(1.0, "tp>1", errors=e[nvlink])


def protocols_figure():
    """An 8-GPU ring all-reduce's time per protocol against the message size, log-log,
    with the fastest and the batch-1 and batch-128 messages marked."""
    link, gpu = _link(), hardware.get(GPU)
    sizes = np.geomspace(1e3, 1e9, 120)                    # bytes
    tables = [collectives.allreduce_protocols(s, 8, link).xs("ring") for s in sizes]
    curves = {p: [t.loc[p, "seconds"] * 1e6 for t in tables] for p in link.protocols}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (p, us), style in zip(curves.items(), (":", "--", "-.")):
        ax.loglog(sizes, us, style, color="black", label=f"ring, {p}")
    ax.loglog(sizes, np.min(list(curves.values()), axis=0), "-", color="grey",
              lw=4, alpha=0.5, label="NCCL picks the fastest")
    for batch in (1, 128):
        ax.axvline(_message(batch), color="grey", lw=1)
        ax.annotate(f"batch {batch}", (_message(batch), 2e4),
                    fontsize=8, ha="center", backgroundcolor="white")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(f"all-reduce on 8 x {gpu.name} (µs)")
    ax.set_title(f"{link.name}: a latency floor, then bytes / bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def fastest_protocol(n_bytes, n=8, interconnect=None) -> tuple:
    """NCCL's fastest (algorithm, protocol) for an all-reduce of `n_bytes` on `n` GPUs."""
    return collectives.allreduce_protocols(n_bytes, n, interconnect or _link())["seconds"].idxmin()


def protocol_switch_bytes(to, lo=1e3, hi=1e9) -> float:
    """The message size (bytes) from which protocol `to` (or a later one of LL, LL128,
    Simple) is NCCL's fastest on 8 H100s: bisection, as the winner moves along the three
    with the size."""
    order = list(_link().protocols)                      # LL, LL128, Simple
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        later = order.index(fastest_protocol(mid)[1]) >= order.index(to)
        lo, hi = (lo, mid) if later else (mid, hi)
    return hi


def protocols_block() -> dict:
    """The all-reduce section's values: where LL128 and Simple take over, batch 128's
    protocols, NCCL's NVLink and LL constants, NVLS's latency."""
    link = _link()
    to_ll128, to_simple = protocol_switch_bytes("LL128"), protocol_switch_bytes("Simple")
    b128 = collectives.allreduce_protocols(_message(128), 8, link).xs("ring")
    return {"ll128_from_mb": to_ll128 / 1e6,
            "simple_from_mb": to_simple / 1e6,
            "ll128_from_batch": float(np.ceil(to_ll128 / _message(1))),
            "b128_ll_us": b128.loc["LL", "seconds"] * 1e6,
            "b128_simple_us": b128.loc["Simple", "seconds"] * 1e6,
            "nvls_us": device_links.NCCL_NVLS["latency_s"] * 1e6,
            "ll_max_gbs": device_links.NCCL_LL_MAX_BUS_BANDWIDTH["hopper"] / 1e9,
            "ll128_gbs": b128.loc["LL128", "bandwidth_bytes_per_s"] / 1e9,
            "nvlink_gbs": link.bandwidth_bytes_per_s / 1e9,
            "nccl_nvlink_gbs": link.nccl_bus_bandwidth_bytes_per_s / 1e9,
            "nvlink_link_gbs": device_links.NCCL_NVLINK_GB_PER_S["hopper"],
            "ll128_frac_pct": 100 * link.nccl("LL128").bandwidth_fraction,
            "simple_step_us": link.nccl("Simple").step_latency_s * 1e6,
            "ring8_steps": 2.0 * (8 - 1),
            "nccl_nvlink3_gbs": device_links.get_interconnect(
                "NVLink 3").nccl_bus_bandwidth_bytes_per_s / 1e9}


def ring_step_floor_s(n_bytes, n, protocol) -> float:
    """NCCL's latency a NVLink step of a ring spanning servers, read back from the ring's
    latency (less its base and the network steps, over the 2(n - 2) NVLink steps of two
    servers), seconds."""
    ring = collectives.allreduce_protocols(n_bytes, n, _link()).xs("ring")
    net = device_links.get_interconnect(collectives.DEFAULT_NETWORK)
    return (ring.loc[protocol, "latency_s"] - ring.loc[protocol, "base_s"]
            - 2 * net.nccl(protocol).step_latency_s) / (2 * (n - 2))


def nvls_tree_from_bytes(n=16, lo=1e5, hi=1e10) -> float:
    """The message size (bytes) from which NVLS_TREE's best case beats NCCL's fastest
    ring or tree on `n` H100s: bisection."""
    link = _link()
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        wins = (multinode.nvls_tree_allreduce(mid, n, link)["seconds"]
                < collectives.allreduce_protocols(mid, n, link).seconds.min())
        lo, hi = (lo, mid) if wins else (mid, hi)
    return hi


def multinode_block() -> dict:
    """The section on eight GPUs to a domain: the batch-1 all-reduce on 16 and 32 GPUs
    (fastest and ring), LL's cap across nodes, NCCL's floor on a ring's NVLink step and the
    tree's correction, and NVLS_TREE against the tree."""
    link = _link()
    ar = {n: collectives.allreduce_protocols(_message(1), n, link) for n in (8, 16, 32)}
    best = {n: t.seconds.min() for n, t in ar.items()}
    ring = {n: t.xs("ring").seconds.min() for n, t in ar.items()}
    ndr = device_links.get_interconnect(collectives.DEFAULT_NETWORK)
    nt = {b: multinode.nvls_tree_allreduce(_message(b), 16, link) for b in (1, 128)}
    from_bytes = nvls_tree_from_bytes()
    return {"ar16_us": best[16] * 1e6, "ar32_us": best[32] * 1e6,
            "ring16_us": ring[16] * 1e6, "ring32_us": ring[32] * 1e6,
            "ar_ratio_16": best[16] / best[8],
            "ndr_node_gbs": ndr.bandwidth_bytes_per_s / 1e9,
            "tree_corr_ll_16k": device_links.nccl_tree_correction(_message(1), "LL"),
            "tree_corr_ll128_2m": device_links.nccl_tree_correction(_message(128), "LL128"),
            "ll_2node_gbs": ar[16].loc[("ring", "LL"), "bandwidth_bytes_per_s"] / 1e9,
            "ll_more_gbs": ar[32].loc[("ring", "LL"), "bandwidth_bytes_per_s"] / 1e9,
            "net_overhead_us": ring_step_floor_s(_message(1), 16, "LL") * 1e6,
            "alpha_us": link.nccl("LL").step_latency_s * 1e6,
            "ring16_bytes_us": ar[16].xs("ring").loc["LL", "bandwidth_s"] * 1e6,
            "nvlst_lat_us": nt[1]["latency_s"] * 1e6,
            "nvlst_b1_us": nt[1]["seconds"] * 1e6,
            "nvlst_b128_us": nt[128]["seconds"] * 1e6,
            "tree_b128_us": collectives.allreduce_protocols(
                _message(128), 16, link).seconds.min() * 1e6,
            "nvlst_bw_gbs": nt[1]["bandwidth_bytes_per_s"] / 1e9,
            "nvlst_from_mb": from_bytes / 1e6,
            "nvlst_from_batch": float(np.ceil(from_bytes / _message(1)))}


def crossover_figure(degrees, big):
    """Shard, all-reduces and step against N at batch 1 and batch `big` (log-log; past the
    NVLink domain shaded), each panel's crossover (`parallel.crossover_devices`) dotted."""
    link, model = _link(), _model()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
    for ax, batch in zip(axes, (1, big)):
        ok = [n for n in degrees if parallel.tp_max_batch(MODEL, GPU, n, CONTEXT) >= batch]
        parts = pd.DataFrame([_step_s(n, batch, parts=True) for n in ok])
        ax.loglog(ok, parts.shard_s * 1e3, "o-", color="black", mfc="none", label="shard")
        ax.loglog(ok, parts.comm_s * 1e3, "s--", color="black", label="all-reduces")
        ax.loglog(ok, parts.total_s * 1e3, "-", color="grey", lw=3, alpha=0.6, label="step")
        ax.axvspan(link.domain_gpus, max(degrees) * 1.2, color="grey", alpha=0.12, lw=0)
        cross = parallel.crossover_devices(MODEL, GPU, batch, CONTEXT)
        ax.axvline(cross, color="grey", ls=":")
        ax.set_xticks(ok, [str(n) for n in ok])
        ax.xaxis.set_minor_locator(plt.NullLocator())
        ax.yaxis.set_major_locator(mticker.LogLocator(subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(mticker.NullFormatter())
        ax.set_xlabel("devices, N (shaded: over InfiniBand)")
        ax.set_ylabel("time per decode step (ms)")
        ax.set_title(f"batch {batch}: crossover at N = {cross}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{model.name} fp16, {CONTEXT:,} tokens, {GPU}: "
                 f"{link.name} in a server, InfiniBand across")
    return fig


def even_batch(n_a, n_b, big, **kw) -> int:
    """The smallest batch (1 to `big`) at which TP`n_a`'s achievable step is no shorter
    than TP`n_b`'s."""
    return next(b for b in range(1, big + 1) if _step_s(n_a, b, **kw) >= _step_s(n_b, b, **kw))


def ring_only_step_s(sweep, n) -> float:
    """TP`n`'s step from the page's `sweep` with its all-reduces on NCCL's ring alone (no
    tree), seconds."""
    return sweep.shard_s[n] + sweep.n_allreduces[n] * collectives.allreduce_protocols(
        sweep.allreduce_bytes[n], n, _link(), algorithms=("ring",)).seconds.min()


#: What every "the two ranges overlap" check on this page leaves out, in words.
CONSERVATIVE = ("a conservative check: both predictions share the model's bias, so their "
                "ratio is better known than either")


def tp16_verdict(choice) -> str:
    """TP16 against TP8 at batch 1 within the model's error (a `validation.choice`)."""
    if choice["flips"]:
        return (f"and TP8's range ({choice['other_low'] * 1e3:.2f} to "
                f"{choice['other_high'] * 1e3:.2f} ms) overlaps it: the tenth TP16 gains is "
                "within the model's error, so measure both before buying the second server "
                f"({CONSERVATIVE})")
    return (f"and TP8's range ({choice['other_low'] * 1e3:.2f} to "
            f"{choice['other_high'] * 1e3:.2f} ms) does not overlap it: the gain holds "
            f"within the model's error ({CONSERVATIVE})")


def sweep_block(sweep, tp8, big) -> dict:
    """The crossover section's values from the page's batch-1 `sweep` (index n_devices,
    `tp_step_s` parts), TP8's parts `tp8` and the large batch `big`: TP16 and TP32 against
    TP8, both crossovers, the ring alone, a 32-GPU NVLink domain, batch `big`'s
    all-reduces, the one-shot TP8 against TP16, the ceiling and the model's error."""
    t = sweep.total_s
    big8, big16 = _step_s(8, big, parts=True), _step_s(16, big, parts=True)
    big16_table = collectives.allreduce_protocols(big16["allreduce_bytes"], 16, _link())
    nvl = {(n, b): _step_s(n, b, interconnect="NVLink 4 (GH200 NVL32)")
           for n in (8, 16) for b in (1, big)}
    ta = {n: _step_s(n, 1) for n in (8, 16)}
    lo, hi = validation.interval(1.0, "tp>1")
    nv_lo, nv_hi = tp_interval_nvlink()
    c16 = validation.choice(ta[16], ta[8], "tp>1", per="cost")   # a step: seconds, a cost
    return {"tp16_ms": t[16] * 1e3, "tp32_ms": t[32] * 1e3,
            "faster16_pct": 100 * (1 - t[16] / t[8]),
            "slower32_pct": 100 * (t[32] / t[16] - 1),
            "tpg16_over_8": (1 / t[16] / 16) / (1 / t[8] / 8),
            "share_b1_8": 100 * sweep.comm_s[8] / t[8],
            "share_b1_16": 100 * sweep.comm_s[16] / t[16],
            "cross_b1": float(parallel.crossover_devices(MODEL, GPU, 1, CONTEXT)),
            "cross_big": float(parallel.crossover_devices(MODEL, GPU, big, CONTEXT)),
            "big": float(big),
            "even_batch": float(even_batch(16, 8, big)),
            "share_big_8": 100 * big8["comm_s"] / big8["total_s"],
            "big8_ms": big8["total_s"] * 1e3, "big16_ms": big16["total_s"] * 1e3,
            "big_mb": big8["allreduce_bytes"] / 1e6,
            "big_ar16_us": big16["allreduce_s"] * 1e6,
            "big_ar8_us": big8["allreduce_s"] * 1e6,
            "big16_protocol": big16["protocol"],
            "big16_bw_gbs": big16_table.loc[(big16["algorithm"], big16["protocol"]),
                                            "bandwidth_bytes_per_s"] / 1e9,
            "ring16_step_ms": ring_only_step_s(sweep, 16) * 1e3,
            "ring32_step_ms": ring_only_step_s(sweep, 32) * 1e3,
            "nvl16_gain_pct": 100 * (1 - nvl[16, 1] / nvl[8, 1]),
            "nvl16_big_gain_pct": 100 * (1 - nvl[16, big] / nvl[8, big]),
            "tp8_custom_faster_pct": 100 * (1 - custom_step_s(tp8) / t[16]),
            "tp8_ceil_ms": tp8["ceiling_s"] * 1e3,
            "tp16_ceil_ms": sweep.ceiling_s[16] * 1e3,
            "tp16_ms_ach": ta[16] * 1e3,
            "faster16_pct_ach": 100 * (1 - ta[16] / ta[8]),
            "tpg16_over_8_ach": (1 / ta[16] / 16) / (1 / ta[8] / 8),
            "even_batch_ach": float(even_batch(16, 8, big)),
            "tp_ratio_lo": lo, "tp_ratio_hi": hi,
            "tp_ratio_nv_lo": nv_lo, "tp_ratio_nv_hi": nv_hi,
            "tp16_ms_ach_lo": c16["low"] * 1e3, "tp16_ms_ach_hi": c16["high"] * 1e3,
            "tp16_flip_text": tp16_verdict(c16)}


def closed_form(accelerator, n_bytes, n_allreduces, interconnect=None) -> dict:
    """The chapter's closed forms for the achievable model (what
    `parallel.crossover_devices` searches) on 8 GPUs of `accelerator` with NCCL's LL ring:
    its base t0 and step alpha (s), LL's bandwidth beta (bytes/s), one device's kernels T1
    (s, `achievable.step_breakdown` at batch 1: the part of the shard that falls as 1/N),
    the shard's fixed overheads O (s, `achievable.overheads`: kernel gaps and the step's
    fixed cost, paid at every N), the crossover N* (the positive root of
    2 alpha N^2 + (t0 - 2 alpha + 2S/beta - O/K) N - (T1/K + 2S/beta) = 0) and the optimum
    N_opt = sqrt((T1/K - 2S/beta) / (2 alpha)), for all-reduces of `n_bytes` (S),
    `n_allreduces` (K) of them a step."""
    link = interconnect or device_links.interconnect_for(hardware.get(accelerator))
    ll = collectives.allreduce_protocols(n_bytes, 8, link).loc[("ring", "LL")]
    t0, alpha, beta = ll.base_s, link.nccl("LL").step_latency_s, ll.bandwidth_bytes_per_s
    t1 = float(achievable.step_breakdown(MODEL, accelerator, 1, CONTEXT)["seconds"].sum())
    o = float(achievable.overheads(0.0, _model().n_layers, achievable.FITTED))
    a, b = 2 * alpha, t0 - 2 * alpha + 2 * n_bytes / beta - o / n_allreduces
    c = t1 / n_allreduces + 2 * n_bytes / beta
    return {"t0_s": t0, "alpha_s": alpha, "beta": beta, "t1_s": t1, "overhead_s": o,
            "nstar": (-b + np.sqrt(b**2 + 4 * a * c)) / (2 * a),
            "nopt": np.sqrt((t1 / n_allreduces - 2 * n_bytes / beta) / (2 * alpha))}


def closed_form_block(tp8) -> dict:
    """The closed-form section's values for TP8's all-reduces (`tp8`, parts): t0, alpha,
    beta, T1, N*, N_opt, and the quadratic's all-reduce at N = 16 (30 steps at NVLink's
    latency, microseconds)."""
    s = float(tp8["allreduce_bytes"])
    cf = closed_form(GPU, s, tp8["n_allreduces"])
    quad16 = cf["t0_s"] + 30 * cf["alpha_s"] + 2 * 15 / 16 * s / cf["beta"]
    return {"nstar": cf["nstar"], "nopt": cf["nopt"], "t0_us": cf["t0_s"] * 1e6,
            "beta_gbs": cf["beta"] / 1e9, "t1_ms": cf["t1_s"] * 1e3,
            "overhead_ms": cf["overhead_s"] * 1e3, "quad16_us": quad16 * 1e6}


def layout_verdict(clay, ceil_tps) -> str:
    """TP8 x PP2 against TP16 within the model's error (`clay`, a `validation.choice`) and
    on the ceilings (`ceil_tps`, tokens/s)."""
    reverses = ceil_tps["tp16"] > ceil_tps["tp8pp2"]
    text = ("The two ranges overlap, so the order of TP8 x PP2 and TP16 is within the "
            "model's error" if clay["flips"] else
            "The two ranges do not overlap: TP8 x PP2's lead holds within the model's error")
    if reverses:
        text += (", and the ceilings reverse it: with no latency TP16 could serve up to "
                 f"{ceil_tps['tp16']:,.0f} tokens/s against at most {ceil_tps['tp8pp2']:,.0f} "
                 "for TP8 x PP2, so what puts TP8 x PP2 ahead is the all-reduces' latency "
                 "across the network, as NCCL's model prices it")
    else:
        text += (f", and the ceilings agree (TP8 x PP2 at most {ceil_tps['tp8pp2']:,.0f} "
                 f"tokens/s, TP16 {ceil_tps['tp16']:,.0f})")
    text += (". No published run in the package crosses servers (above), so the band itself "
             "is borrowed from runs inside one: ")
    return text + ("measure both layouts on your engine and network before settling on one"
                   if clay["flips"] or reverses else
                   "a measurement of the chosen layout still has the last word")


def layouts_block(layouts, parts, pp8, seqs=16) -> dict:
    """The layouts section's values from the page's `layouts` table (rows TP16, PP16, TP8 x
    PP2, 2 x TP8; column "tokens/s, 16 GPUs"), the `parts` each row comes from (keys tp16,
    pp16, tp8pp2, tp8x2: `tp_step_s` parts, `pp_decode_breakdown`, `tp_pp_decode`) for
    `seqs` sequences, and PP8's breakdown (its NVLink send): the sends, the steps, the
    layouts' rates on the achievable model and the ceiling, and a verdict within the
    model's error."""
    tp16, pp16, tp8pp2, tp8x2 = (parts[k] for k in ("tp16", "pp16", "tp8pp2", "tp8x2"))
    rate = layouts["tokens/s, 16 GPUs"]
    # The achievable model: TP steps from tp_step_s, a stage 1/stages of its step.
    stage = _step_s(8, seqs // 2) / 2
    ach = {"tp16": seqs / _step_s(16, seqs), "pp16": 1 / (_step_s(1, 1) / 16 + pp16["send_s"]),
           "tp8pp2": seqs / max(2 * stage + tp8pp2["send_s"], 2 * (stage + tp8pp2["send_s"])),
           "2xtp8": seqs / _step_s(8, seqs // 2)}
    # The ceilings (tokens/s on 16 GPUs): TP16 at its ceiling_s; TP8 x PP2 at most two TP8
    # replicas' (the send only adds time); PP16 at most one stage a token, no send.
    ceil = {"tp16": seqs / tp16["ceiling_s"], "tp8pp2": seqs / tp8x2["ceiling_s"],
            "pp16": 1 / parallel.pp_decode_breakdown(MODEL, GPU, 16, 1, CONTEXT,
                                                      achievable=False)["stage_s"]}
    clay = validation.choice(ach["tp8pp2"], ach["tp16"], "tp>1", per="rate")
    return {"pp16_send_us": pp16["send_s"] * 1e6, "pp_nvlink_us": pp8["send_s"] * 1e6,
            "pp16_ms": pp16["latency_s"] * 1e3, "tp16b_ms": tp16["total_s"] * 1e3,
            "tp8x2_ms": tp8x2["total_s"] * 1e3, "tp8x2_over_tp16": rate.iloc[3] / rate.iloc[0],
            "tp16_comm_share": 100 * tp16["comm_s"] / tp16["total_s"],
            "tp8pp2_ms": tp8pp2["latency_s"] * 1e3, "tp8pp2_send_us": tp8pp2["send_s"] * 1e6,
            "tp8pp2_tps": tp8pp2["tokens_per_s"], "tp8x2_tps": rate.iloc[3],
            "tp8pp2_over_tp16": rate.iloc[2] / rate.iloc[0],
            "tp8pp2_over_x2": rate.iloc[2] / rate.iloc[3],
            "tp8_b8_ms": tp8x2["total_s"] * 1e3,
            "tp8pp2_tps_ach": ach["tp8pp2"], "tp8x2_tps_ach": ach["2xtp8"],
            "tp16_tps_ach": ach["tp16"], "pp16_tps_ach": ach["pp16"],
            "tp8pp2_over_tp16_ach": ach["tp8pp2"] / ach["tp16"],
            "tp8pp2_over_x2_ach": ach["tp8pp2"] / ach["2xtp8"],
            **{f"{k}_tps_ceil": v for k, v in ceil.items()},
            "tp8pp2_tps_ach_lo": clay["low"], "tp8pp2_tps_ach_hi": clay["high"],
            "tp16_tps_ach_lo": clay["other_low"], "tp16_tps_ach_hi": clay["other_high"],
            "layout_verdict_text": layout_verdict(clay, ceil)}


#: The launch table's columns: the shard on the roofline (no time between kernels, no
#: all-reduces: a floor on the GPU's work), the achievable model's kernels (its shard less
#: the gaps between graphed kernels and the step's fixed cost) and its whole step (CUDA
#: graphs, all-reduces included).
LAUNCH_SHARD, LAUNCH_KERNELS, LAUNCH_STEP = ("roofline shard (ms)", "achievable kernels (ms)",
                                             "achievable step, graphed (ms)")


def kernels_s(parts) -> float:
    """The GPU's work in a TP step's kernels on the achievable model, seconds: the shard
    (`tp_step_s(..., parts=True)`'s `shard_s`) less `achievable.overheads` (the gaps
    between graphed kernels and the step's fixed cost), what a kernel's launch races."""
    return parts["shard_s"] - float(achievable.overheads(0.0, _model().n_layers,
                                                         achievable.FITTED))


def launch_verdict(gpu_us, host_us) -> str:
    """Whose an eager step is when the GPU has `gpu_us` of work a kernel and the host
    costs `host_us` (low, high) a kernel, microseconds."""
    lo, hi = host_us
    if gpu_us <= lo:
        return "the CPU's at any cost in the range"
    if gpu_us < 1.05 * lo:
        return ("the CPU's at any cost in the range above its low end, where the two are "
                "even")
    if gpu_us < hi:
        return "as much the CPU's as the GPU's"
    return "the GPU's at any cost in the range"


def message_label(batch) -> str:
    """`batch`'s all-reduce message ([batch, d_model] fp16) in kB or MB, for a table's key."""
    n_bytes = _message(batch)
    size = f"{n_bytes / 1e3:.1f} kB" if n_bytes < 1e6 else f"{n_bytes / 1e6:.1f} MB"
    return f"batch {batch} ({size})"


def launch_block(per_kernel, kernels, floor_ms, host_s) -> dict:
    """The launch floor's values from the page's `per_kernel` table (index N; columns
    `LAUNCH_SHARD`, `LAUNCH_KERNELS` and "GPU work a kernel (us)", the achievable
    kernels'), the `kernels` a step, the
    launch floor `floor_ms` (low, high) at the host times `host_s` (low, high; seconds a
    kernel), NVIDIA's CUDA-graphs post and the gpt-fast post's eager and compiled rates."""
    blog = tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S
    graph = blog["replayed as a CUDA graph"] - blog["kernel alone"]
    gf = reference.published("decode").set_index("what")["value"]
    eager = gf["gpt-fast, eager (no compilation)"]
    compiled = gf["gpt-fast blog, torch.compile and a static KV cache"]
    extra = 1 / eager - 1 / compiled
    table = per_kernel
    work = {n: table.loc[n, "GPU work a kernel (us)"] for n in (8, 16)}
    host_us = (host_s[0] * 1e6, host_s[1] * 1e6)
    return {"kernels": float(kernels),
            "gpu_per_kernel8_us": work[8], "gpu_per_kernel16_us": work[16],
            "host_lo_us": host_us[0], "host_hi_us": host_us[1],
            "floor_lo_ms": floor_ms[0], "floor_hi_ms": floor_ms[1],
            "tp16_shard_ms": table.loc[16, LAUNCH_SHARD],
            "tp8_roof_shard_ms": table.loc[8, LAUNCH_SHARD],
            "tp8_kernels_ms": table.loc[8, LAUNCH_KERNELS],
            "tp16_kernels_ms": table.loc[16, LAUNCH_KERNELS],
            "launch8_text": launch_verdict(work[8], host_us),
            "launch16_text": launch_verdict(work[16], host_us),
            "graph_overhead_us": graph * 1e6,
            "floor_graph_ms": parallel.launch_floor_s(MODEL, graph) * 1e3,
            "gf_eager": eager, "gf_compiled": compiled, "gf_extra_ms": extra * 1e3,
            "gf_layer_ms": extra / architectures.get("llama-2-7b").n_layers * 1e3}


def tradeoff_figure(batches=(1, 16, 64), max_devices=32):
    """Tokens/s per GPU against ms a token, log-log, one curve per batch a TP group, each
    point labelled with its degree."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for batch, marker in zip(batches, "os^"):
        t = parallel.tp_tradeoff(MODEL, GPU, batch=batch, context=CONTEXT)
        t = t[t.index <= max_devices]
        ax.plot(t.ms_per_token, t.tokens_per_s_per_gpu, marker + "-",
                color="black", mfc="none", label=f"TP, batch {batch} a group")
        for n, row in t.iterrows():
            ax.annotate(f"N={n}", (row.ms_per_token, row.tokens_per_s_per_gpu), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([5, 10, 20, 40], ["5", "10", "20", "40"])
    ax.xaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("time per output token (ms): lower is better")
    ax.set_ylabel("tokens/s per GPU: higher is cheaper")
    ax.set_title(f"{_model().name}, {GPU}: tokens per GPU for latency")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tradeoff_block(trade, batch=16) -> dict:
    """The trade-off section's values from the page's `trade` (`parallel.tp_tradeoff` at
    `batch`, degrees 2 to 16): TP8 and TP16 against TP2 replicas, on the achievable model,
    the ceiling and within the model's error."""
    tr = {n: _step_s(n, batch) for n in (2, 8, 16)}
    ceil = {n: batch / _step_s(n, batch, achievable=False) / n for n in (2, 8)}
    crep = validation.choice(batch / tr[2] / 2, batch / tr[8] / 8, "tp>1", per="rate")
    return {"tp8_16_tpg": trade.loc[8, "tokens_per_s_per_gpu"],
            "tp8_16_ms": trade.loc[8, "ms_per_token"],
            "tp16_16_tpg": trade.loc[16, "tokens_per_s_per_gpu"],
            "tp16_16_ms": trade.loc[16, "ms_per_token"],
            "rep2_tpg": trade.loc[8, "replicas_tokens_per_s_per_gpu"],
            "rep2_ms": trade.loc[8, "replicas_ms_per_token"],
            "rep_over_tp8": (trade.loc[8, "replicas_tokens_per_s_per_gpu"]
                             / trade.loc[8, "tokens_per_s_per_gpu"]),
            "tp8_faster": trade.loc[8, "replicas_ms_per_token"] / trade.loc[8, "ms_per_token"],
            "rep2_tpg_ach": batch / tr[2] / 2, "tp8_16_tpg_ach": batch / tr[8] / 8,
            "rep2_ms_ach": tr[2] * 1e3, "tp8_16_ms_ach": tr[8] * 1e3,
            "tp16_16_ms_ach": tr[16] * 1e3, "tp16_16_tpg_ach": batch / tr[16] / 16,
            "rep2_tpg_ceil": ceil[2], "tp8_16_tpg_ceil": ceil[8],
            "rep_ceil_order_text": ("the replicas ahead there too" if ceil[2] > ceil[8]
                                    else "TP8 ahead there: the order reverses on the bound"),
            "rep2_tpg_ach_lo": crep["low"], "rep2_tpg_ach_hi": crep["high"],
            "rep_flip_text": (
                f"TP8's range ({crep['other_low']:.0f} to {crep['other_high']:.0f}) overlaps "
                "it: which layout serves more per GPU is for a measurement on your engine to "
                f"settle ({CONSERVATIVE})" if crep["flips"] else
                f"TP8's range ({crep['other_low']:.0f} to {crep['other_high']:.0f}) does not "
                f"overlap it: the replicas' lead holds within the model's error ({CONSERVATIVE})")}


def sent_block() -> dict:
    """Bytes a device sends a byte all-reduced, on 8 and on 64 devices."""
    return {"sent_frac_8": collectives.allreduce_bytes_sent(1.0, 8),
            "sent_frac_64": collectives.allreduce_bytes_sent(1.0, 64)}


def attention_variants() -> dict:
    """The model with multi-head (64 KV heads), grouped-query (its own 8) and multi-query
    (1) attention, by label."""
    model = _model()
    return {"MHA (64 KV heads)": dataclasses.replace(model, n_kv_heads=64),
            "GQA (8 KV heads, Llama-2-70B)": model,
            "MQA (1 KV head)": dataclasses.replace(model, n_kv_heads=1)}


def kv_heads_figure(variants, degrees):
    """KV cache a token holds on each device against N for each of `variants`, split by
    heads, and MQA split by batch."""
    kv_kb = parallel.tp_kv_cache_bytes_per_token
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, m), style in zip(variants.items(), ("o-", "s-", "^-")):
        ax.loglog(degrees, [kv_kb(m, n) / 1e3 for n in degrees], style,
                  color="black", mfc="none", label=f"{label}, split by heads")
    mqa = variants["MQA (1 KV head)"]
    ax.loglog(degrees, [kv_kb(mqa, n, kv_sharding="batch") / 1e3 for n in degrees],
              "^:", color="grey", label="MQA, split by batch")
    ax.set_xticks(degrees, [str(n) for n in degrees])
    ax.set_xlabel("devices, N")
    ax.set_ylabel("KV cache a token holds on each device (kB)")
    ax.set_title("A KV head cannot be split: past the KV heads, no saving")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def kv_block(variants, batch_table) -> dict:
    """The KV-heads section's values from `attention_variants()` and the page's
    `batch_table` (index attention, KV split by; columns "N = 8", "N = 16", "N = 32")."""
    gqa, mqa = "GQA (8 KV heads, Llama-2-70B)", "MQA (1 KV head)"
    model = variants[gqa]
    return {"kv_heads": float(model.n_kv_heads), "q_heads": float(model.n_heads),
            "gqa_ratio": (step_model.kv_cache_bytes_per_token(variants["MHA (64 KV heads)"])
                          / step_model.kv_cache_bytes_per_token(model)),
            "gqa16_heads": float(batch_table.loc[(gqa, "heads"), "N = 16"]),
            "gqa16_batch": float(batch_table.loc[(gqa, "batch"), "N = 16"]),
            "mqa32_heads": float(batch_table.loc[(mqa, "heads"), "N = 32"]),
            "mqa32_batch": float(batch_table.loc[(mqa, "batch"), "N = 32"])}


def allreduce_kinds_table(batches=(1, 16, 128)) -> pd.DataFrame:
    """NCCL's fastest and the engines' custom all-reduce (microseconds) on 8 H100s for a
    `[batch, d_model]` message, and which custom kernel (one-shot, two-shot) runs."""
    link = _link()
    return pd.DataFrame([{
        "batch": b,
        "NCCL (us)": collectives.fastest_allreduce(_message(b), 8, link)["seconds"] * 1e6,
        "custom (us)": collectives.custom_allreduce_s(_message(b), 8, link) * 1e6,
        "kind": collectives.custom_allreduce_parts(_message(b), 8, link)["kind"]}
        for b in batches]).set_index("batch")


def decision_table(achievable=True, **kw) -> pd.DataFrame:
    """The decision exercise's options (`parallel.tp_options`: its model, prices, context,
    objective and degrees), cheapest first, on the achievable model or (False) the ceiling;
    `kw`: more of `tp_options`'s arguments (dtype, allreduce)."""
    return parallel.tp_options(decision.MODEL, options=decision.DECISION_DEGREES,
                               prices=decision.DECISION_PRICES, context=decision.CONTEXT,
                               tpot_s=decision.DECISION_TPOT_S, achievable=achievable, **kw)


def engine_choices() -> tuple[pd.DataFrame, dict]:
    """The decision exercise's cheapest (GPU, N) in each of `ENGINE_VARIANTS` on the
    achievable model, its cost (USD a million tokens) and 80% range at TP > 1, beside the
    ceiling's choice; with each variant's runner-up (a `tp_options` row)."""
    best, runner_up = {}, {}
    for label, kw in ENGINE_VARIANTS.items():
        options = decision_table(**kw)
        row, runner_up[label] = options.iloc[0], options.iloc[1]
        ceil = decision_table(False, **kw).iloc[0]
        low, high = validation.interval(row.usd_per_million, "tp>1", per="cost")
        best[label] = {"GPU": row.GPU, "N": row.N, "batch": row.batch,
                       "USD/M": row.usd_per_million, "USD/M, 80% range": f"{low:.2f} to {high:.2f}",
                       "ceiling: GPU, N": f"{ceil.GPU}, {ceil.N}", "its USD/M": ceil.usd_per_million}
    return pd.DataFrame(best).T, runner_up


def variants_verdict(flips, runner) -> tuple[str, str]:
    """The engines' sentence and takeaway clause for the variants whose runner-up lies
    within the model's error (`flips`, labels) and fp16 on NCCL's runner-up `runner`."""
    n = len(ENGINE_VARIANTS)
    if len(flips) == n:
        return (f"In all four the runner-up's range overlaps the winner's (for fp16 on NCCL's "
                f"ring, {runner.GPU} TP{runner.N} at {runner.usd_per_million:.2f} USD): the "
                "model ranks the options but cannot separate the first two, so measure both "
                f"before you buy ({CONSERVATIVE})",
                "on the model; its runner-up lies within the model's error at TP > 1, so "
                "measure both")
    if not flips:
        return ("In none of the four does the runner-up's range overlap the winner's: the "
                f"choice holds within the model's error ({CONSERVATIVE})",
                "on the model, and within its error at TP > 1")
    return (f"The runner-up's range overlaps the winner's for {', '.join(flips)} (measure "
            f"both there) and not for the others ({CONSERVATIVE})",
            "on the model; in some variants its runner-up lies within the model's error at "
            "TP > 1, so measure both")


def engines_block(ar, best, runner_up) -> dict:
    """The engines' section's values from `allreduce_kinds_table()` (`ar`) and
    `engine_choices()` (`best`, `runner_up`): one-shot against NCCL, TP8's step with it,
    each variant's choice and cost, and the one-shot model against SGLang's measurements
    it was not fitted to."""
    link = _link()
    tp8c = _step_s(8, 1, allreduce="custom")
    values = {"ll_step_us": link.nccl("LL").step_latency_s * 1e6,
              "ar1_custom_us": ar.loc[1, "custom (us)"], "ar1_nccl_us": ar.loc[1, "NCCL (us)"],
              "ar128_custom_us": ar.loc[128, "custom (us)"],
              "ar128_nccl_us": ar.loc[128, "NCCL (us)"],
              "tp8_ms_ach_custom": tp8c * 1e3,
              "tp8_custom_gain_pct": 100 * (1 - tp8c / _step_s(8, 1)),
              "tp16_vs_tp8c_pct": 100 * (_step_s(16, 1) / tp8c - 1)}
    for label, key in zip(ENGINE_VARIANTS, ("f16", "f16c", "f8", "f8c")):
        values.update({f"v_{key}_usd": float(best.loc[label, "USD/M"]),
                       f"v_{key}_n": float(best.loc[label, "N"]),
                       f"v_{key}_batch": float(best.loc[label, "batch"]),
                       f"v_{key}_ceil_usd": float(best.loc[label, "its USD/M"])})
    vc = {k: validation.choice(float(best.loc[k, "USD/M"]),
                               float(runner_up[k].usd_per_million), "tp>1", per="cost")
          for k in ENGINE_VARIANTS}
    text, clause = variants_verdict([k for k in ENGINE_VARIANTS if vc[k]["flips"]],
                                  runner_up["fp16, NCCL"])
    usd = best["USD/M"]
    values.update({"v_f16_usd_lo": vc["fp16, NCCL"]["low"],
                   "v_f16_usd_hi": vc["fp16, NCCL"]["high"],
                   "v_flip_text": text, "v_takeaway_clause": clause,
                   "custom_move_pct": 100 * (1 - usd["fp16, custom all-reduce"] / usd["fp16, NCCL"]),
                   "fp8_move_pct": 100 * (1 - usd["FP8 W8A8, NCCL"] / usd["fp16, NCCL"]),
                   "both_move_pct": 100 * (1 - usd["FP8 W8A8, custom all-reduce"]
                                           / usd["fp16, NCCL"]),
                   "ar1_ratio": ar.loc[1, "NCCL (us)"] / ar.loc[1, "custom (us)"],
                   "custom_fixed_us": collectives.custom_allreduce_fixed_s() * 1e6})
    (ks, ts), _, (kl, tl) = sorted(
        collectives.CUSTOM_ALLREDUCE_MEASURED["seconds_by_bytes"].items())
    for key, k, t in (("small", ks, ts), ("large", kl, tl)):
        values.update({f"cal_{key}_kb": k / 1e3, f"cal_{key}_us": t * 1e6,
                       f"cal_{key}_model_us": collectives.custom_allreduce_s(k, 8, link) * 1e6})
    return values


#: The largest message vLLM's custom all-reduce takes by default, bytes: `CustomAllreduce(
#: ..., max_size=8192 * 1024)` in vllm/distributed/device_communicators/custom_all_reduce.py,
#: the default from the kernel's first version (vLLM PR 2192) to main; a larger tensor goes
#: to NCCL (`should_custom_ar` returns False).
#: `collectives.engine_allreduce` has no such cap: the page prices only messages below it
#: on the custom path.
VLLM_CUSTOM_ALLREDUCE_MAX_BYTES = 8192 * 1024


def prefill_block(ttft, prompt) -> dict:
    """The prefill section's values from the page's `ttft` table (index N and format, fp16
    and FP8 W8A8; columns "TTFT (ms)", "all-reduces (ms)", "share", "ceiling (ms)") for a
    `prompt`-token prompt: each degree's time to first token, share and ceiling, the
    TP2-to-TP8 speed-up, and vLLM's cap on its custom all-reduce's message (MiB)."""
    f, e = ttft.xs("fp16", level="format"), ttft.xs("FP8 W8A8", level="format")
    values = {"pf_prompt": float(prompt), "pf_ar_mb": prompt * _model().d_model * 2 / 1e6}
    for n in f.index:
        values.update({f"pf{n}_ms": f.loc[n, "TTFT (ms)"],
                       f"pf{n}_share_pct": 100 * f.loc[n, "share"],
                       f"pf{n}_fp8_ms": e.loc[n, "TTFT (ms)"],
                       f"pf{n}_fp8_share_pct": 100 * e.loc[n, "share"],
                       f"pf{n}_ceil_ms": f.loc[n, "ceiling (ms)"],
                       f"pf{n}_comm_ms": f.loc[n, "all-reduces (ms)"],
                       f"pf{n}_sent": collectives.allreduce_bytes_sent(1.0, n)})
    values.update({"pf_speedup_2_8": f.loc[2, "TTFT (ms)"] / f.loc[8, "TTFT (ms)"],
                   "custom_cap_mib": VLLM_CUSTOM_ALLREDUCE_MAX_BYTES / 2**20})
    return values


def _allreduce_exercise() -> dict:
    """The batch-64 all-reduce exercise: its message, each ring protocol's time and NCCL's
    constants, and the two HBM bandwidths the crossover exercise compares (TB/s)."""
    link = _link()
    b64 = collectives.allreduce_protocols(_message(64), 8, link).xs("ring")
    values = {"msg64_bytes": float(_message(64))}
    for p in b64.index:
        values.update({f"b64_{p.lower()}_us": b64.loc[p, "seconds"] * 1e6,
                       f"nccl_{p.lower()}_base_us": link.nccl(p).base_latency_s * 1e6,
                       f"nccl_{p.lower()}_step_us": link.nccl(p).step_latency_s * 1e6,
                       f"nccl_{p.lower()}_frac": link.nccl(p).bandwidth_fraction})
    return values | {"b200_hbm_tbs": hardware.get("B200").bandwidth / 1e12,
                     "h100_hbm_tbs": hardware.get(GPU).bandwidth / 1e12}


def _fit_exercise() -> dict:
    """The fewest-H100s exercise: each card's bytes and reserve, and 32 sequences' fit on
    two and four, with the reserve and at vLLM's default."""
    gpu = hardware.get(GPU)
    values = {"reserve_bytes": float(llm.DEFAULT_RESERVE_BYTES), "h100_bytes": gpu.memory_bytes}
    for n in (2, 4):
        values[f"fit32_n{n}"] = float(parallel.tp_max_batch(MODEL, gpu, n, CONTEXT))
        values[f"fit32_n{n}_09"] = float(parallel.tp_max_batch(
            MODEL, gpu, n, CONTEXT, reserve_bytes=engine_reserve(gpu)))
    return values


def b200_crossover() -> dict:
    """The B200 crossover exercise, on the achievable model throughout: LL's capped
    bandwidth on NVLink 5, one B200's kernels T1 and the overheads O (s), the closed
    form's N*, and TP8's and TP16's shard and all-reduces (s), each pair from one
    `tp_step_s(..., parts=True)`."""
    b200 = hardware.get("B200")
    tp8 = _step_s(8, 1, parts=True)
    cf = closed_form(b200, float(tp8["allreduce_bytes"]), tp8["n_allreduces"])
    steps = {n: parallel.tp_step_s(MODEL, b200, n, 1, CONTEXT, parts=True) for n in (8, 16)}
    return {"ll_bandwidth": cf["beta"], "t1_s": cf["t1_s"], "overhead_s": cf["overhead_s"],
            "nstar": cf["nstar"],
            **{f"{k}{n}": steps[n][f"{k}_s"] for n in (8, 16) for k in ("shard", "comm")}}


def decision_prices_as_of() -> str:
    """When the decision exercise's prices were listed: the `as_of` its instances' catalogue
    prices share (`hardware` entries' `prices`)."""
    dates = {p.as_of for gpu, instance in decision.DECISION_INSTANCES.items()
             for p in hardware.get(gpu).prices if p.name == instance}
    if len(dates) != 1:
        raise ValueError(f"the decision's prices carry {len(dates)} dates ({sorted(dates)}); "
                         "the page states one")
    return dates.pop()


def _decision_exercise() -> dict:
    """The decision exercise: its objective and prices, the two cheapest choices, the
    winner at its memory's batch, the ceiling's choice, H100's best and TP2, the winner's
    range within the model's error and vLLM's default's batch for it."""
    d, dc = decision_table(), decision_table(False)
    best = d.iloc[0]
    values = {"dec_tpot_ms": decision.DECISION_TPOT_S * 1e3,
              "price_as_of": decision_prices_as_of()}
    for gpu, key in (("H100 SXM", "h100"), ("H200", "h200")):
        values[f"price_{key}"] = f"{decision.DECISION_PRICES[gpu]:.2f}"
        values[f"instance_{key}"] = decision.DECISION_INSTANCES[gpu].split(" (")[0][4:]
    for i, row in d.head(2).iterrows():
        values.update({f"dec{i}_gpu": row.GPU, f"dec{i}_n": float(row.N),
                       f"dec{i}_batch": float(row.batch), f"dec{i}_ms": row.step_ms,
                       f"dec{i}_usd": row.usd_per_million})
    h100, h100_tp2_ceil = d[d.GPU == "H100 SXM"].iloc[0], dc[(dc.GPU == "H100 SXM") & (dc.N == 2)]
    dv = validation.choice(best.usd_per_million, d.iloc[1].usd_per_million, "tp>1", per="cost")
    return values | {
        "dec_mem_batch": float(best.memory_batch),
        "dec_mem_ms": 1e3 * parallel.tp_step_s(MODEL, best.GPU, int(best.N),
                                               int(best.memory_batch), CONTEXT),
        "dec_ceil_batch": float(dc.iloc[0].batch), "dec_ceil_usd": dc.iloc[0].usd_per_million,
        "dec_ceil_h100_usd": dc[dc.GPU == "H100 SXM"].usd_per_million.min(),
        "dec_h100_tp2_ceil_batch": float(h100_tp2_ceil.batch.iloc[0]),
        "dec_h100_tp2_b1_ms": 1e3 * _step_s(2, 1),
        "dec_h100_n": float(h100.N), "dec_h100_batch": float(h100.batch),
        "dec_h100_usd": h100.usd_per_million,
        "dec0_usd_lo": dv["low"], "dec0_usd_hi": dv["high"],
        # The interval's low rate at the same batch: the step the objective then misses.
        "dec0_ms_slow": best.step_ms / validation.interval(1.0, "tp>1")[0],
        "dec_flip_text": (
            f"The runner-up's {dv['other']:.2f} USD has a range ({dv['other_low']:.2f} to "
            f"{dv['other_high']:.2f}) that overlaps this one: the model ranks the two, it "
            f"cannot separate them, so measure both before you buy ({CONSERVATIVE})"
            if dv["flips"] else
            f"The runner-up's {dv['other']:.2f} USD has a range ({dv['other_low']:.2f} to "
            f"{dv['other_high']:.2f}) that does not overlap this one: the choice holds "
            f"within the model's error ({CONSERVATIVE})"),
        "dec09_best_mem": float(parallel.tp_max_batch(
            MODEL, best.GPU, int(best.N), CONTEXT, reserve_bytes=engine_reserve(best.GPU)))}


def exercise_block() -> dict:
    """The problems' glued values: each answer (as `ans_<name>`) and
    the numbers their solutions quote."""
    values = {}
    for name in EXERCISES:
        values["ans_" + name.replace("-", "_")] = float(exercises.get(name).answer())
    b200 = b200_crossover()
    return (values | _allreduce_exercise() | _fit_exercise() | {
        "b200_ll_gbs": b200["ll_bandwidth"] / 1e9, "b200_t1_ms": b200["t1_s"] * 1e3,
        "b200_nstar": b200["nstar"], "b200_overhead_ms": b200["overhead_s"] * 1e3,
        "b200_c8_shard_ms": b200["shard8"] * 1e3, "b200_c8_comm_ms": b200["comm8"] * 1e3,
        "b200_c16_shard_ms": b200["shard16"] * 1e3, "b200_c16_comm_ms": b200["comm16"] * 1e3,
        "h200_4_shard_ms": parallel.tp_step_s(MODEL, "H200", 4, 1, CONTEXT, achievable=False,
                                              parts=True)["shard_s"] * 1e3}
            | _decision_exercise())

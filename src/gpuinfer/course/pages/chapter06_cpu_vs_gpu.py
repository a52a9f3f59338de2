"""What `chapters/06_cpu_vs_gpu` computes for its figures, tables and glued numbers: one
function a figure or block of prose, each returning {glue name: value} (or the rows a
figure draws). The formulas are `predict.tabular`'s, `predict.cost`'s and the achievable
model's; the timings `measure.bench`'s. Values that depend on this machine's measured
dispatch time vary run to run; everything else is fixed by the catalogue."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import torch

from gpuinfer import dtypes, hardware
from gpuinfer.hardware import device_links, measured_rates
from gpuinfer.predict import achievable, batching, cost, fleet_sizing, llm, roofline, tabular
from gpuinfer.measure import bench, reference
from gpuinfer.measure import spread
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter06_cpu_vs_gpu as cost_exercises

#: The assumed floor of a kernel: the CUDA Graphs post's 500,000-element elementwise
#: kernel's work on a V100 (2.9 us), not a measured minimum kernel duration.
MIN_KERNEL_S = tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S["kernel alone"]
#: The chapter's problems whose answers the page glues (as ans_<name with underscores>).
PROBLEMS = ("cost-per-million-quarter-busy", "cost-break-even-utilisation",
            "tabular-fixed-share-t4", "cpu-or-gpu-under-slo")
#: The GPUs the batch-1 table estimates and the large-batch figure draws.
BATCH1_GPUS, CURVE_GPUS = ("T4", "L4", "H200"), ("T4", "H200")


def model_values(hidden) -> dict:
    """The MLP's size: parameters (millions), fp16 megabytes, MFLOP a prediction, kernels
    a forward pass."""
    n_params = tabular.mlp_params(hidden=hidden)
    return {"n_params_m": n_params / 1e6,
            "weights_fp16_mb": n_params * dtypes.bytes_per_element("fp16") / 1e6,
            "mflop_per_pred": tabular.mlp_flops(1, hidden=hidden) / 1e6,
            "n_kernels": float(tabular.mlp_kernels(hidden))}


def batch1_reading(measured, overhead, n_kernels: int, on_cpu: bool, b1_runs,
                   cpu_b1_s: float, cpu_batch: int) -> dict:
    """What this machine's batch-1 pass is mostly made of: the share `n_kernels` tiny ops
    (`overhead`, a Timing) take of it against one half, ordered where the ratio clears
    the two timings' spreads added up plus `spread.MIN_EFFECT` (`spread.compare`'s
    margin, without its cut-off for noisy timings: a share 30 times below one half is
    not hidden by a 60% spread), as a sentence (here_b1_reading); eager PyTorch's best
    batch-1 run (`b1_runs`) over the fastest path's (`cpu_b1_s`)."""
    here_b1 = measured.loc[1, "us per pass"] * 1e-6
    share = min(1.0, n_kernels * overhead.median_s / here_b1)
    noise = overhead.iqr_s / overhead.median_s + measured.loc[1, "spread"]
    margin = 1 + noise + spread.MIN_EFFECT
    if not on_cpu:
        reading = ("on a GPU, passes timed back to back at batch 1 are paced by the slower of "
                   "the host's dispatch and the GPU's work; the estimates below take the two "
                   "apart")
    elif share / 0.5 < 1 / margin:
        reading = ("on this CPU the batch-1 pass is mostly the work of reading the weights "
                   "through the cache hierarchy and multiplying them")
    elif share / 0.5 > margin:
        reading = ("on this CPU dispatch is most of the batch-1 pass, more than the work of "
                   "reading and multiplying the weights")
    else:
        reading = (f"this run's timings were too noisy (their spreads add up to {noise:.0%} "
                   "of the medians) to say whether dispatch or the work is most of the "
                   "batch-1 pass on this CPU")
    return {"here_b1_reading": reading, "here_overhead_us": overhead.median_s * 1e6,
            "here_b1_us": here_b1 * 1e6, "here_overhead_pct": 100 * share,
            "cpu_batch": float(cpu_batch),
            "eager_over_best_b1": float(b1_runs["eager PyTorch"].min() / cpu_b1_s)}


def dispatch_s(device, overhead_s: float) -> float:
    """The host's cost of one op: PyTorch's dispatch on this machine's CPU, one thread
    (`overhead_s` where the page measured on the CPU, else timed here)."""
    if device.type == "cpu":
        return overhead_s
    cpu_tiny = torch.zeros(1)
    return bench.time_fn(lambda: torch.relu(cpu_tiny), device="cpu", num_threads=1).median_s


def rate_values(eff, dispatch: float) -> dict:
    """The rates the estimates use: gpt-fast's bandwidth on an A100 against the datasheet
    and its Llama-2-7B MBU, the T4's measured, fitted and derated (`eff`) matmul peaks,
    the fixed costs, the dispatch `dispatch` and the kernel floor."""
    a100 = measured_rates.achievable("A100 80GB")
    bw_fraction = a100["bandwidth_bytes_per_s"] / hardware.get("A100 80GB").bandwidth
    gf_mbu = llm.mbu("llama-2-7b", "A100 80GB", reference.GPT_FAST_TOKENS_PER_S["bf16"])
    return {"bw_fraction_pct": 100 * bw_fraction,
            "a100_bw_gbs": hardware.get("A100 80GB").bandwidth / 1e9,
            "gf_mbu_pct": 100 * gf_mbu,                        # of the datasheet (chapter 7)
            "gf_of_peak_pct": 100 * gf_mbu / bw_fraction,      # of gpt-fast's 1,700 GB/s
            "t4_mm_tflops": measured_rates.achievable("T4")["matmul_fp16_flops"] / 1e12,
            "ach_bw_pct": 100 * eff.bandwidth,
            "fitted_mm_scale": achievable.FITTED.matmul_scale,
            "t4_engine_tflops": achievable.derated_accelerator("T4").peak_flops("fp16") / 1e12,
            "t4_ach_tflops": achievable.derated_accelerator("T4", eff).peak_flops("fp16") / 1e12,
            "ach_step_ms": eff.step_s * 1e3, "ach_gap_us": eff.kernel_gap_s * 1e6,
            "t4_peak_tflops": hardware.get("T4").peak_flops("fp16") / 1e12,
            "dispatch_us": dispatch * 1e6, "min_kernel_us": MIN_KERNEL_S * 1e6}


def throttled_t4(eff):
    """The derated T4 held at 900 MHz under sustained load (an MLPerf run,
    `hardware.get("T4").note`) against its 1,590 MHz boost: the tensor-core peak scales
    with the clock. (cool, hot) accelerators."""
    cool = achievable.derated_accelerator("T4", eff)
    hot = dataclasses.replace(cool, name="T4 at 900 MHz", peaks={
        **cool.peaks, "fp16": cool.peak_flops("fp16") * 900e6 / cool.boost_clock_hz})
    return cool, hot


def throttle_values(hidden, eff, dispatch: float) -> dict:
    """The T4's estimate at batch 1 and 65,536 at its boost clock and held at 900 MHz."""
    cool, hot = throttled_t4(eff)
    sens = {acc.name: tabular.predicted_latency_s(
                [1, 65536], acc, dispatch, hidden=hidden, dtype="fp16",
                host_link=device_links.host_link("T4"), min_kernel_s=MIN_KERNEL_S)
            for acc in (cool, hot)}
    return {"t4_throttled_tflops": hot.peak_flops("fp16") / 1e12,
            "t4_b1_hot_us": sens[hot.name][0] * 1e6,
            "t4_tput_cool_m": 65536 / sens[cool.name][1] / 1e6,
            "t4_tput_hot_m": 65536 / sens[hot.name][1] / 1e6}


def batch1_values(batch1, cpu_b1_s: float, hidden, dispatch: float) -> dict:
    """The batch-1 section's numbers from the page's `batch1` table (rows T4, L4, H200 in
    that order, us): the T4's and H200's terms, this CPU's best batch-1 pass (`cpu_b1_s`)
    against the T4's estimate, the weights against each GPU's L2, and the datasheet
    ceilings' batch-1 estimate."""
    t4_row, h200_row = batch1.iloc[0], batch1.iloc[2]
    weights_bytes = tabular.mlp_params(hidden=hidden) * dtypes.bytes_per_element("fp16")
    l2 = {name: hardware.get(name).cache_bytes for name in BATCH1_GPUS}
    ceiling = {n: tabular.predicted_latency_s(1, n, dispatch, hidden=hidden, dtype="fp16",
                                              host_link=device_links.host_link(n),
                                              min_kernel_s=MIN_KERNEL_S) for n in ("T4", "H200")}
    values = {"t4_b1_us": t4_row["total"], "t4_work_us": t4_row["GPU: roofline work"],
              "t4_gpu_us": t4_row["GPU: 1st launch + kernels"],
              "host_us": t4_row["host: 7 launches"], "t4_fixed_pct": 100 * t4_row["fixed share"],
              "h200_work_us": h200_row["GPU: roofline work"],
              "h200_gpu_us": h200_row["GPU: 1st launch + kernels"],
              "h200_b1_us": h200_row["total"], "h200_fixed_pct": 100 * h200_row["fixed share"],
              "h200_over_t4_b1": t4_row["total"] / h200_row["total"],
              "h200_over_t4_bw": hardware.get("H200").bandwidth / hardware.get("T4").bandwidth,
              "cpu_b1_us": cpu_b1_s * 1e6, "t4_over_here_b1": cpu_b1_s * 1e6 / t4_row["total"],
              "t4_copies_us": t4_row["copies"], "weights_fp16_mib": weights_bytes / 2**20}
    for name, cache in l2.items():
        values[f"{name.lower()}_l2_mib"] = cache / 2**20
    values["t4_l2_share_pct"] = 100 * l2["T4"] / weights_bytes     # of the weights, by size
    values["t4_b1_ceil_us"] = ceiling["T4"] * 1e6
    values["h200_over_t4_b1_ceil"] = ceiling["T4"] / ceiling["H200"]
    return values


def latency_figure(measured, dtype, batches, predicted):
    """Seconds a pass and predictions/s against the batch: measured here, beside each
    GPU's estimate."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, per in zip(axes, ["time", "throughput"]):
        y = measured["us per pass"] * 1e-6 if per == "time" else measured["predictions/s"]
        ax.plot(measured.index, y, "o-", color="black", label=f"measured here ({dtype})")
        for (name, t), ls in zip(predicted.items(), ["--", "-."]):
            ax.plot(batches, t if per == "time" else batches / t, ls, color="0.35",
                    label=f"{name} estimate (fp16)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size (predictions per forward pass)")
        ax.set_ylabel("seconds per pass" if per == "time" else "predictions/s")
        ax.legend(fontsize=8)
    axes[0].set_title("Flat while fixed costs dominate")
    axes[1].set_title("Throughput grows with the batch")
    fig.tight_layout()
    return fig


def datasheet_throughput(hidden, batch: int, dispatch: float) -> float:
    """The T4's predictions/s at `batch` on its datasheet peaks (not derated)."""
    return batch / tabular.predicted_latency_s(
        batch, "T4", dispatch, hidden=hidden, dtype="fp16",
        host_link=device_links.host_link("T4"), min_kernel_s=MIN_KERNEL_S)


def large_batch_values(hidden, batch: int, t4_tput: float, h200_tput: float,
                       cpu_tput: float, t4_datasheet_tput: float) -> dict:
    """The large-batch section's numbers: the estimates' throughputs against this CPU's,
    and a T4 pass of `batch` predictions on the roofline: eager (each kernel's own
    reads and writes) against fused, memory against compute."""
    t4 = hardware.get("T4")
    eager_bytes = tabular.mlp_bytes(batch, hidden=hidden, dtype="fp16")
    fused_bytes = tabular.mlp_bytes(batch, hidden=hidden, dtype="fp16", fused=True)
    per_kernel = roofline.evaluate(tabular.mlp_ops(batch, hidden=hidden, dtype="fp16"), t4)
    fused = roofline.evaluate(tabular.mlp_ops(batch, hidden=hidden, dtype="fp16", fused=True), t4)
    n_params = tabular.mlp_params(hidden=hidden)
    return {"cpu_tput_1": cpu_tput, "t4_tput_m": t4_tput / 1e6,
            "t4_datasheet_tput_m": t4_datasheet_tput / 1e6,
            "t4_over_here": t4_tput / cpu_tput, "h200_over_t4_big": h200_tput / t4_tput,
            "big_batch": float(batch),
            "big_weight_share_pct": 100 * n_params * dtypes.bytes_per_element("fp16") / eager_bytes,
            "big_mem_ms": 1e3 * eager_bytes / t4.bandwidth,
            "big_fused_mem_ms": 1e3 * fused_bytes / t4.bandwidth,
            "big_compute_ms": 1e3 * tabular.mlp_flops(batch, hidden=hidden) / t4.peak_flops("fp16"),
            "big_gemm_ms": 1e3 * per_kernel.loc["linear1", "seconds"],
            "big_relu_ms": 1e3 * per_kernel.loc["relu1", "seconds"],
            "big_eager_ms": 1e3 * per_kernel["seconds"].sum(),
            "big_fused_ms": 1e3 * fused["seconds"].sum()}


def cost_values(cpu_price, gpu_price, cpu_throughput: float, gpu_throughput: float,
                cpu_worst_throughput: float, gpu_datasheet_throughput: float,
                cpu_cores: int, repeats: int) -> dict:
    """The cost section's numbers: prices, throughputs, cost per million predictions fully
    busy and at 1%, and the GPU's break-even utilisation against a fully busy CPU machine
    (at the CPU's best and worst run, at half the GPU's throughput, on the T4's datasheet
    peaks)."""
    gpu_h, cpu_h = gpu_price.price_per_hour, cpu_price.price_per_hour
    u_best = cost.break_even_utilisation(gpu_h, gpu_throughput, cpu_h, cpu_throughput)
    u_worst = cost.break_even_utilisation(gpu_h, gpu_throughput, cpu_h, cpu_worst_throughput)
    return {"cpu_price": cpu_h, "gpu_price": gpu_h, "cpu_tput": cpu_throughput,
            "gpu_tput_m": gpu_throughput / 1e6,
            "cpu_cost_full": cost.cost_per_million(cpu_h, cpu_throughput),
            "gpu_cost_full": cost.cost_per_million(gpu_h, gpu_throughput),
            "gpu_cost_1pct": cost.cost_per_million(gpu_h, gpu_throughput, 0.01),
            "u_break_even_pct": 100 * u_best, "u_break_even_worst_pct": 100 * u_worst,
            "cpu_tput_worst": cpu_worst_throughput, "cpu_repeats": float(repeats),
            "cpu_spread": cpu_throughput / cpu_worst_throughput,
            "u_break_even_half_pct": 100 * cost.break_even_utilisation(
                gpu_h, gpu_throughput / 2, cpu_h, cpu_throughput),
            "cpu_cores": float(cpu_cores),
            "u_break_even_ceil_pct": 100 * cost.break_even_utilisation(
                gpu_h, gpu_datasheet_throughput, cpu_h, cpu_throughput)}


def utilisation_figure(cpu_price, gpu_price, cpu_throughput: float, gpu_throughput: float):
    """Cost per million predictions against utilisation: the GPU machine, the CPU machine
    fully busy and at the same utilisation, the break-even marked."""
    gpu_h, cpu_h = gpu_price.price_per_hour, cpu_price.price_per_hour
    u_break_even = cost.break_even_utilisation(gpu_h, gpu_throughput, cpu_h, cpu_throughput)
    u = np.geomspace(1e-4, 1, 200)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(u, cost.cost_per_million(gpu_h, gpu_throughput, u), "-", color="black",
            label=f"{gpu_price.name} at utilisation u")
    ax.axhline(cost.cost_per_million(cpu_h, cpu_throughput), color="0.4", linestyle="--",
               label=f"{cpu_price.name}, fully busy")
    ax.plot(u, cost.cost_per_million(cpu_h, cpu_throughput, u), ":", color="0.4",
            label=f"{cpu_price.name} at utilisation u")
    ax.axvline(u_break_even, color="black", linewidth=0.8)
    ax.annotate(f"break-even: {u_break_even:.2%}", (u_break_even, ax.get_ylim()[1]),
                xytext=(5, -15), textcoords="offset points", fontsize=9)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("utilisation (fraction of the machine's throughput used)")
    ax.set_ylabel("cost per million predictions (USD)")
    ax.set_title("A GPU pays off only when its throughput is used")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def demand_figure(cpu_price, gpu_price, cpu_throughput: float, gpu_throughput: float):
    """Cost per million predictions against a steady demand, whole machines rented."""
    demand = np.geomspace(10, 3 * gpu_throughput, 400)                    # predictions/s
    d_break_even = cost.break_even_demand(gpu_price.price_per_hour, gpu_throughput,
                                          cpu_price.price_per_hour, cpu_throughput)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for price, tput, ls, c in [(cpu_price, cpu_throughput, "--", "0.4"),
                               (gpu_price, gpu_throughput, "-", "black")]:
        ax.plot(demand, cost.cost_per_million_at_demand(price.price_per_hour, tput, demand),
                ls, color=c, label=f"{price.name}: as many as needed")
    if np.isfinite(d_break_even) and d_break_even > 0:
        ax.axvline(d_break_even, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steady demand (predictions/s)")
    ax.set_ylabel("cost per million predictions (USD)")
    ax.set_title("Cost per prediction at a given traffic, whole machines rented")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def demand_values(cpu_price, gpu_price, cpu_throughput: float, gpu_throughput: float) -> dict:
    """The demand at which the GPU machine becomes the cheaper rental, and how busy the
    GPU is there."""
    d = cost.break_even_demand(gpu_price.price_per_hour, gpu_throughput,
                               cpu_price.price_per_hour, cpu_throughput)
    return {"d_break_even": float(d), "d_break_even_busy_pct": 100 * d / gpu_throughput}


def problem_values(hidden) -> dict:
    """The problems' answers (ans_<name>) and the numbers their solutions quote: the T4's
    batch-1 terms at the problem's round numbers, and the CPU-or-GPU decision under the
    SLO (`fleet_sizing.fleet_options`), at the fastest CPU path, at eager PyTorch's speed
    and on the T4's ceiling."""
    c = cost_exercises
    values = {"ans_" + n.replace("-", "_"): float(exercises.get(n).answer()) for n in PROBLEMS}
    values["ans_break_even_pct"] = 100 * exercises.get("cost-break-even-utilisation").answer()
    values["ans_fixed_pct"] = 100 * exercises.get("tabular-fixed-share-t4").answer()
    roof = roofline.evaluate(tabular.mlp_ops(1, hidden=hidden, dtype="fp16"), "T4")["seconds"]
    values.update({
        "ex_gpu_us": (c.KERNEL_S + np.maximum(roof, c.MIN_KERNEL_S).sum()) * 1e6,
        "ex_host_us": tabular.mlp_kernels(hidden) * c.KERNEL_S * 1e6,
        "ex_copies_us": 2 * c.COPY_S * 1e6, "ex_total_us": c.batch1_t4_s() * 1e6,
        "ex_work_us": c.WORK_T4_S * 1e6})
    table = fleet_sizing.fleet_options(c.DECISION_MACHINES,
                                       demand_per_s=c.DECISION_DEMAND_PER_S,
                                       slo_s=c.DECISION_SLO_S, n=c.DECISION_REQUESTS)
    for machine, key in [("AWS c5.2xlarge", "cpu"), ("AWS g4dn.xlarge", "gpu")]:
        values[f"ex_{key}_capacity"] = table.loc[machine, "capacity_per_s"]
        values[f"ex_{key}_usd"] = table.loc[machine, "usd_per_million"]
    values["ex_cpu_machines"] = float(table.loc["AWS c5.2xlarge", "machines"])
    values["ex_core_capacity"] = (table.loc["AWS c5.2xlarge", "capacity_per_s"]
                                  / c.DECISION_CPU_CORES)
    eager = c.decision_table(c.DECISION_MACHINES_EAGER).loc["AWS c5.2xlarge"]
    core = batching.capacity(c.DECISION_CPU_EAGER_S, 1, slo_s=c.DECISION_SLO_S)
    ceiling = fleet_sizing.fleet_options(c.DECISION_MACHINES_CEILING,
                                         demand_per_s=c.DECISION_DEMAND_PER_S,
                                         slo_s=c.DECISION_SLO_S, n=c.DECISION_REQUESTS)
    values.update({
        "ex_core_capacity_eager": eager["capacity_per_s"] / c.DECISION_CPU_CORES,
        "ex_cpu_machines_eager": float(eager["machines"]),
        "ex_cpu_usd_eager": eager["usd_per_million"],
        "ex_cpu_eager_us": c.DECISION_CPU_EAGER_S * 1e6,
        "ex_gpu_per_item_us": c.DECISION_GPU_PER_ITEM_S * 1e6,
        "ex_core_n4000_pct": 100 * (core * c.DECISION_CPU_CORES / eager["capacity_per_s"] - 1),
        "ex_ceil_per_item_us": c.DECISION_GPU_PER_ITEM_CEILING_S * 1e6,
        "ex_cpu_cores": float(c.DECISION_CPU_CORES),
        "ex_cpu_service_us": c.DECISION_CPU_SERVICE_S * 1e6,
        "ex_gpu_capacity_ceil": ceiling.loc["AWS g4dn.xlarge", "capacity_per_s"]})
    return values

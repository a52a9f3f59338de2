"""What `chapters/07_benchmarking` computes for its prose, tables and figures: one function a
block of glued values (`book.glue_all`). The timings (the page's lesson) run on the page;
these functions read the tables the page built, or compute from the catalogue, the
published measurements and the models."""

from __future__ import annotations

import matplotlib.pyplot as plt
import matplotlib.ticker as mticker
import numpy as np

from gpuinfer import hardware
from gpuinfer.course import exercises, findings
from gpuinfer.course.exercises import chapter07_benchmarking as bench_exercises
from gpuinfer.hardware import measured_rates
from gpuinfer.measure import bench, decoding, profiling, reference
from gpuinfer.predict import (achievable, architectures, batching, calibration, fleet_sizing,
                              llm, llm_slo, roofline, validation)

MiB = 2**20


def ceiling_block(spec, ceiling) -> dict:
    """The lab stack's decode step on the roofline (`ceiling`: `llm.decode_step_breakdown`
    of `spec`): its MB and tokens/s, and the stack's layers beside the full model's."""
    return {"c_mb": ceiling["bytes"].sum() / 1e6, "c_tps": 1 / ceiling["seconds"].sum(),
            "stack_layers": float(spec.n_layers),
            "model_layers": float(architectures.get(decoding.LAB_MODEL).n_layers)}


def cache_block() -> dict:
    """How much larger than the cache `bench`'s flushed reads' pool is, and an H100's L2 (MiB)."""
    return {"flush_factor": float(bench.CACHE_FLUSH_FACTOR),
            "h100_l2_mib": hardware.get("H100 SXM").cache_bytes / MiB}


def mbu_block() -> dict:
    """gpt-fast's bf16 Llama-2-7B tokens/s on an A100 80GB as MBU (%): its README's number."""
    return {"gf_mbu_pct": 100 * llm.mbu("llama-2-7b", "A100 80GB",
                                        reference.GPT_FAST_TOKENS_PER_S["bf16"])}


def closed_loop_block(sweep, batch_s, max_batch) -> dict:
    """The closed-loop sweep's values at 8 and 16 clients (rate, p99s in ms, open/closed),
    the illustrative server's batch-8 time (ms) and its saturation rate (requests/s)."""
    return {"cl8_rate": sweep.loc[8, "requests/s"],
            "cl8_p99": sweep.loc[8, "closed-loop p99 ms"],
            "ol8_p99": sweep.loc[8, "open-loop p99 ms"],
            "ol8_ratio": sweep.loc[8, "open / closed"],
            "cl16_rate": sweep.loc[16, "requests/s"],
            "cl16_p99": sweep.loc[16, "closed-loop p99 ms"],
            "ol16_p99": sweep.loc[16, "open-loop p99 ms"],
            "batch8_ms": 1e3 * float(batch_s(8)),
            "sat16": batching.saturation_throughput(batch_s, max_batch)}


def little_block(run, rate) -> dict:
    """An LLM server's run (`llm_simulator.simulate_llm` at `rate` requests/s): requests
    inside by Little's law, the TPOT of the first 10 requests and of the rest (ms), and
    the mean time a request spends inside (s)."""
    return {"little_n": rate * run["latency"].mean(),
            "warm_tpot_ms": run["tpot"][:10].median() * 1e3,
            "steady_tpot_ms": run["tpot"][10:].median() * 1e3,
            "fill_s": run["latency"].mean()}


def spread_block(spread) -> dict:
    """How far the p99 (and p99.9) of runs of several lengths spread (±%, 5-95% of runs),
    and the shortest run within ±5%."""
    col = "5-95% of runs, +-%"
    return {"spread_500": spread.loc[500, col], "spread_8000": spread.loc[8_000, col],
            "spread_32000": spread.loc[32_000, col],
            "secs_32000": spread.loc[32_000, "seconds at this rate"],
            "n_within_5pct": float(spread.index[spread[col] <= 5][0]),
            "spread999_32000": spread.loc[32_000, "p99.9: 5-95% of runs, +-%"]}


def gap_block(whole, chunked, whole_steps, prompt_tokens, output_tokens) -> dict:
    """Whole against chunked prefills (`llm_simulator.simulate_llm` runs): the TPOT and
    longest-gap p99s (ms), and what the whole prefills' p99 gap is made of: the longest
    stall of prefill-only steps (`findings.prefill_stalls`), in prompts, steps and ms,
    one prompt's prefill (ms), and the rest of the gap (ms)."""
    sw, sc = llm_slo.summarize_llm(whole), llm_slo.summarize_llm(chunked)
    stalls = findings.prefill_stalls(whole_steps)
    worst = stalls.loc[stalls["seconds"].idxmax()]
    one_prefill_s = whole_steps.loc[whole_steps["prefill_tokens"] == prompt_tokens,
                                    "seconds"].median()
    return {"whole_tpot_p99": sw["tpot_p99_s"] * 1e3,
            "n_gaps": float(output_tokens - 1),          # TPOT averages these gaps
            "whole_gap_p99": sw["max_gap_p99_s"] * 1e3,
            "chunk_gap_p99": sc["max_gap_p99_s"] * 1e3,
            "stall_prompts": worst["prefill_tokens"] / prompt_tokens,
            "stall_steps": float(worst["steps"]), "stall_ms": worst["seconds"] * 1e3,
            "one_prefill_ms": one_prefill_s * 1e3,
            "stall_rest_ms": (sw["max_gap_p99_s"] - worst["seconds"]) * 1e3}


def realism_block(realism) -> dict:
    """Fixed against long-tailed lengths: the TTFT p99s and p50s (ms) and the p99s' ratio."""
    fx, lt = realism.loc["fixed 1,024 / 128"], realism.loc["long-tailed"]
    return {"real_fixed_ttft99": fx["TTFT p99 ms"], "real_tail_ttft99": lt["TTFT p99 ms"],
            "real_ttft99_ratio": lt["TTFT p99 ms"] / fx["TTFT p99 ms"],
            "real_fixed_ttft50": fx["TTFT p50 ms"], "real_tail_ttft50": lt["TTFT p50 ms"]}


def t4_clock_block(throttled_mhz, reference_gpus=("A100 80GB", "H100 SXM")) -> dict:
    """The T4's fp16 peak at its boost clock and at `throttled_mhz`, the crowd-sourced
    matmul rate (`measured_rates`) as a fraction of the peak and as the clock that would
    give it at 100%, the same benchmark's fractions on `reference_gpus`, the T4's clock at
    those fractions, and a sentence on what the T4's fraction can and cannot say."""
    t4 = hardware.get("T4")
    boost_mhz = t4.boost_clock_hz / 1e6
    peak = t4.peak_flops("fp16")
    measured_mm = measured_rates.achievable("T4")["matmul_fp16_flops"]
    ref_frac = {n: measured_rates.achievable(n)["matmul_fp16_flops"]
                / hardware.get(n).peak_flops("fp16") for n in reference_gpus}
    # The T4's fraction is clock x kernel efficiency; at the reference cards' fractions:
    t4_frac = measured_mm / peak
    mhz_at = {n: boost_mhz * t4_frac / f for n, f in ref_frac.items()}
    below_refs = t4_frac < min(ref_frac.values())
    between_clocks = throttled_mhz < min(mhz_at.values()) and max(mhz_at.values()) < boost_mhz
    verdict = (
        "below what the same benchmark reaches on the larger cards, but not by enough to say "
        "how much is clock: at their fractions the T4 would have held a clock between the "
        "throttled and the boost one" if below_refs and between_clocks else
        "below what the same benchmark reaches on the larger cards by more than the throttled "
        "clock explains: the kernel or the shape falls short as well" if below_refs else
        "as high as what the same benchmark reaches on the larger cards: a card at its boost "
        "clock with an ordinary kernel explains it, with no sign of throttling in the number")
    return {"t4_tdp": t4.tdp_w, "t4_peak": peak / 1e12,
            "t4_throttled": peak * throttled_mhz / boost_mhz / 1e12,
            "t4_measured": measured_mm / 1e12, "t4_measured_pct": 100 * measured_mm / peak,
            "t4_equiv_mhz": boost_mhz * measured_mm / peak, "t4_boost_mhz": boost_mhz,
            "t4_throttled_mhz": float(throttled_mhz),
            "t4_ref_pct_lo": 100 * min(ref_frac.values()),
            "t4_ref_pct_hi": 100 * max(ref_frac.values()),
            "t4_mhz_at_ref_lo": min(mhz_at.values()), "t4_mhz_at_ref_hi": max(mhz_at.values()),
            "t4_clock_verdict": verdict}


def calibration_block() -> dict:
    """The achievable model's fitted constants (`achievable.FITTED`) and its errors on the
    engine measurements (`calibration.errors`): held out (median, worst, measured over
    ceiling) and on the training rows, and its signed bias on NVFP4 and FP8 rows."""
    fitted = achievable.FITTED
    errs = calibration.errors()
    held = errs[errs["split"] == "heldout"]
    worst = held.loc[held["error_pct"].abs().idxmax()]
    train_err = calibration.errors(split="train").attrs
    bias = held.groupby(held["weight_format"] == "nvfp4")["error_pct"].median()
    return {"fit_matmul_scale": fitted.matmul_scale, "fit_bw_pct": 100 * fitted.bandwidth,
            "fit_int8": fitted.weight_only_fraction("int8"),
            "fit_int4": fitted.weight_only_fraction("int4"),
            "fit_att_pct": 100 * fitted.attention, "fit_gap_us": fitted.kernel_gap_s * 1e6,
            "fit_step_ms": fitted.step_s * 1e3,
            "n_train": float(len(reference.engine_measurements("train"))),
            "n_heldout": float(len(held)),
            "held_median_err": held["error_pct"].abs().median(),
            "held_worst_err": abs(worst["error_pct"]),
            "held_frac_ceiling": held["measured_over_ceiling"].median(),
            "held_over_promise": 1 / held["measured_over_ceiling"].median(),
            "held_max_frac": errs["measured_over_ceiling"].max(),
            "train_median_err": train_err["median_abs_error_pct"],
            "train_worst_err": train_err["worst_abs_error_pct"],
            # bandwidth, matmul_scale, step_s and one fraction per weight-only format
            "n_fitted": float(3 + len(fitted.weight_only)),
            "bias_fp4_pct": bias[True], "bias_fp8_pct": -bias[False],
            "fp4_stand_in": 100 * achievable.matmul_fraction("B200", "nvfp4")}


def validation_block(fixed, left_out, boot) -> dict:
    """The validation's numbers: rows and sources, FITTED's errors on the fit pool (median,
    p90, worst; MoE, dense, batch-1, dense TP1), left-one-source-out and independent rows,
    the refit on the independent rows, the bootstrap's means and spreads (`boot`) beside
    `FITTED`'s constants, the batch-1 fit of
    the fixed cost a step, and what reading an fp8 KV cache as bf16 would break.
    `fixed`: `validation.table()`; `left_out`: `validation.loso()`."""
    fit_pool = fixed[fixed["pool"] == "fit"]
    independent = fixed[fixed["pool"] == "independent"]
    n_f, med_f, p90_f, worst_f = validation.summary(fit_pool)
    _, med_l, p90_l, _ = validation.summary(left_out[left_out["pool"] == "fit"])
    _, med_i, p90_i, _ = validation.summary(independent)
    refit_ind = validation.table(achievable.REFIT, dec=validation.decompose(caps=True))
    refit_ind = refit_ind[refit_ind["pool"] == "independent"]
    data = validation.dataset()
    out = {"val_n_rows": float(len(data)), "val_n_sources": float(data["source"].nunique()),
           "val_n_fit": float(n_f), "val_n_indep": float(len(independent)),
           "val_fit_median": med_f, "val_fit_p90": p90_f, "val_fit_worst": worst_f,
           "val_moe_median": validation.summary(fit_pool[fit_pool["moe"]])[1],
           "val_dense_median": validation.summary(fit_pool[~fit_pool["moe"]])[1],
           "val_dense_tp1_median": validation.summary(
               fit_pool[~fit_pool["moe"] & (fit_pool["tp"] == 1)])[1],
           "val_b1_median": validation.summary(fit_pool[fit_pool["kind"] == "batch-1"])[1],
           "val_loso_median": med_l, "val_loso_p90": p90_l,
           "val_ind_median": med_i, "val_ind_p90": p90_i,
           "val_ind_moe": validation.summary(independent[independent["moe"]])[1],
           "val_refit_ind_median": validation.summary(refit_ind)[1],
           "val_refit_ind_moe": validation.summary(refit_ind[refit_ind["moe"]])[1],
           "val_boot_bw": boot.attrs["mean"]["bandwidth"],
           "val_boot_bw_sd": boot.attrs["std"]["bandwidth"],
           "val_boot_mm": boot.attrs["mean"]["matmul_scale"],
           "val_boot_mm_sd": boot.attrs["std"]["matmul_scale"],
           "val_fitted_bw": achievable.FITTED.bandwidth,
           "val_fitted_mm": achievable.FITTED.matmul_scale,
           "val_fitted_step_ms": 1e3 * achievable.FITTED.step_s,
           "val_boot_corr": boot.attrs["corr"].loc["bandwidth", "step_s"],
           "val_boot_step_ms": 1e3 * boot.attrs["mean"]["step_s"],
           "val_boot_step_sd_ms": 1e3 * boot.attrs["std"]["step_s"]}
    dec = validation.decompose()
    b1_rows = validation.batch1_mask() & (data["pool"] == "fit").to_numpy() & ~(
        dec.weight_only != "").any(axis=1)
    _, flipped = validation.sensitivity_to_kv("bf16")
    broken = kv_broken(flipped)
    out.update({"val_b1_step_ms": 1e3 * validation.fit(dec, b1_rows, free=("step_s",)).step_s,
                "val_n_b1": float(b1_rows.sum()),
                "val_kv_flip_median": validation.summary(flipped[flipped["pool"] == "fit"])[1],
                "val_kv_flip_broken": float(len(broken)),
                "val_kv_flip_worst": float(broken["measured_over_ceiling"].max()),
                "val_kv_n_assumed": float((data["kv_dtype_basis"] != "stated").sum())})
    return out


def kv_broken(flipped):
    """The modelled rows of `validation.sensitivity_to_kv`'s flipped table whose measurement
    would exceed the ceiling (the KV cache read in the other format)."""
    return flipped[flipped["modelled"] & (flipped["measured_over_ceiling"] > 1)]


def mlperf_block(mlperf) -> dict:
    """FITTED on MLPerf's rows (`validation.mlperf_table`): counts, median and p90 error,
    by scenario, the highest measured/ceiling, rows over the server bound, the GPUs (and
    those not modelled), and a sentence on the signed errors of the H200s and the rest."""
    modelled = mlperf[mlperf["modelled"]]
    n_m, med_m, p90_m, _ = validation.summary(mlperf)
    hopper = modelled["accelerator"].isin(["H100 SXM", "H200", "H200 NVL"])
    # Signed errors (positive: the model promises more than was measured).
    h200 = float(modelled.loc[modelled["accelerator"].str.startswith("H200"), "error_pct"].median())
    rest = float(modelled.loc[~hopper, "error_pct"].median())

    def side(x, who):
        return (f"on {who} the tuned submissions beat the model (median {x:+.0f}%)" if x < -5
                else f"on {who} the model promises more than was measured (median {x:+.0f}%)"
                if x > 5 else f"on {who} the model is within 5% (median {x:+.0f}%)")

    return {"mlp_n_rows": float(len(mlperf)), "mlp_n_modelled": float(n_m),
            "mlp_gpus": ", ".join(dict.fromkeys(validation.dataset("mlperf")["accelerator"])),
            "mlp_median": med_m, "mlp_p90": p90_m,
            "mlp_offline_median": validation.summary(
                modelled[modelled["scenario"] == "offline"])[1],
            "mlp_server_median": validation.summary(
                modelled[modelled["scenario"] == "server"])[1],
            "mlp_top_of_ceiling": float(modelled["measured_over_ceiling"].max()),
            "mlp_over_bound": float((~modelled["within_bound"]).sum()),
            "mlp_sides": side(h200, "the H200s") + "; " + side(rest, "Blackwell, AMD and the L40S"),
            "mlp_not_modelled": ", ".join(sorted(set(
                mlperf.loc[~mlperf["modelled"], "accelerator"]))) or "none"}


def profile_block(model, accelerator, context) -> dict:
    """The expected profile of one batch-1 decode step of `model` on `accelerator` at `context`:
    the linear layers' ceiling and achievable time, the kernels' sum, the step, the gap
    between kernels (ms and % of the step), and the kernels a step launches."""
    ops = achievable.step_breakdown(model, accelerator, np.ones(1, dtype=int), np.full(1, context))
    step = achievable.decode_step_s(model, accelerator, 1, context)
    kernels = ops["seconds"].sum()
    return {"prof_linear_ceiling_ms": ops.loc["linear", "ceiling_s"] * 1e3,
            "prof_linear_ach_ms": ops.loc["linear", "seconds"] * 1e3,
            "prof_kernels_ms": kernels * 1e3, "prof_step_ms": step * 1e3,
            "prof_gap_ms": (step - kernels) * 1e3,
            "prof_gap_pct": 100 * (1 - kernels / step),
            "prof_kernels_per_step": float(architectures.get(model).n_layers
                                           * achievable.KERNELS_PER_LAYER)}


def at_objective(model, accelerator, context, tpot_s, k=1.0) -> float:
    """Tokens/s per GPU at the largest batch that meets `tpot_s` when every step takes `k`
    times the achievable model's: the model's step must meet tpot_s / k (0 when no batch
    does)."""
    b = achievable.max_batch_within(model, accelerator, context, tpot_s / k)
    if b == 0:                      # no batch meets the limit with a step this slow
        return 0.0
    return profiling.interactivity_curve(model, accelerator, [b], context).loc[
        b, "tokens_per_s_per_gpu"] / k


def interactivity_block(points, fits, model, accelerator, context) -> dict:
    """The throughput-interactivity points (rows: MLPerf server, MLPerf interactive, 10 ms
    a token; columns batch, tokens/s per GPU and their ceiling counterparts), `fits`
    sequences in memory: batches, tokens/s, the losses against the server limit (%, on the
    model, on the ceiling, and across the dense-throughput interval of the step), and a
    sentence on whether the answer holds across that interval."""
    srv, inter, fast = (points.iloc[i] for i in range(3))
    out = {"ti_fits": float(fits), "ti_server_b": float(srv["batch"]),
           "ti_server_tps": srv["tokens/s per GPU"],
           "ti_server_ceil_tps": srv["ceiling tokens/s per GPU"],
           "ti_inter_b": float(inter["batch"]), "ti_inter_tps": inter["tokens/s per GPU"],
           "ti_inter_loss_pct": 100 * (1 - inter["tokens/s per GPU"] / srv["tokens/s per GPU"]),
           "ti_fast_b": float(fast["batch"]), "ti_fast_tps": fast["tokens/s per GPU"],
           "ti_fast_ceil_b": float(fast["ceiling batch"]),
           "ti_fast_ceil_tps": fast["ceiling tokens/s per GPU"],
           "ti_fast_loss_pct": 100 * (1 - fast["tokens/s per GPU"] / srv["tokens/s per GPU"])}
    # The achievable points are a model's: where 80% of measurements fall at these batches.
    for tag, row in (("server", srv), ("fast", fast)):
        out[f"ti_{tag}_tps_lo"], out[f"ti_{tag}_tps_hi"] = validation.interval(
            row["tokens/s per GPU"], "dense throughput")
    # The losses with every step slower or faster across the same interval (per="cost").
    step_factors = validation.interval(1.0, "dense throughput", per="cost")
    out["ti_step_lo"], out["ti_step_hi"] = step_factors
    tpots = {"server": profiling.MLPERF_LLM_OBJECTIVES[("llama3.1-8b", "server")][1],
             "inter": profiling.MLPERF_LLM_OBJECTIVES[("llama3.1-8b", "interactive")][1],
             "fast": 0.010}
    loss = {}
    for tag in ("inter", "fast"):
        losses = [100 * (1 - at_objective(model, accelerator, context, tpots[tag], k)
                         / at_objective(model, accelerator, context, tpots["server"], k))
                  for k in step_factors]
        loss[tag] = (min(losses), max(losses))
        out[f"ti_{tag}_loss_lo"], out[f"ti_{tag}_loss_hi"] = loss[tag]
    out["ti_holds"] = (
        "The answer to the prediction holds across that range: a tighter limit near the top "
        "costs less than a fast one, wherever in it the engine lands"
        if loss["inter"][1] < loss["fast"][0] else
        "Across that range the two losses overlap: how much a tighter limit costs against a "
        "fast one depends on where the engine lands in it, so measure the curve")
    out["ti_inter_ceil_loss_pct"] = 100 * (1 - inter["ceiling tokens/s per GPU"]
                                           / srv["ceiling tokens/s per GPU"])
    out["ti_fast_ceil_loss_pct"] = 100 * (1 - fast["ceiling tokens/s per GPU"]
                                          / srv["ceiling tokens/s per GPU"])
    return out


def fleet_table():
    """The fleet decision's options (`fleet_sizing.fleet_options` for the exercise's
    machines, demand and SLO, with the closed-loop rate beside)."""
    return fleet_sizing.fleet_options(
        bench_exercises.FLEET_MACHINES, demand_per_s=bench_exercises.FLEET_DEMAND_PER_S,
        slo_s=bench_exercises.FLEET_SLO_S, n=bench_exercises.FLEET_REQUESTS,
        closed_loop=True)


def exercise_block(fleet=None) -> dict:
    """The values the problems' statements and solutions quote: answers (ans_*), caches
    (MiB), the L4 decode and H100 matmul arithmetic, the fleet decision's machines (from
    `fleet`, default `fleet_table()`), and the profiled linear layer's fraction of its
    roofline."""
    ex = exercises.get
    spiky_median = float(np.median(bench_exercises.SPIKY_CALLS_S))
    l4 = hardware.get("L4")
    l4_bytes = 32 * 4096 * 4096 * 2            # 32 layers of 4096 x 4096 fp16 weights
    mm_flops = roofline.matmul_flops(8192, 8192, 8192)
    out = {"a100_l2_mib": hardware.get("A100 80GB").cache_bytes / MiB,
           "l4_l2_mib": l4.cache_bytes / MiB,
           "ans_pool": ex("bench-flush-pool-a100").answer(),
           "ans_pool_mib": ex("bench-flush-pool-a100").answer() / 2**20,
           "ans_mean_s": ex("bench-mean-of-spiky-calls").answer(),
           "ans_median_s": spiky_median,
           "ans_tput": ex("bench-throughput-of-spiky-calls").answer(),
           "ans_tput_median": 1 / spiky_median,
           "ans_l4_gb": l4_bytes / 1e9, "ans_l4_gbs": l4_bytes / 5.0e-3 / 1e9,
           "ans_l4_bw": l4.bandwidth / 1e9, "ans_l4": ex("bench-decode-fraction-l4").answer(),
           "ans_mm_tflop": mm_flops / 1e12, "ans_mm_tflops": mm_flops / 1.5e-3 / 1e12,
           "ans_h100_peak": hardware.get("H100 SXM").peak_flops("fp16") / 1e12,
           "ans_mm": ex("bench-mfu-h100-matmul").answer(),
           "ans_closed": ex("bench-closed-loop-throughput").answer()}
    fleet = fleet_table() if fleet is None else fleet
    for machine, key in [("AWS g4dn.xlarge", "t4"), ("AWS g5.xlarge", "a10g")]:
        out[f"fleet_{key}_cap"] = fleet.loc[machine, "capacity_per_s"]
        out[f"fleet_{key}_n"] = float(fleet.loc[machine, "machines"])
        out[f"fleet_{key}_usd"] = fleet.loc[machine, "usd_per_million"]
    prof_ex = llm.decode_step_breakdown("llama-2-7b", "H100 SXM", 1, 0, "fp16").loc["linear"]
    out.update({"fleet_closed_t4": fleet.loc["AWS g4dn.xlarge", "closed_loop_per_s"],
                "fleet_closed_t4_p99": fleet.loc["AWS g4dn.xlarge", "closed_loop_p99_s"] * 1e3,
                "ans_fleet": ex("bench-fleet-under-open-loop").answer(),
                "prof_ex_measured_ms": bench_exercises.PROFILED_LINEAR_S * 1e3,
                "prof_ex_gb": prof_ex["bytes"] / 1e9,
                "prof_ex_bw": hardware.get("H100 SXM").bandwidth / 1e9,
                "prof_ex_roofline_ms": prof_ex["seconds"] * 1e3,
                "prof_ex_frac": ex("bench-profile-linear-fraction").answer(),
                "prof_ex_ach_frac": achievable.FITTED.bandwidth,
                "ans_interactivity": ex("bench-interactivity-per-gpu").answer()})
    return out


# --- figures: each returns its matplotlib Figure ------------------------------------------

def _log_ms_axis(ax):
    """A log y axis of milliseconds labelled 1, 2, 5 a decade, as plain numbers."""
    ax.yaxis.set_major_locator(mticker.LogLocator(subs=(1, 2, 5)))
    ax.yaxis.set_major_formatter(mticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(mticker.NullFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def first_call_figure(calls_s, steady_s):
    """Single calls in order (`bench.time_calls`, s) beside the median after warm-up (s)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.semilogy(np.arange(1, len(calls_s) + 1), calls_s * 1e3, "o-", color="black",
                label="single calls, in order")
    ax.axhline(steady_s * 1e3, color="grey", ls="--", label="time_fn median (after warm-up)")
    ax.set_xlabel("call number")
    ax.set_ylabel("time per call (ms)")
    ax.set_title("The first call pays for set-up")
    _log_ms_axis(ax)
    return fig


def slow_calls_figure(calls_s):
    """Single calls (s) with their mean and median: slow calls move only the mean."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.semilogy(calls_s * 1e3, ".", color="black", label="single calls")
    ax.axhline(calls_s.mean() * 1e3, color="black", ls="-", label="mean")
    ax.axhline(np.median(calls_s) * 1e3, color="grey", ls="--", label="median")
    ax.set_xlabel("call number")
    ax.set_ylabel("time per call (ms)")
    ax.set_title("Slow calls move the mean, not the median")
    _log_ms_axis(ax)
    return fig


def cache_figure(cached, flushed, accelerator, cache_bytes):
    """Achieved read bandwidth against buffer size, re-read and flushed
    (`bench.weight_read_bandwidth`), with the datasheet bandwidth and the cache size."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.loglog(cached["bytes"], cached["achieved_gb_per_s"], "o-", color="black", mfc="white",
              label="same buffer every call (flush_cache=False)")
    ax.loglog(flushed["bytes"], flushed["achieved_gb_per_s"], "s-", color="black",
              label="fresh slice every call (flush_cache=True)")
    ax.axhline(accelerator.bandwidth / 1e9, color="grey", ls="--",
               label=f"datasheet bandwidth ({accelerator.name})")
    ax.axvline(cache_bytes, color="grey", ls=":", label="cache size bench assumes")
    ax.set_xlabel("buffer read per call (bytes)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    ax.set_title("A buffer that fits in the cache reports the cache's bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tails_figure(sweep):
    """p99 against throughput: the closed-loop sweep beside open-loop (Poisson) traffic."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(sweep["requests/s"], sweep["closed-loop p99 ms"], "o-", color="black",
            label="closed loop (concurrency 1 .. 16)")
    ax.plot(sweep["requests/s"], sweep["open-loop p99 ms"], "s--", color="0.4",
            label="open loop (Poisson) at the same rate")
    ax.set_yscale("log")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title("Same server, same throughput, different tails")
    _log_ms_axis(ax)
    return fig


def heldout_figure(held):
    """Predicted against measured tokens/s per GPU on the held-out rows: the ceiling and
    the achievable model, with the line where prediction = measurement."""
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.loglog(held["measured"], held["ceiling"], "^", mfc="white", color="0.45", ms=5,
              label="ceiling (roofline)")
    ax.loglog(held["measured"], held["achievable"], "o", color="black", ms=4,
              label="achievable (calibrated)")
    lims = [held["measured"].min() / 1.5, held[["ceiling", "measured"]].max().max() * 1.5]
    ax.plot(lims, lims, color="grey", lw=1, ls="--", label="prediction = measurement")
    ax.set_xlim(lims)
    ax.set_ylim(lims)
    ax.set_xlabel("measured output tokens/s per GPU (TensorRT-LLM, held out)")
    ax.set_ylabel("predicted output tokens/s per GPU")
    ax.set_title("Held-out engine measurements: the ceiling above, the achievable on the line",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def interactivity_figure(tradeoff, model, accelerator, context):
    """Throughput per GPU against tokens/s per user (`profiling.interactivity_curve`),
    achievable and ceiling, with MLPerf's Llama-3.1-8B TPOT limits."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(tradeoff["tokens_per_s_per_user"], tradeoff["tokens_per_s_per_gpu"], "o-",
            color="black", ms=3, label="achievable model")
    ax.plot(tradeoff["ceiling_tokens_per_s_per_user"], tradeoff["ceiling_tokens_per_s_per_gpu"],
            "^--", color="0.5", mfc="white", ms=3, label="ceiling (roofline)")
    for (_, tpot_s), style in zip([profiling.MLPERF_LLM_OBJECTIVES[("llama3.1-8b", k)]
                                   for k in ("server", "interactive")], (":", "-.")):
        ax.axvline(1 / tpot_s, color="0.3", ls=style, lw=1,
                   label=f"MLPerf TPOT {tpot_s * 1e3:.0f} ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("interactivity (tokens/s per user)")
    ax.set_ylabel("throughput (tokens/s per GPU)")
    ax.set_title(f"{model}, one {accelerator}, {context} cached tokens: decode only")
    ax.legend(fontsize=8)
    return fig

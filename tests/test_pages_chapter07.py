"""course.pages.chapter07_benchmarking: what chapter 7's prose quotes, against arithmetic
done by hand from the catalogue and the published numbers (and the checks the page used
to run on the package's functions)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter07_benchmarking as bench_exercises
from gpuinfer.course.pages import chapter07_benchmarking as page
from gpuinfer.measure import bench, decoding, profiling, torch_device
from gpuinfer.predict import (achievable, batching, calibration, llm, llm_simulator,
                              validation)


def test_ceiling_block_is_the_decode_ceiling():
    cpu = torch.device("cpu")
    spec = decoding.lab_model(decoding.LAB_MODEL, device=cpu)
    acc = torch_device.accelerator_for(cpu)
    ceiling = llm.decode_step_breakdown(spec, acc, batch=1, context=decoding.LAB_CONTEXT,
                                        dtype="fp32")
    values = page.ceiling_block(spec, ceiling)
    assert values["c_tps"] == pytest.approx(
        llm.decode_ceiling(spec, acc, 1, decoding.LAB_CONTEXT, "fp32"))
    assert values["stack_layers"] == spec.n_layers <= values["model_layers"]


def test_flushed_reads_rotate_through_a_pool_of_the_flush_factor_times_the_cache():
    # A reference CPU with a 1 MiB cache: the flushed 256 KiB reads rotate through at least
    # 4 x 1 MiB, the re-reads use one buffer.
    small = dataclasses.replace(hardware.get("CPU"), cache_bytes=2**20)
    kw = dict(device="cpu", progress=False, accelerator=small, min_run_s=0.01)
    flushed = bench.weight_read_bandwidth([2**18], flush_cache=True, **kw)
    cached = bench.weight_read_bandwidth([2**18], flush_cache=False, **kw)
    assert (flushed["slices"] * flushed["bytes"] >= bench.CACHE_FLUSH_FACTOR * 2**20).all()
    assert (cached["slices"] == 1).all()
    assert page.cache_block() == {"flush_factor": 4.0, "h100_l2_mib": 50.0}  # H100 SXM: 50 MB L2


def test_gpt_fast_mbu_by_hand_and_mbu_is_the_fraction_of_a_memory_bound_ceiling():
    # 104.9 tokens/s x 13.22 GB (Llama-2-7B's 6.74e9 x 2 bytes less the 32,000 x 4,096 x 2
    # embedding table, only gathered) / 2.039 TB/s (A100 80GB) = 68.0%.
    assert page.mbu_block()["gf_mbu_pct"] == pytest.approx(100 * 104.9 * 13.22e9 / 2.039e12,
                                                           abs=0.1)
    ceiling = llm.decode_ceiling("llama-3-8b", "H100 SXM", 1, 1024, "fp16")
    breakdown = llm.decode_step_breakdown("llama-3-8b", "H100 SXM", 1, 1024, "fp16")
    assert (breakdown["bound"] == "memory").all()
    assert llm.mbu("llama-3-8b", "H100 SXM", 0.5 * ceiling, 1, 1024, "fp16") == pytest.approx(0.5)


def batch_s(b):                   # the page's illustrative server: 2 ms + 0.25 ms a request
    return 2e-3 + 0.25e-3 * np.asarray(b)


def test_closed_loop_batches_hold_every_client():
    # No think time, 8 clients <= max batch 16: every batch holds all 8, so every request
    # takes one batch of 8: 2 + 8 x 0.25 = 4 ms, and 8 requests every 4 ms = 2,000/s.
    run = batching.summarize(batching.simulate_closed_loop(8, batch_s, 16, n=2_000))
    assert run["p99_s"] == pytest.approx(4e-3)
    assert run["throughput_per_s"] == pytest.approx(2_000, rel=1e-3)
    sweep = pd.DataFrame({"requests/s": [2000.0, 2666.0], "closed-loop p99 ms": [4.0, 6.0],
                          "open-loop p99 ms": [9.0, 30.0]}, index=[8, 16])
    sweep["open / closed"] = sweep["open-loop p99 ms"] / sweep["closed-loop p99 ms"]
    values = page.closed_loop_block(sweep, batch_s, 16)
    assert values["batch8_ms"] == 4.0 and values["ol8_ratio"] == 2.25
    assert values["sat16"] == pytest.approx(16 / 6e-3)     # 16 requests every 2 + 4 ms


@pytest.fixture(scope="module")
def llm_runs():
    run = dict(prompt_tokens=1024, output_tokens=128, model="llama-3-8b", accelerator="L4",
               max_batch=32)
    arrivals = batching.poisson_arrivals(2.0, 150, seed=0)
    chunked, steps = llm_simulator.simulate_llm(arrivals, **run, prefill_chunk=512,
                                                return_steps=True, achievable=False)
    whole, whole_steps = llm_simulator.simulate_llm(arrivals, **run, return_steps=True, achievable=False)
    return run, chunked, steps, whole, whole_steps


def test_littles_law_holds_in_the_llm_simulator(llm_runs):
    _, chunked, steps, _, _ = llm_runs
    values = page.little_block(chunked, rate=2.0)
    busy = np.average(steps["running"], weights=steps["seconds"])   # time-weighted
    assert values["little_n"] == pytest.approx(2.0 * values["fill_s"])
    assert abs(busy / values["little_n"] - 1) < 0.2


def test_the_p99_gap_is_the_longest_stall_plus_a_decode_step(llm_runs):
    run, chunked, _, whole, whole_steps = llm_runs
    values = page.gap_block(whole, chunked, whole_steps, run["prompt_tokens"],
                            run["output_tokens"])
    assert values["n_gaps"] == 127.0                               # 128 tokens, 127 gaps
    decode_max_ms = 1e3 * whole_steps.loc[whole_steps["decode_tokens"] > 0, "seconds"].max()
    assert 0 < values["stall_rest_ms"] <= decode_max_ms * 1.01
    assert values["stall_ms"] == pytest.approx(values["whole_gap_p99"] - values["stall_rest_ms"])


def test_t4_clock_block_by_hand():
    values = page.t4_clock_block(900)
    # 65 TFLOP/s fp16 at the 1,590 MHz boost clock; at 900 MHz 65 x 900 / 1,590 = 36.8.
    assert values["t4_peak"] == 65.0 and values["t4_boost_mhz"] == 1590.0
    assert values["t4_throttled"] == pytest.approx(36.79, abs=0.01)
    # Fractions of the peak: between 0 and 1 on every card (catalogue rates under peaks).
    assert 0 < values["t4_measured_pct"] < 100
    assert 0 < values["t4_ref_pct_lo"] <= values["t4_ref_pct_hi"] < 100
    # The T4's clock at a card's fraction f: 1,590 MHz x (T4's fraction) / f.
    frac = values["t4_measured_pct"] / 100
    assert values["t4_mhz_at_ref_hi"] == pytest.approx(1590 * frac / (values["t4_ref_pct_lo"] / 100))
    assert values["t4_equiv_mhz"] == pytest.approx(1590 * frac)


def test_calibration_block_and_the_ceiling_over_every_row():
    values = page.calibration_block()
    errs = calibration.errors()
    held = errs[errs["split"] == "heldout"]
    held_only = calibration.errors(split="heldout").attrs
    assert held_only["median_abs_error_pct"] == pytest.approx(values["held_median_err"])
    assert held_only["worst_abs_error_pct"] == pytest.approx(values["held_worst_err"])
    assert values["n_heldout"] == len(held) and values["n_train"] == 6
    assert values["held_median_err"] < 15
    assert (errs["measured"] <= errs["ceiling"] * (1 + 1e-9)).all()
    # NVFP4 borrows the fp8 GEMM fraction (no fp4 GEMM measurement in the catalogue).
    assert achievable.matmul_fraction("B200", "nvfp4") == achievable.matmul_fraction("B200", "fp8")
    # bandwidth, matmul_scale, step_s, and one fraction per weight-only format (int8, int4)
    assert values["n_fitted"] == 3 + len(achievable.FITTED.weight_only)


def test_validation_ceiling_holds_and_the_kv_flip_breaks_only_llama_rows():
    assert validation.ceiling_violations().empty
    _, flipped = validation.sensitivity_to_kv("bf16")
    broken = page.kv_broken(flipped)
    assert len(broken) and broken["model"].isin(
        ["llama-3-8b", "llama-4-scout", "llama-4-maverick"]).all()
    assert (broken["measured_over_ceiling"] > 1).all()


def test_mlperf_rows_stay_under_their_ceiling():
    mlperf = validation.mlperf_table()
    values = page.mlperf_block(mlperf)
    assert (mlperf.loc[mlperf["modelled"], "measured_over_ceiling"] <= 1).all()
    assert values["mlp_top_of_ceiling"] <= 1 and values["mlp_n_rows"] == len(mlperf)


def test_profile_block_by_hand():
    values = page.profile_block("llama-3-8b", "H100 SXM", 1024)
    # 32 layers x 13 kernels a layer = 416 launches a step.
    assert values["prof_kernels_per_step"] == 32 * 13
    assert values["prof_step_ms"] > values["prof_kernels_ms"] > values["prof_linear_ach_ms"]
    assert values["prof_linear_ach_ms"] > values["prof_linear_ceiling_ms"]
    assert values["prof_gap_pct"] == pytest.approx(
        100 * values["prof_gap_ms"] / values["prof_step_ms"])


def test_interactivity_objectives_and_intervals():
    # MLPerf's Llama-3.1-8B TPOT limits: 100 ms (server), 30 ms (interactive).
    assert profiling.MLPERF_LLM_OBJECTIVES[("llama3.1-8b", "server")][1] == 0.100
    assert profiling.MLPERF_LLM_OBJECTIVES[("llama3.1-8b", "interactive")][1] == 0.030
    model, gpu, context = "llama-3-8b", "H100 SXM", 1024
    fits = llm.max_batch(model, gpu, context)
    rows = {}
    for tpot in (0.100, 0.030, 0.010):
        b = achievable.max_batch_within(model, gpu, context, tpot)
        c = llm.max_batch_within(model, gpu, context, tpot)
        at = profiling.interactivity_curve(model, gpu, [b, c], context)
        rows[tpot] = {"batch": b, "tokens/s per GPU": at.loc[b, "tokens_per_s_per_gpu"],
                      "ceiling batch": c,
                      "ceiling tokens/s per GPU": at.loc[c, "ceiling_tokens_per_s_per_gpu"]}
    values = page.interactivity_block(pd.DataFrame(rows).T, fits, model, gpu, context)
    assert values["ti_server_b"] == fits                 # 100 ms: the memory limits the batch
    assert values["ti_server_tps_lo"] < values["ti_server_tps"] < values["ti_server_tps_hi"]
    assert values["ti_fast_tps_lo"] < values["ti_fast_tps"] < values["ti_fast_tps_hi"]
    assert values["ti_inter_loss_lo"] <= values["ti_inter_loss_pct"] <= values["ti_inter_loss_hi"]
    # k = 1 is the model itself: at_objective at the server limit is the server point.
    assert page.at_objective(model, gpu, context, 0.100) == pytest.approx(values["ti_server_tps"])


def values_of(name):
    return exercises.get(name).answer()


def test_the_exercises_and_the_fleet_decision():
    # (Every exercise accepting its own answer, the page's old loop, is
    # test_exercises.test_every_exercise_accepts_its_answer_and_rejects_a_wrong_one.)
    # Little's law: 8 outstanding requests / 4 ms each = 2,000 requests/s.
    assert values_of("bench-closed-loop-throughput") == pytest.approx(2_000)
    fleet = page.fleet_table()
    # The closed loop alone would pick one T4; the open loop needs more than one.
    assert fleet.loc["AWS g4dn.xlarge", "closed_loop_per_s"] > bench_exercises.FLEET_DEMAND_PER_S
    assert fleet.loc["AWS g4dn.xlarge", "machines"] > 1
    values = page.exercise_block(fleet)
    assert values["fleet_t4_n"] == fleet.loc["AWS g4dn.xlarge", "machines"]
    # 32 layers of 4096 x 4096 fp16 weights: 1.07 GB; read in 5 ms: 215 GB/s.
    assert values["ans_l4_gb"] == pytest.approx(1.074, abs=0.001)
    assert values["ans_l4_gbs"] == pytest.approx(214.7, abs=0.1)
    # 2 x 8192^3 = 1.1 TFLOP; in 1.5 ms: 733 TFLOP/s.
    assert values["ans_mm_tflop"] == pytest.approx(1.0995, abs=1e-4)
    assert values["ans_mm_tflops"] == pytest.approx(733.0, abs=0.1)


def test_spread_and_realism_blocks_read_their_tables():
    spread = pd.DataFrame({"seconds at this rate": [250.0, 1000.0, 4000.0, 16000.0],
                           "5-95% of runs, +-%": [20.0, 10.0, 5.0, 2.5],
                           "p99.9: 5-95% of runs, +-%": [40.0, 20.0, 10.0, 5.0]},
                          index=[500, 2_000, 8_000, 32_000])
    values = page.spread_block(spread)
    # The first length within +-5%: 8,000 requests (5.0 <= 5).
    assert values["n_within_5pct"] == 8_000.0 and values["spread999_32000"] == 5.0
    realism = pd.DataFrame({"TTFT p50 ms": [100.0, 80.0], "TTFT p99 ms": [200.0, 500.0]},
                           index=["fixed 1,024 / 128", "long-tailed"])
    assert page.realism_block(realism)["real_ttft99_ratio"] == 2.5       # 500 / 200


def test_validation_block_counts_every_row_once():
    fixed, left_out = validation.table(), validation.loso()
    values = page.validation_block(fixed, left_out, validation.bootstrap(2))
    # Every row of the dataset is in the fit pool or the independent one.
    assert values["val_n_fit"] + values["val_n_indep"] == values["val_n_rows"]
    assert values["val_n_rows"] == len(validation.dataset())
    # What the page's prose says: MoE errs more than twice dense; left-out sources more
    # than the fit.
    assert values["val_moe_median"] > 2 * values["val_dense_median"]
    assert values["val_loso_median"] > values["val_fit_median"]
    # The bootstrap's means sit beside FITTED's own constants (0.85, 0.70, 1.6 ms: the
    # module's table), not in place of them.
    boot = validation.bootstrap(2)
    assert values["val_boot_bw"] == pytest.approx(boot.attrs["mean"]["bandwidth"])
    assert (values["val_fitted_bw"], values["val_fitted_mm"]) == (0.85, 0.70)
    assert values["val_fitted_step_ms"] == pytest.approx(1.6)


def test_the_figures_draw_what_their_captions_say():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    calls = np.array([4e-3, 1e-3, 1e-3, 9e-3, 1e-3])
    ax = page.slow_calls_figure(calls).axes[0]
    # The mean 3.2 ms and the median 1 ms as horizontal lines.
    levels = sorted(line.get_ydata()[0] for line in ax.get_lines()[1:])
    assert levels == pytest.approx([1.0, 3.2])
    assert page.first_call_figure(calls, 1e-3).axes[0].get_yscale() == "log"
    reads = pd.DataFrame({"bytes": [2.0**20, 2.0**24], "achieved_gb_per_s": [50.0, 20.0]})
    cache_ax = page.cache_figure(reads, reads, hardware.get("CPU"), 2**22).axes[0]
    assert cache_ax.get_xscale() == "log" and len(cache_ax.get_lines()) == 4
    sweep = pd.DataFrame({"requests/s": [100.0, 200.0], "closed-loop p99 ms": [4.0, 6.0],
                          "open-loop p99 ms": [9.0, 30.0]})
    assert page.tails_figure(sweep).axes[0].get_yscale() == "log"
    held = pd.DataFrame({"measured": [100.0, 1000.0], "ceiling": [300.0, 2000.0],
                         "achievable": [110.0, 900.0]})
    lims = page.heldout_figure(held).axes[0].get_xlim()
    assert lims == pytest.approx((100 / 1.5, 2000 * 1.5))     # the smallest and largest / 1.5
    curve = profiling.interactivity_curve("llama-3-8b", "H100 SXM", [1, 8], 1024)
    ax = page.interactivity_figure(curve, "llama-3-8b", "H100 SXM", 1024).axes[0]
    # MLPerf's TPOT limits as interactivity: 1 / 0.1 s = 10 and 1 / 0.03 s = 33.3 tokens/s.
    xs = sorted(line.get_xdata()[0] for line in ax.get_lines()[2:])
    assert xs == pytest.approx([10.0, 1 / 0.03])
    plt.close("all")

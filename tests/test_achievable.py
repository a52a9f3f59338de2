"""The achievable model: it reduces to the ceiling, its constants are the fit's, the
ceiling holds every published measurement, and the held-out error is what the report says."""

import dataclasses

import numpy as np
import pytest

from gpuinfer.predict import achievable as A
from gpuinfer import hardware
from gpuinfer.predict import llm, llm_serving
from gpuinfer.hardware import device_links
from gpuinfer.predict import step_model
from gpuinfer.predict import llm_simulator

# Every efficiency 1, every overhead 0, spelled out (not the CEILING constant itself).
ONES = A.Efficiency(matmul=1.0, matmul_scale=1.0, bandwidth=1.0, weight_only=(("int8", 1.0),),
                    attention=1.0, step_s=0.0, kernel_gap_s=0.0, cuda_graphs=True,
                    launch_s=0.0, attention_dtype=None)


@pytest.mark.parametrize("model,gpu,dtype,compute", [
    ("llama-2-7b", "A100 80GB", "bf16", None), ("llama-2-7b", "T4", "int8", None),
    ("llama-3-8b", "H100 SXM", "fp8", "fp8"), ("llama-3-70b", "B200", "nvfp4", "fp4")])
def test_reduces_to_the_ceiling_with_every_efficiency_one_and_overhead_zero(model, gpu, dtype,
                                                                             compute):
    assert ONES.is_ceiling
    q, c = [1, 1, 300], [100, 900, 0]
    want = llm.forward_step_s(model, gpu, q, c, dtype, compute_dtype=compute)
    assert A.step_s(model, gpu, q, c, dtype, compute_dtype=compute,
                    achievable=ONES) == pytest.approx(want, rel=1e-12)
    assert A.step_s(model, gpu, q, c, dtype, compute_dtype=compute,
                    achievable=False) == pytest.approx(want, rel=1e-12)
    assert A.decode_tokens_per_s(model, gpu, 8, 512, dtype, compute_dtype=compute,
                                 achievable=ONES) == pytest.approx(
        llm.decode_ceiling(model, gpu, 8, 512, dtype, compute_dtype=compute), rel=1e-12)
    # The serving functions: the same numbers through their fast step model.
    kw = dict(dtype=dtype, compute_dtype=compute)
    a = llm_serving.offline_throughput(model, gpu, 500, 200, achievable=ONES, **kw)
    b = llm_serving.offline_throughput(model, gpu, 500, 200, achievable=False, **kw)
    assert a["tokens_per_s_per_gpu"] == pytest.approx(b["tokens_per_s_per_gpu"], rel=1e-12)


def test_the_simulator_reduces_to_the_ceiling_too():
    kw = dict(max_batch=8, prefill_chunk=256)
    arrivals, p, o = np.arange(6) * 0.01, 300, 40
    a = llm_simulator.simulate_llm(arrivals, p, o, "llama-3-8b", "H100 SXM", achievable=ONES, **kw)
    b = llm_simulator.simulate_llm(arrivals, p, o, "llama-3-8b", "H100 SXM", **kw, achievable=False)
    assert np.allclose(a["finish"], b["finish"], rtol=1e-12)
    c = llm_simulator.simulate_llm(arrivals, p, o, "llama-3-8b", "H100 SXM", achievable=True, **kw)
    assert (c["finish"] > b["finish"]).all()  # the achievable model is slower


def test_overheads_by_hand():
    eff = A.Efficiency(step_s=1e-3, kernel_gap_s=0.5e-6, kernels_per_layer=13)
    # 32 layers x 13 kernels = 416 kernels; 416 x 0.5 us = 0.208 ms of gaps:
    # 2 ms + 0.208 ms + 1 ms = 3.208 ms.
    assert A.overheads(2e-3, 32, eff) == pytest.approx(3.208e-3)
    eager = dataclasses.replace(eff, cuda_graphs=False, launch_s=10e-6)
    # Chapter 6's overlap: host 416 x 10 us = 4.16 ms against 10 us + 2.208 ms on the
    # device: the host sets the pace, 4.16 ms + 1 ms.
    assert A.overheads(2e-3, 32, eager) == pytest.approx(5.16e-3)
    # A long device time hides the launches: 10 us + 9.208 ms + 1 ms.
    assert A.overheads(9e-3, 32, eager) == pytest.approx(10.218e-3)
    # The same formula as chapter 6's, once: tabular.overlapped_s.
    from gpuinfer.predict import tabular
    assert A.overheads(2e-3, 32, eager) == pytest.approx(
        tabular.overlapped_s(416, 10e-6, 2.208e-3) + 1e-3)


def test_the_constants_are_the_ones_cited_and_stated():
    # The one test that keeps the constants' values as literals: every other test reads
    # them from the module (a refit moves them all at once), so a change to a constant
    # shows here, beside the figures the module's comments and the pages state.
    from gpuinfer.predict import parallel, tabular

    blog = tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S
    # NVIDIA's CUDA-graphs post: a kernel replayed in a graph takes 3.4 us, 2.9 of them its
    # own work: a 0.5 us gap; launched eagerly back to back, 3.8 us a kernel.
    assert A.GRAPH_KERNEL_GAP_S == pytest.approx(
        blog["replayed as a CUDA graph"] - blog["kernel alone"]) == pytest.approx(0.5e-6)
    assert A.EAGER_LAUNCH_S == blog["launched back to back"] == 3.8e-6
    # FlashAttention-3: 740 of the H100's 989 dense fp16 TFLOP/s, 0.748, rounded to 0.75.
    assert A.ATTENTION_FRACTION == 0.75 == pytest.approx(740 / 989, abs=0.005)
    # parallel's illustrative count of a TP layer's kernels.
    assert A.KERNELS_PER_LAYER == parallel.KERNELS_PER_LAYER == 13
    # FITTED, as its comment states (calibration.calibrate refits it: test_calibration).
    fit = A.FITTED
    assert (fit.matmul, fit.matmul_scale, fit.bandwidth, fit.step_s, fit.sequence_s) == (
        None, 0.70, 0.85, 1.6e-3, 0.0)
    assert dict(fit.weight_only) == {"int8": 0.83, "int4": 0.74}
    assert (fit.attention, fit.kernel_gap_s, fit.launch_s, fit.kernels_per_layer) == (
        0.75, 0.5e-6, 3.8e-6, 13)
    assert (fit.cuda_graphs, fit.attention_dtype, fit.all_to_all) == (True, "fp16", "link")
    # REFIT, as its comment states (validation.refit refits it: test_validation).
    re = A.REFIT
    assert (re.matmul_scale, re.bandwidth, re.step_s, re.sequence_s, re.all_to_all) == (
        0.66, 0.64, 1.0e-3, 1.1e-5, "measured")
    assert dict(re.weight_only) == {"int8": 0.99, "int4": 0.80}


def test_matmul_fraction_cited_and_fallback():
    # Bekman's MAMF: H100 SXM fp8 1402.6 TFLOP/s of 1979; bf16 794.5 of 989.
    assert A.matmul_fraction("H100 SXM", "fp8") == pytest.approx(1402.6 / 1979)
    assert A.matmul_fraction("H100 SXM", "bf16") == pytest.approx(794.5 / 989)
    # int8 and fp4 take the device's fp8 fraction: no MAMF for them is published.
    assert A.matmul_fraction("B200", "fp4") == pytest.approx(3432.5 / 4500)
    # GB200 has no measurement: the median of the four fp8 fractions
    # (H100 0.7087, H200 1453.4/1979 = 0.7344, GH200 1535/1979 = 0.7756, B200 0.7628):
    # (0.7344 + 0.7628) / 2 = 0.7486.
    assert A.matmul_fraction("GB200", "fp4") == pytest.approx(
        (1453.4 / 1979 + 3432.5 / 4500) / 2)


def test_attention_runs_at_the_16_bit_peak_in_the_achievable_model():
    # A prefill of 8192 tokens, W8A8: attention is compute-bound. Its FLOPs:
    # 4 x 32 layers x 4096 x 8192 x 8193 / 2 pairs = 1.7594e13; at 0.75 x 989 TFLOP/s
    # (fp16, FA3's fraction, `ATTENTION_FRACTION`: the Efficiency's default) 23.72 ms.
    t = A.step_breakdown("llama-3-8b", "H100 SXM", [8192], [0], "fp8", compute_dtype="fp8",
                         achievable=A.Efficiency(matmul=1.0, bandwidth=1.0))
    flops = 4 * 32 * 4096 * 8192 * 8193 / 2
    assert t.loc["attention", "flops"] == pytest.approx(flops)
    assert t.loc["attention", "seconds"] == pytest.approx(flops / (A.ATTENTION_FRACTION * 989e12))


def test_gpt_fast_fractions_per_format():
    # gpt-fast, Llama-2-7B batch 1 on an A100 80GB: 104.9, 155.6, 196.8 tokens/s against
    # ceilings of 153.6, 305.8, 486.6: 0.683, 0.509, 0.404. The fitted model gives each
    # format its own fraction (one fraction for all would put int8 at 0.68).
    got = {f: A.fraction_of_ceiling("llama-2-7b", "A100 80GB", 1, 102, f)
           for f in ("bf16", "int8", "int4-g32-zp")}
    assert got["bf16"] == pytest.approx(104.9 / 153.6, rel=0.03)
    assert got["int8"] == pytest.approx(155.6 / 305.8, rel=0.03)
    assert got["int4-g32-zp"] == pytest.approx(196.8 / 486.6, rel=0.03)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="bandwidth"):
        A.Efficiency(bandwidth=1.5)
    with pytest.raises(ValueError, match="step_s"):
        A.Efficiency(step_s=-1)
    with pytest.raises(TypeError, match="achievable"):
        A.step_s("llama-3-8b", "H100 SXM", [1], [0], achievable="yes")
    with pytest.raises(ValueError, match="dtype"):
        A.Efficiency(weight_only=(("int9", 0.5),))
    assert A.model("llama-3.1-405b").n_params == pytest.approx(405.85e9, rel=0.001)


def test_the_ceiling_holds_trtllms_moe_measurements():
    # TensorRT-LLM's perf overview (the commit engine_measurements.csv cites), Qwen3-30B-A3B
    # on one B200, FP4 (nvidia/Qwen3-30B-A3B-FP4: nvfp4 weights and matmuls, bf16 KV
    # cache), total output tokens/s under maximum load, by (input, output) tokens. Not in
    # the calibration table yet: the serving model took no MoE model until issue 25.
    from gpuinfer.predict import llm_serving

    published = {(128, 128): 39_827, (128, 2048): 37_844, (128, 4096): 24_953,
                 (500, 2000): 27_817, (1000, 1000): 25_828, (1000, 2000): 22_051,
                 (2048, 128): 6_251, (2048, 2048): 17_554, (5000, 500): 6_142,
                 (20000, 2000): 2_944}
    for (i, o), measured in published.items():
        ceiling = llm_serving.offline_throughput("qwen3-30b-a3b", "B200", i, o, dtype="nvfp4",
                                                 compute_dtype="fp4", kv_dtype="bf16", achievable=False)
        assert ceiling["tokens_per_s"] >= measured, (i, o)


def test_the_derated_device_by_hand():
    # A100 80GB on FITTED: fp16/bf16 peaks x 0.70 x its best 16-bit MAMF fraction
    # (bf16: 271.2 of 312 TFLOP/s): 0.70 x 271.2e12 = 189.84e12 FLOP/s; its int8 peak
    # (624e12) has no 8-bit measurement on an A100, so the fp8 median (0.7486, above)
    # stands in: 624e12 x 0.70 x 0.7486 = 327.0e12; bandwidth 0.85 x 2039e9 = 1733.15e9.
    # (0.70, 0.85 and 0.83 below are FITTED's matmul_scale, bandwidth and int8 weight_only.)
    fit = A.FITTED
    acc = A.derated_accelerator("A100 80GB")
    assert acc.name == "A100 80GB (achievable)"
    assert acc.peak_flops("fp16") == pytest.approx(fit.matmul_scale * 271.2e12)
    assert acc.peak_flops("bf16") == pytest.approx(fit.matmul_scale * 271.2e12)
    assert acc.peak_flops("int8") == pytest.approx(
        624e12 * fit.matmul_scale * (1453.4 / 1979 + 3432.5 / 4500) / 2)
    assert acc.bandwidth == pytest.approx(fit.bandwidth * 2039e9)
    # int8 weight-only: the dequantising kernels stream at a further 0.83.
    assert A.derated_accelerator("A100 80GB", weight_format="int8").bandwidth == pytest.approx(
        dict(fit.weight_only)["int8"] * fit.bandwidth * 2039e9)
    # The ceiling is the datasheet's device.
    ceil = A.derated_accelerator("A100 80GB", A.CEILING)
    assert ceil.peaks == hardware.get("A100 80GB").peaks
    assert ceil.bandwidth == hardware.get("A100 80GB").bandwidth


def test_compute_bound_batch_on_the_derated_rates():
    # On the ceiling it is llm's; on FITTED it is llm's on the derated device, and its
    # ridge falls from 312e12 / 2039e9 = 153.0 to 189.84e12 / 1733.15e9 = 109.5 FLOP/B,
    # so the batch falls by about 109.5 / 153.0 = 0.716 (162 -> about 116).
    dense = llm.compute_bound_batch("llama-2-7b", "A100 80GB", "fp16")
    assert A.compute_bound_batch("llama-2-7b", "A100 80GB", "fp16", achievable=False) == dense
    got = A.compute_bound_batch("llama-2-7b", "A100 80GB", "fp16")
    assert got == llm.compute_bound_batch("llama-2-7b", A.derated_accelerator("A100 80GB"), "fp16")
    fit = A.FITTED        # 189.84e12 = 0.70 x 271.2e12; 1733.15e9 = 0.85 x 2039e9
    ridge = fit.matmul_scale * 271.2e12 / (fit.bandwidth * 2039e9)
    assert got == pytest.approx(dense * ridge / (312e12 / 2039e9), rel=0.05)


def test_errors_say_where_each_rows_matmul_fraction_comes_from():
    assert A.matmul_source("H100 SXM", "fp8") == "measured"
    assert A.matmul_source("A100 80GB", "bf16") == "measured"
    assert A.matmul_source("B200", "fp4") == "fp8 stand-in"       # B200 has an fp8 figure
    assert A.matmul_source("GB200", "fp4") == "catalogue median"   # GB200 has none
    assert A.matmul_source("A100 80GB", "int8") == "catalogue median"


# --- decode_options and max_batch_within ------------------------------------------------------

# Llama-2-7B (config.json): 32 layers, d_model 4096, MLP 11008, vocabulary 32000. Weights a
# decode step's matmuls read: 32 x (4 x 4096^2 + 3 x 4096 x 11008) + 32000 x 4096
# = 6,476,005,376 + 131,072,000 = 6,607,077,376 (the embedding table is gathered a row).
LLAMA2_7B_MATMUL_WEIGHTS = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096


def test_decode_options_by_hand_on_a_t4():
    # Batch 1, empty cache: memory-bound. FITTED: bytes at 0.85 x 320e9 = 272e9 B/s, int8
    # weight-only at a further 0.83 (225.76e9 B/s); 32 x 13 kernels x 0.5 us = 0.208 ms of
    # gaps and 1.6 ms a step (the activations add under 0.1%):
    #   fp16: 13.214e9 B / 272e9 = 48.582 ms + 1.808 = 50.390 ms: 19.845 tokens/s;
    #         ceiling 320e9 / 13.214e9 = 24.217 tokens/s
    #   int8: 6.607e9 / 225.76e9 = 29.266 ms + 1.808 = 31.074 ms: 32.181 tokens/s;
    #         ceiling 48.433 tokens/s
    #   speed-up of int8 over fp16: 50.390 / 31.074 = 1.6216; on the ceiling 2.
    fit = A.FITTED         # 0.85, 0.83, 13 x 0.5 us and 1.6 ms: FITTED's constants
    w = LLAMA2_7B_MATMUL_WEIGHTS
    fixed = 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    bw = 320e9 * fit.bandwidth
    step = {"fp16": 2 * w / bw + fixed, "int8": w / (bw * dict(fit.weight_only)["int8"]) + fixed}
    ceiling = {"fp16": 320e9 / (2 * w), "int8": 320e9 / w}
    t = A.decode_options("llama-2-7b", {f: {"dtype": f} for f in ("fp16", "int8")},
                         accelerator="T4", baseline="fp16")
    for f in ("fp16", "int8"):
        assert t.loc[f, "step_s"] == pytest.approx(step[f], rel=2e-3)
        assert t.loc[f, "tokens_per_s"] == pytest.approx(1 / step[f], rel=2e-3)
        assert t.loc[f, "ceiling_tokens_per_s"] == pytest.approx(ceiling[f], rel=2e-3)
        assert t.loc[f, "fraction_of_ceiling"] == pytest.approx(
            1 / step[f] / ceiling[f], rel=3e-3)
    assert t.loc["int8", "speedup"] == pytest.approx(step["fp16"] / step["int8"], rel=2e-3)
    assert t.loc["int8", "ceiling_speedup"] == pytest.approx(2.0, rel=2e-3)
    assert t.loc["fp16", "speedup"] == 1.0
    # The weights held: every parameter, the embedding table too (32000 x 4096 more).
    assert t.loc["int8", "weight_bytes"] == step_model.weight_bytes("llama-2-7b", "int8")


def test_decode_options_rows_are_the_single_option_functions():
    # Options override the common arguments; tuple labels give a MultiIndex.
    opts = {("H100 SXM", "fp8"): {"accelerator": "H100 SXM", "dtype": "fp8_e4m3",
                                  "compute_dtype": "fp8"},
            ("A100 80GB", "bf16"): {"accelerator": "A100 80GB", "dtype": "bf16", "batch": 8}}
    t = A.decode_options("llama-3-8b", opts, batch=256, context=256)
    assert t.index.nlevels == 2 and "speedup" not in t.columns
    h = t.loc[("H100 SXM", "fp8")]
    assert h["batch"] == 256 and h["tokens_per_s"] == A.decode_tokens_per_s(
        "llama-3-8b", "H100 SXM", 256, 256, "fp8_e4m3", compute_dtype="fp8")
    assert h["ceiling_tokens_per_s"] == llm.decode_ceiling(
        "llama-3-8b", "H100 SXM", 256, 256, "fp8_e4m3", compute_dtype="fp8")
    a = t.loc[("A100 80GB", "bf16")]
    assert a["batch"] == 8 and a["step_s"] == A.decode_step_s("llama-3-8b", "A100 80GB", 8, 256,
                                                               "bf16")
    # The ceiling's options: every fraction 1.
    c = A.decode_options("llama-3-8b", opts, batch=256, context=256, achievable=False)
    assert np.allclose(c["fraction_of_ceiling"], 1.0)


@pytest.mark.parametrize("options, kw, error, words", [
    ([("T4", "fp16")], {}, TypeError, "options"),
    ({}, {}, TypeError, "options"),
    ({"a": "T4"}, {}, TypeError, r"options\['a'\]"),
    ({"a": {"gpu": "T4"}}, {}, ValueError, "gpu"),
    ({"a": {"dtype": "fp16"}}, {}, ValueError, "accelerator"),
    ({"a": {"accelerator": "T4"}}, {"baseline": "b"}, ValueError, "baseline"),
    ({"a": {"accelerator": "T4", "batch": 0}}, {}, ValueError, "batch"),
    ({"a": {"accelerator": "T4"}}, {"achievable": "yes"}, TypeError, "achievable"),
])
def test_decode_options_bad_input(options, kw, error, words):
    with pytest.raises(error, match=words):
        A.decode_options("llama-2-7b", options, **kw)


def test_max_batch_within_is_the_last_batch_a_scan_finds():
    # Brute force: every batch that fits (llm.max_batch), the last whose achievable step
    # meets 35 ms. By hand (memory-bound): (0.035 - 1.808e-3) x 0.85 x 2.039e12 B/s =
    # 57.53e9 B; less 15.009e9 B of weights, over 4096 x 131,072 B a sequence: 79.2, and
    # the activations and attention's arithmetic take one more off (77 to 79).
    fit = A.FITTED         # 1.808 ms = 32 x 13 x 0.5 us + 1.6 ms; 0.85: FITTED.bandwidth
    fixed = 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    by_hand = ((0.035 - fixed) * fit.bandwidth * 2.039e12 - 15.009e9) / (4096 * 131_072)
    fits = llm.max_batch("llama-3-8b", "A100 80GB", 4096)
    scan = [b for b in range(1, fits + 1)
            if A.decode_step_s("llama-3-8b", "A100 80GB", b, 4096) <= 0.035]
    got = A.max_batch_within("llama-3-8b", "A100 80GB", 4096, 0.035)
    assert got == max(scan) and int(by_hand) - 2 <= got <= int(by_hand)
    # The ceiling's search is llm.max_batch_within's.
    assert A.max_batch_within("llama-3-8b", "A100 80GB", 4096, 0.035, achievable=False) == \
        llm.max_batch_within("llama-3-8b", "A100 80GB", 4096, 0.035)
    # A loose objective: memory decides. One shorter than the 1.8 ms fixed cost: none.
    assert A.max_batch_within("llama-3-8b", "A100 80GB", 4096, 10.0) == fits
    assert A.max_batch_within("llama-3-8b", "A100 80GB", 4096, 1e-3) == 0
    # Weights that do not fit (Llama-3-70B, 141e9 B in fp16, on a 16 GB T4): none.
    assert A.max_batch_within("llama-3-70b", "T4", 1024, 1.0) == 0


@pytest.mark.parametrize("args, kw, error, words", [
    ((4096, -1.0), {}, ValueError, "tpot_s"),
    ((4096, "fast"), {}, TypeError, "tpot_s"),
    ((0, 0.035), {}, ValueError, "context"),
    ((4096, 0.035), {"achievable": "yes"}, TypeError, "achievable"),
])
def test_max_batch_within_bad_input(args, kw, error, words):
    with pytest.raises(error, match=words):
        A.max_batch_within("llama-3-8b", "A100 80GB", *args, **kw)


def test_measured_all_to_all_divides_the_ceiling_by_deepeps_fraction():
    from gpuinfer.predict import expert_parallel as E

    # DeepEP's EP8 low-latency dispatch: 77 us for DeepSeek-V3's 128 tokens a GPU; the
    # ceiling moves its bytes over NVLink 4 (all_to_all_s), so the fraction is the
    # ceiling over 77 us (the chapter's table: 0.28).
    a2a = E.moe_all_to_all_bytes("deepseek-v3", 128, 8)
    ceil = E.all_to_all_s(a2a["dispatch_sent_bytes"], 8, device_links.get_interconnect("NVLink 4"))
    d, c = E.deepep_fraction(8)
    assert d == pytest.approx(ceil / 77e-6, rel=1e-12) and 0.27 < d < 0.29
    assert E.deepep_fraction(4) == E.deepep_fraction(8)  # EP8 stands in below 8
    assert E.deepep_fraction(100) == E.deepep_fraction(64)
    # The step: the same rows, each all-to-all over its fraction; the default keeps the
    # ceiling, and an Efficiency at the ceiling with "measured" is no longer the ceiling.
    measured = dataclasses.replace(A.FITTED, all_to_all="measured")
    kw = dict(batch=256, context=4096, dtype="fp8", attention="dp")
    r0 = E.ep_decode_breakdown("qwen3-235b-a22b", "H200", 8, achievable=A.FITTED, **kw)
    r1 = E.ep_decode_breakdown("qwen3-235b-a22b", "H200", 8, achievable=measured, **kw)
    assert r1["dispatch_s"] == pytest.approx(r0["dispatch_s"] / d, rel=1e-12)
    assert r1["combine_s"] == pytest.approx(r0["combine_s"] / c, rel=1e-12)
    assert r1["attention_s"] == r0["attention_s"] and r1["experts_s"] == r0["experts_s"]
    assert A.FITTED.all_to_all == "link"
    assert not dataclasses.replace(A.CEILING, all_to_all="measured").is_ceiling
    with pytest.raises(ValueError, match="all_to_all"):
        dataclasses.replace(A.FITTED, all_to_all="fast")

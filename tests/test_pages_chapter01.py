"""What `course.pages.chapter01_roofline` computes for chapter 1, reached by hand: the
catalogue's ridge points, the T4's practical ridge, the decode step's bytes, the weight
matmuls' intensity and where they turn compute-bound, the problems' numbers."""

import math

import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.course.exercises import chapter01_roofline as roofline_exercises
from gpuinfer.course.exercises import get
from gpuinfer.course.pages import chapter01_roofline as page
from gpuinfer.measure import reference
from gpuinfer.predict import achievable, architectures, llm, roofline, validation


def test_ridge_points_are_dense_peak_over_bandwidth():
    v = page.ridge_points()
    # T4: 65e12 FLOP/s / 320e9 B/s = 203.125; A100: 312e12 / 2.039e12 = 153.0, its sparse
    # figure (624 TFLOP/s, 2:4 sparsity) twice that; H100 SXM: 989e12 / 3.35e12 = 295.2;
    # H200 (the same peak, 4.8e12 B/s): 206.0.
    assert v["t4_ridge"] == pytest.approx(203.125)
    assert (v["t4_peak_tflops"], v["a100_peak_tflops"]) == (65, 312)   # the dense columns
    assert v["a100_ridge"] == pytest.approx(153.0, abs=0.1)
    assert v["a100_sparse_ridge"] == pytest.approx(2 * 153.0, abs=0.2)
    assert v["a100_sparse_tflops"] == pytest.approx(624)
    assert v["h100_ridge"] == pytest.approx(295.2, abs=0.1)
    assert v["h200_ridge"] == pytest.approx(206.0, abs=0.1)


def test_t4_practical_ridge_by_hand():
    v = page.t4_practical_ridge()
    # Bandwidth 75-90% of 320 GB/s: 240 to 288 GB/s. Lowest ridge: the forum's 24 TFLOP/s
    # over 288 GB/s = 83.3 FLOP/byte (0.41 of 203.1); highest: the best short runs'
    # 41.91 TFLOP/s over 240 GB/s = 174.6 (0.86).
    assert (v["t4_bw_low_gbs"], v["t4_bw_high_gbs"]) == pytest.approx((240, 288))
    assert v["t4_sustained_ridge"] == pytest.approx(24e12 / 288e9)
    assert v["t4_best_ridge"] == pytest.approx(v["t4_best_tflops"] * 1e12 / 240e9)
    assert v["t4_ridge_low_frac"] == pytest.approx(83.33 / 203.125, rel=1e-3)
    # Tensor cores at the 585 MHz base clock: 65 x 585 / 1590 = 23.9 TFLOP/s; at MLPerf's
    # 900 MHz: 65 x 900 / 1590 = 36.8.
    assert v["t4_base_tflops"] == pytest.approx(23.92, abs=0.01)
    assert v["t4_mlperf_tflops"] == pytest.approx(36.79, abs=0.01)


def test_reached_ceilings_by_hand():
    v = page.reached_ceilings()
    # gpt-fast's A100 read 1,700 GB/s of its 2,039: 83.4%. The best A100 matmul, bf16 at
    # 271.2 TFLOP/s, is 86.9% of 312; over 1.7 TB/s it gives a ridge of 159.5 FLOP/byte.
    assert v["a100_bw_reached_pct"] == pytest.approx(100 * 1700 / 2039)
    assert v["a100_mamf_pct"] == pytest.approx(100 * 271.2 / 312)
    assert v["a100_ridge_reached"] == pytest.approx(271.2e12 / 1.7e12)


def test_each_halving_of_the_format_doubles_the_ridge():
    # The peak doubles from fp16 to fp8 (and to fp4 on the B200) at the same bandwidth;
    # Blackwell Ultra's 4-bit rate is three times its fp8 one.
    for name in ("B200", "B300", "GB200", "GB300", "MI355X"):
        a = hardware.get(name)
        assert a.ridge_point("fp8") / a.ridge_point("fp16") == pytest.approx(2, abs=0.01)
    v = page.format_ridges()
    assert v["b200_fp4_ridge"] / v["b200_fp8_ridge"] == pytest.approx(2, abs=0.01)
    assert v["b300_fp4_over_fp8"] == pytest.approx(3, abs=0.01)
    assert v["gb300_fp4_ridge"] / v["gb300_fp8_ridge"] == pytest.approx(3, abs=0.01)


@pytest.mark.parametrize("fmt", ["fp16", "fp8_e4m3", "nvfp4"])
def test_a_lower_format_turns_compute_bound_near_the_fp16_ridge_batch(fmt):
    # Weights and activations in the same format: the bytes halve as the peak doubles, so
    # 2B FLOP / (bytes a weight) reaches peak / bandwidth at B ~ the fp16 ridge (292 on a
    # B200), a little above it for the activations' bytes.
    b = llm.compute_bound_batch("llama-3-70b", "B200", fmt, compute_dtype=fmt)
    assert 0.9 < b / hardware.get("B200").ridge_point("fp16") < 1.3


def _choice_table():
    """The page's platform table, as chapter 1 builds it (three parts suffice here)."""
    kw = page.CHOICE_KW
    rows = {}
    for name in ("MI355X", "MI300X", "H200", "B200"):
        b = achievable.max_batch_within("llama-3-70b", name, 4096, 0.030, **kw)
        t = achievable.decode_tokens_per_s("llama-3-70b", name, int(b), 4096, **kw)
        lo, hi = validation.interval(t, "dense throughput")
        rows[name] = {"batch within 30 ms": b, "tokens/s per GPU": t, "80% low": lo,
                      "80% high": hi, "ceiling tokens/s": 0.0}
    return pd.DataFrame(rows).T


def test_platform_choice_ranges_are_the_regimes_ratios_times_the_speed():
    table = _choice_table()
    v = page.platform_choice(table)
    lo, hi = validation.interval(1.0, "dense throughput")
    # The interval scales with the prediction: MI300X's range is lo and hi x its tokens/s.
    assert v["ch_mi300x_lo"] == pytest.approx(lo * v["ch_mi300x_tps"])
    assert v["ch_mi300x_hi"] == pytest.approx(hi * v["ch_mi300x_tps"])
    assert v["ch_mi355x_lo"] == pytest.approx(lo * v["ch_mi355x_tps"])
    # At 8 TB/s instead of 7.7 the B200 reads 4% faster, so it serves more than at 7.7.
    assert v["ch_b200_8tb_tps"] > v["ch_b200_tps"]
    assert v["ch_bw_frac"] == achievable.FITTED.bandwidth
    # The MI300X's rows among the dense throughput ones: counted, in words.
    n_amd = int((page.dense_throughput_rows()["accelerator"] == "MI300X").sum())
    assert v["ch_mi300x_tput_rows"].endswith("throughput rows" if n_amd > 1 else "throughput row")
    # Each verdict branch: an order inside a range speaks of the ratio, not a coin toss.
    flip, hold = {"flips": True}, {"flips": False}
    assert "their ratio less so" in page._orders_verdict(flip, hold)
    assert page._orders_verdict(hold, hold).endswith("both orders hold within the model's error")


def test_the_dense_throughput_range_rests_on_its_rows():
    dense = page.dense_throughput_rows()
    trt = dense["engine"] == "TensorRT-LLM"
    # TensorRT-LLM's rows are NVIDIA's; the rest are vLLM's and SGLang's.
    assert not dense.loc[trt, "accelerator"].str.startswith("MI").any()
    assert set(dense.loc[~trt, "engine"]) == {"vLLM", "SGLang"}
    # The regime's interval is the interval over these rows alone.
    assert validation.interval(1.0, "all", errors=dense)[0] == pytest.approx(
        validation.interval(1.0, "dense throughput")[0], abs=1e-12)


def test_weight_read_by_hand():
    v = page.weight_read(7e9, 2, 2e12)
    # 7e9 x 2 B = 14 GB; 14e9 / 2e12 = 7 ms; 1 / 7 ms = 142.9 tokens/s; 16 share each read.
    assert v["seed_weight_gb"] == pytest.approx(14)
    assert v["seed_step_ms"] == pytest.approx(7)
    assert v["seed_tps_b1"] == pytest.approx(1e3 / 7)
    assert v["seed_tps_b16"] == pytest.approx(16e3 / 7)


def test_mixtral_step_reads_the_experts_its_tokens_touch():
    v = page.moe_step_bytes()
    # 8 experts, 2 a token: a batch of 8 touches 8 (1 - (6/8)^8) = 7.20 a layer on average.
    assert (v["mix_e"], v["mix_k"]) == (8, 2)
    assert v["mix_touch_b8"] == pytest.approx(8 * (1 - 0.75**8), rel=1e-3)
    # Batch 1 reads 2 of 8 experts plus attention: well under a third of the weights.
    assert v["mix_b1_gb"] < 0.3 * v["mix_total_gb"]


def test_step_table_by_hand():
    v = page.step_table()
    # The ceiling is one over the step; the embedding gathers one row of 4096 fp16 values
    # (8,192 B read) and writes it as the activation (8,192 B): 16.384 kB, against the
    # table's 32,000 x 4,096 x 2 B = 262.1 MB.
    assert v["a100_ceiling"] == pytest.approx(1e3 / v["step_ms"])
    assert v["embed_row_kb"] == pytest.approx(2 * 8.192)
    assert v["embed_table_mb"] == pytest.approx(262.144)
    # Every parameter read once: 2.039e12 / (6.738e9 x 2) = 151.3 tokens/s.
    assert v["a100_weight_read_ceiling"] == pytest.approx(2.039e12 / (6738415616 * 2))


def test_gpt_fast_anchor_by_hand():
    v = page.gpt_fast_anchor()
    # 104.9 tokens/s over the ceiling; at 1.7 of 2.039 TB/s the ceiling is 83.4% as high.
    ceiling = llm.decode_ceiling("llama-2-7b", "A100 80GB")
    assert v["gpt_fast_pct"] == pytest.approx(100 * 104.9 / ceiling)
    assert v["a100_reached_ceiling"] == pytest.approx(ceiling * 1700 / 2039)
    assert v["gpt_fast_reached_pct"] == pytest.approx(100 * 104.9 / (ceiling * 1700 / 2039))
    assert v["gf_step_ms"] == pytest.approx(1e3 / 104.9)
    assert v["gf_eager_overhead_ms"] == pytest.approx(v["gf_eager_step_ms"] - 1e3 / ceiling)


@pytest.mark.parametrize("fmt, flops_per_weight_byte", [("fp16", 2 / 2), ("int8", 2 / 1),
                                                        ("int4", 2 / 0.5625)])
def test_weight_matmul_intensity_is_about_the_batch(fmt, flops_per_weight_byte):
    # 2B FLOPs a weight over its bytes: B for fp16, 2B for int8, 3.56B for int4 with its
    # scales; the activations' bytes take up to a few percent off at batch 64.
    table = page.linear_intensity()
    for b in (1, 16, 64):
        assert table.loc[b, fmt] == pytest.approx(flops_per_weight_byte * b,
                                                  rel=0.01 if b == 1 else 0.1)
    assert table.loc[64, fmt] < flops_per_weight_byte * 64


def test_intensity_curves_are_the_table_at_the_figures_batches():
    # The figure's curves and the page's table are the same rows: at batch 1 and 64 they agree.
    curves = page.intensity_curves([1.0, 64.0])
    assert list(curves.index) == [1, 64]
    assert curves.loc[64, "int8"] == page.linear_intensity(batches=(64,)).loc[64, "int8"]


def test_batch1_share_of_the_peak():
    v = page.batch1_intensity()
    # About 1 FLOP/byte x 3.35e12 B/s = 3.35 TFLOP/s of 989: 0.34% of an H100.
    assert v["h100_fraction_b1_pct"] == pytest.approx(100 * v["i_b1_fp16"] * 3.35e12 / 989e12)
    assert v["int4_factor"] == pytest.approx(2 / 0.5625)


def test_compute_bound_batches_follow_the_ridge():
    v = page.compute_bound_batches()
    for key, name in (("t4", "T4"), ("a100", "A100 80GB"), ("h100", "H100 SXM")):
        ridge = hardware.get(name).ridge_point("fp16")
        # fp16: just above the ridge (the activations add bytes); int8 weights half of it;
        # int4 0.5625 / 2 of it.
        assert ridge < v[f"cb_{key}_fp16"] < 1.15 * ridge
        assert v[f"cb_{key}_int8"] / v[f"cb_{key}_fp16"] == pytest.approx(0.5, abs=0.03)
        assert v[f"cb_{key}_int4"] / v[f"cb_{key}_fp16"] == pytest.approx(0.5625 / 2, rel=0.05)
    # A mixture of experts: each expert sees k/E of the tokens, so about E/k x the ridge
    # (Mixtral 8/2 = 4, DeepSeek-V3 256/8 = 32).
    h100_ridge = hardware.get("H100 SXM").ridge_point("bf16")
    assert (v["mix_ek"], v["dsv3_ek"]) == (4, 32)
    assert v["cb_h100_mixtral"] > 0.9 * 4 * h100_ridge
    assert v["cb_h100_dsv3"] > 0.9 * 32 * h100_ridge


def test_t4_at_scales_every_peak():
    t4 = page.t4_at(32.5e12, 160e9)
    # Half the fp16 rate and half the bandwidth: the same ridge, every format halved.
    assert t4.peak_flops("fp16") == pytest.approx(32.5e12)
    assert t4.ridge_point("fp16") == pytest.approx(203.125)


def test_kv_fit_by_hand():
    v = page.kv_fit()
    # 2 (K, V) x 32 layers x 32 KV heads x 128 x 2 B = 524,288 B = 0.5 MiB a token.
    assert v["kv_per_token_mib"] == 0.5
    # (85.10e9 - 2**30 - 13.21e9 of weights) / (1024 x 524,288 B) sequences, rounded down.
    free = hardware.get("A100 80GB").memory_bytes - 2**30 - llm.decode_step_bytes("llama-2-7b", 1, 0)
    assert v["fits_1k_fp16"] == pytest.approx(math.floor(free / (1024 * 524288)), abs=1)


def test_matmul_shapes_by_hand():
    shapes = {"b1": 1, "b16": 16, "b256": 256, "p2k": 2048, "p16k": 8 * 2048}
    table = pd.DataFrame({"FLOP/byte": [roofline.matmul_intensity(m, 4096, 4096, "fp16")
                                        for m in shapes.values()]}, index=list(shapes))
    v = page.matmul_shape_values(table)
    # 2 m k n / (2 (m k + k n + m n)): m = 1: 4096 / 4098 = 0.9995; m = 2048:
    # 2048 x 4096 / 8192 = 1024; m -> infinity: k n / (k + n) = 2048.
    assert v["i_decode_b1"] == pytest.approx(4096 / 4098)
    assert v["i_prefill_2k"] == pytest.approx(1024)
    assert v["i_mm_limit"] == pytest.approx(2048, abs=0.01)
    assert table["FLOP/byte"].is_monotonic_increasing


def test_problem_values_by_hand():
    assert page.problems_answered()
    v = page.problem_values()
    # L40S: 362e12 / 864e9 = 419.0 FLOP/byte; its sparse figure twice that.
    assert v["ans_roofline_ridge_l40s"] == pytest.approx(419, abs=0.5)
    assert v["l40s_sparse_ridge"] == pytest.approx(733e12 / 864e9)     # 848, not 2 x 419
    # H200 with int4: 206.0 x 0.5625 / 2 = 57.9 sequences by the rule of thumb.
    assert v["cb_13b_h200_rule"] == pytest.approx(206.04 * 0.5625 / 2, rel=1e-3)


def test_decision_by_hand():
    v = page.decision()
    table = roofline_exercises.decision_table()
    # Llama-2-7B's weights but the gathered embedding table, one byte each in int8:
    # 6.738e9 - 0.131e9 = 6.61e9 B.
    assert v["dec_bytes_int8_gb"] == pytest.approx(6.61, rel=0.005)
    assert (table["tokens_per_s"] < table["ceiling_tokens_per_s"]).all()
    # The answer: the T4's price an hour over 3,600 x its tokens/s, per million tokens.
    assert v["dec_t4_int8_usd"] == pytest.approx(
        v["dec_t4_price"] / (3600 * v["dec_t4_int8_tps"]) * 1e6)
    assert get("roofline-decision-batch1").answer() == pytest.approx(v["dec_t4_int8_usd"])
    # The margin: tokens/s over the objective; the shortfall that would miss it.
    margin = v["dec_t4_int8_tps"] / v["slo_tps"]
    assert v["dec_shortfall_pct"] == pytest.approx(100 * (1 - 1 / margin))
    # The left-out error against that shortfall, as a ratio the sentence prints.
    # 44.9% left out against a 22.3% shortfall: 2.0 times, not "several".
    assert v["dec_loso_b1_median"] == pytest.approx(44.9, abs=0.05)
    assert v["dec_shortfall_pct"] == pytest.approx(22.3, abs=0.05)
    assert v["dec_loso_clause"] == "2.0 times that shortfall"
    unc = roofline_exercises.decision_uncertainty(table)
    assert unc["best"] == ("T4", "int8") and unc["cost_value"] == pytest.approx(v["dec_t4_int8_usd"])
    assert v["gf_int8_speedup"] == pytest.approx(155.6 / 104.9)
    assert reference.gpt_fast_fraction("int8") < reference.gpt_fast_fraction("bf16")


def test_the_batch1_range_rests_on_two_sources_neither_a_t4():
    rows = page.batch1_rows()
    assert set(rows["source"]) == {"gptfast2023", "oraclemi300x2024"}
    assert set(rows.loc[rows["source"] == "gptfast2023", "accelerator"]) == {"A100 80GB"}
    assert set(rows.loc[rows["source"] == "oraclemi300x2024", "accelerator"]) == {"MI300X"}
    assert validation.interval(1.0, "all", errors=rows)[0] == pytest.approx(
        validation.interval(1.0, roofline_exercises.DECISION_REGIME)[0], abs=1e-12)
    assert "two sources" in page.decision()["dec_b1_sources"]


def test_architecture_is_the_one_the_page_reads():
    # Llama-2-7B: 32 layers, 32 KV heads of 128, d_model 4096 (its config).
    m = architectures.get("llama-2-7b")
    assert (m.n_layers, m.n_kv_heads, m.head_dim, m.d_model) == (32, 32, 128, 4096)

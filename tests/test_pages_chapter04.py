"""course.pages.chapter04_quantisation: what chapter 4's figures and prose are computed
from, against the formats' definitions, the catalogue's peaks and hand arithmetic (no
model evaluation: the real-model section is tested on its fallback branch)."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

from gpuinfer import dtypes, hardware
from gpuinfer.predict import llm, step_model
from gpuinfer.measure import quant, quant_examples, reference
from gpuinfer.course.pages import chapter04_quantisation as page

matplotlib.use("Agg")


def test_format_values_are_the_formats_definitions():
    v = page.format_values()
    assert v["fp16_max"] == 65504.0               # (2 - 2^-10) x 2^15
    assert v["e4m3_max"] == 448.0                 # OCP FP8: 1.75 x 2^8 (S.1111.111 is NaN)
    assert v["fp16_eps"] == 2.0 ** -10 and v["bf16_eps"] == 2.0 ** -7   # mantissa bits
    assert v["fp16_digits"] == pytest.approx(10 * np.log10(2))          # about 3 digits
    # E2M1's positive values 0.5, 1, 1.5, 2, 3, 4, 6: seven of them.
    assert v["n_e2m1"] == 7.0 and v["e2m1_max"] == 6.0
    # A block of 32 shares an 8-bit scale (MXFP4: 4 + 8/32 = 4.25 bits); NVFP4 blocks of
    # 16 share an 8-bit scale (4 + 8/16 = 4.5); int4 g32 with an fp16 scale: 4 + 16/32.
    assert v["mxfp4_bits"] == 4.25 and v["nvfp4_bits"] == 4.5 and v["int4_bits"] == 4.5
    assert v["int4_bytes_ratio"] == pytest.approx(2 / 0.5625)


def _ceilings():
    published = reference.GPT_FAST_TOKENS_PER_S
    rows = {"bf16": (2.0, 100.0), "int8": (1.0, 200.0), "int4-g32-zp": (0.625, 320.0)}
    t = pd.DataFrame({"B/weight": {k: b for k, (b, _) in rows.items()},
                      "ceiling (tok/s)": {k: c for k, (_, c) in rows.items()},
                      "gpt-fast (tok/s)": {"bf16": published["bf16"], "int8": published["int8"],
                                           "int4-g32-zp": published["int4"]}})
    t["fraction"] = t["gpt-fast (tok/s)"] / t["ceiling (tok/s)"]
    return t


def test_ceiling_values_and_gpt_fasts_published_speedups():
    v = page.ceiling_values(_ceilings(), "A100 80GB")
    # gpt-fast's README on an A100: 104.9, 155.6 and 196.8 tokens/s: 1.48x and 1.88x.
    assert v["speedup_meas_int8"] == pytest.approx(1.48, abs=0.01)
    assert v["speedup_meas_int4"] == pytest.approx(1.88, abs=0.01)
    assert v["speedup_ceil_int4"] == pytest.approx(3.2)       # 320 / 100
    assert v["frac_bf16_pct"] == pytest.approx(104.9)         # 104.9 / 100
    assert v["int4_bytes"] == 0.625
    # Group size g with an fp16 scale: 0.5 + 2 / g bytes; a zero point adds another 2 / g.
    assert v["int4_g128_bpw"] == pytest.approx(0.5 + 2 / 128)
    assert v["int4_g128_zp_bpw"] == pytest.approx(0.5 + 4 / 128)
    assert v["int4_g64_factor"] == pytest.approx(2 / (0.5 + 2 / 64))
    assert v["a100_bw_gbs"] == pytest.approx(hardware.get("A100 80GB").bandwidth / 1e9)


def test_sqnr_of_a_full_scale_sine_is_6_02_b_plus_1_76():
    t = np.arange(100_000)
    sine = np.sin(2 * np.pi * t / (7 * np.pi))
    bits = [4, 6, 8, 10]
    sqnr = pd.DataFrame({"measured (dB)": [quant.sqnr_db(sine, quant.fake_quantize(sine, bits=b))
                                           for b in bits],
                         "6.02 b + 1.76 (dB)": [6.02 * b + 1.76 for b in bits]},
                        index=bits)
    assert np.allclose(sqnr.iloc[1:, 0], sqnr.iloc[1:, 1], atol=0.15)
    v = page.sqnr_values(sqnr)
    # The symmetric 4-bit grid has 14 steps over 2A, not 16: it loses 20 log10(16/14) dB.
    assert v["sqnr4_grid_loss"] == pytest.approx(1.16, abs=0.01)
    assert v["sqnr4_ideal"] - v["sqnr4_grid_loss"] < v["sqnr4_meas"] < v["sqnr4_ideal"]
    assert v["sqnr4_restricted"] == pytest.approx(10 * np.log10(6 * 49))


def test_weight_values_and_the_extra_bits_of_groups():
    e = pd.Series({"int8 per-tensor": 30.0, "int8 per-channel": 38.0,
                   "int4 per-channel": 15.0, "int4 groups of 32": 19.0})
    v = page.weight_values(e, np.zeros((512, 256)))
    assert v["w_gain_db"] == 8.0 and v["w_row"] == 256.0
    assert v["g32_extra_bits"] == pytest.approx(0.5 - 1 / 16)   # 16/32 - 16/256


def test_table_readers_name_each_cell():
    table = pd.DataFrame({"Gaussian (dB)": [1.0, 2.0], "heavy tails (dB)": [3.0, 4.0]},
                         index=["int8", "nvfp4"])
    assert page.format_sqnr_values(table) == {"sq_g_int8": 1.0, "sq_h_int8": 3.0,
                                              "sq_g_nvfp4": 2.0, "sq_h_nvfp4": 4.0}
    calib = pd.DataFrame({"clip at": [60.0], "ordinary (dB)": [20.0], "spikes (dB)": [30.0],
                          "all (dB)": [25.0]}, index=["minmax"])
    v = page.calibration_values(calib, np.array([True, False, False, False]))
    assert (v["spike_count"], v["held_out_values"], v["cal_minmax_spk"]) == (1.0, 4.0, 30.0)
    names = ["W8A16 (weight-only)", "W8A8 static", "W8A8 static + SmoothQuant",
             "W8A8 per-token", "W8A8 per-token + SmoothQuant", "FP8 W8A8 per-token"]
    v = page.smoothquant_values(pd.Series([40.0, 20.0, 30.0, 25.0, 29.0, 27.0], index=names))
    assert v["sq_st_gain"] == 10.0 and v["sq_fp8"] == 27.0
    kv_error = pd.DataFrame({"keys (dB)": [20.0, 30.0, 25.0], "values (dB)": [35.0, 38.0, 25.5]},
                            index=["int8 per-tensor", "int8 per-token", "fp8_e4m3 per-tensor"])
    v = page.kv_error_values(kv_error)
    assert v["kve_i8t_k"] == 20.0 and v["kve_i8t_v"] == 35.0 and v["kve_f8_v"] == 25.5
    rotation = pd.DataFrame({"max / RMS a token": [8.0, 3.0], "int4 per token (dB)": [10.0, 18.0],
                             "W4A4 layer output (dB)": [9.0, 14.0]},
                            index=["as is", "Hadamard-rotated"])
    v = page.rotation_values(rotation)
    assert v["rot_gain"] == 8.0 and v["rot_crest_r"] == 3.0
    assert v["mxfp4_bits_gptoss"] == 4.25


def test_the_rotation_is_exact_before_quantisation():
    x = quant_examples.example_activations(64, seed=2)
    w = quant_examples.example_weights()
    assert np.allclose(quant.rotate(x, seed=0) @ quant.rotate(w, seed=0).T, x @ w.T)


def test_language_model_values_without_the_model():
    w = quant_examples.example_weights()
    v = page.language_model_values(None, None, w)
    assert v["lm_findings"].startswith("*Not measured here")
    assert v["g128_db"] == pytest.approx(quant.sqnr_db(w, quant.fake_quantize(
        w, bits=4, group_size=128)))
    assert v["pub_g128_lo"] <= min(v["pub_awq_lo"], v["pub_gptq_lo"])
    assert v["pub_g128_hi"] >= max(v["pub_awq_hi"], v["pub_gptq_hi"])


def test_fp8_halves_llama_3_8bs_kv_cache():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes a token in fp16.
    assert step_model.kv_cache_bytes_per_token("llama-3-8b", "fp16") == 2 * 32 * 8 * 128 * 2
    assert step_model.kv_cache_bytes_per_token("llama-3-8b", "fp8_e4m3") == 2 * 32 * 8 * 128


def test_kv_cache_values_ranges_and_sentence():
    kv = pd.DataFrame({"max batch": [40.0, 80.0], "tok/s at batch 32": [1000.0, 1500.0],
                       "tok/s at max batch": [1100.0, 2200.0],
                       "achievable at 32": [700.0, 1000.0], "achievable at max": [800.0, 1500.0]},
                      index=["fp16", "fp8_e4m3"])
    v = page.kv_cache_values(kv)
    assert v["kv_a32_fp8_lo"] < 1000.0 < v["kv_a32_fp8_hi"]
    assert v["kv_amax_fp16_lo"] < 800.0 < v["kv_amax_fp16_hi"]
    assert v["kv_mb_fp8_e4m3"] == 80.0 and v["kv_a32_fp16"] == 700.0
    assert "range" in v["kv_flip_text"]
    # 1000 vs 700 tokens/s at batch 32: a 1.43x gain inside the regime's spread, so the
    # ranges overlap and the sentence speaks of the ratio, not of a coin toss.
    assert v["kv_a32_fp8_lo"] < v["kv_a32_fp16_hi"]
    assert "their ratio less so" in v["kv_flip_text"]


def test_weight_only_knees_follow_the_bytes_a_weight():
    # A weight-only matmul does 2 FLOPs a weight a token over b bytes a weight: it turns
    # compute-bound at about ridge x b / 2 tokens: int4 g32 (b = 0.5625) near 0.28 x the
    # ridge, int8 (b = 1) near 0.5 x. FP8 W8A8 halves the bytes and doubles the peak: the
    # same knee as fp16.
    model, device = "llama-3-8b", "H100 SXM"
    ridge = hardware.get(device).ridge_point("fp16")
    variants = {"fp16": dict(dtype="fp16"), "W8A16 (int8)": dict(dtype="int8"),
                "W4A16 (int4 g32)": dict(dtype="int4"),
                "FP8 W8A8": dict(dtype="fp8_e4m3", compute_dtype="fp8")}
    knee = {name: llm.compute_bound_batch(model, device, **kw) for name, kw in variants.items()}
    assert 0.15 < knee["W4A16 (int4 g32)"] / ridge < 0.4
    assert 0.35 < knee["W8A16 (int8)"] / ridge < 0.65
    assert knee["FP8 W8A8"] == pytest.approx(knee["fp16"], rel=0.05)
    batch = np.array([1, 512])
    step = {name: llm.decode_step_s(model, device, batch, 512, **kw)
            for name, kw in variants.items()}
    speedup = pd.DataFrame({name: step["fp16"] / t for name, t in step.items() if name != "fp16"},
                           index=batch)
    at256 = page.at_batch(model, device, 256, 512, variants)
    assert at256["roofline"]["fp16"] == 1.0 and at256["achievable"]["fp16"] == 1.0
    v = page.weight_only_values(speedup, knee, at256, device)
    # Batch 1 reads only weights, near enough: 2 / 0.5625 = 3.6x for int4, 2x for int8.
    assert 3 < v["ws_b1_int4"] < 2 / 0.5625 and 1.8 < v["ws_b1_int8"] < 2
    assert v["ws_bmax"] == 512.0 and v["ridge_h100"] == pytest.approx(989e12 / 3.35e12)
    assert v["ach_b256_fp8_text"] and v["ach_b256_int4_text"]
    assert "inside the model's error" not in v["ach_b256_fp8_text"] + v["ach_b256_int4_text"]
    fig = page.speedup_figure(speedup, knee)
    assert fig.axes[0].get_xscale() == "log"
    matplotlib.pyplot.close(fig)


def test_peak_ratios_in_the_catalogue():
    # Tensor-core fp16 is twice tf32 on the A100 and H100, int8 twice fp16 on all three;
    # the T4 has no tf32; the A100 has no fp8.
    for name in ("A100 80GB", "H100 SXM"):
        acc = hardware.get(name)
        assert acc.peak_flops("fp16") / acc.peaks["tf32"] == pytest.approx(2, rel=0.01)
    for name in ("T4", "A100 80GB", "H100 SXM"):
        acc = hardware.get(name)
        assert acc.peak_flops("int8") / acc.peak_flops("fp16") == pytest.approx(2, rel=0.01)
    assert "tf32" not in hardware.get("T4").peaks and "fp8" not in hardware.get("A100 80GB").peaks


def test_problem_values_on_the_decision_table():
    table = page.decision_table()
    v = page.problem_values(table)
    assert v["dec_bar_tps"] == pytest.approx(1.3 * table.loc["bf16", "tokens_per_s"])
    assert v["dec_fp8_tps_lo"] < table.loc["W8A8 fp8", "tokens_per_s"] < v["dec_fp8_tps_hi"]
    assert v["dense_ratio_lo"] < 1 < v["dense_ratio_hi"]
    # Llama-3-8B's KV cache in fp8: 65,536 bytes a token (see above).
    assert v["llama3_kv_fp8"] == 65536
    assert v["dec_bf16_x"] == pytest.approx(1.0)
    assert v["dec_int4_gb"] < v["dec_int8_gb"] < v["dec_bf16_gb"]


def test_figures_draw():
    t = _ceilings()
    for fig in (page.gap_figure(), page.ceiling_figure(t)):
        ax = fig.axes[0]
        assert ax.get_ylabel() and ax.get_title()
        matplotlib.pyplot.close(fig)
    assert dtypes.bytes_per_element("int4") == 0.5625

"""What `course.pages.chapter02_decode_kv_cache` computes for chapter 2, reached by hand:
KV bytes a token, where the cache overtakes the weights, what memory holds, attention's and
MLA's intensity, where attention takes over, gpt-fast's MBU, the problems and the decision."""

import dataclasses

import pytest

from gpuinfer import dtypes, hardware
from gpuinfer.course.exercises import chapter02_decode_kv_cache as decode_exercises
from gpuinfer.course.exercises import get
from gpuinfer.course.pages import chapter02_decode_kv_cache as page
from gpuinfer.predict import achievable, architectures, llm, step_model

MODEL, GPU = page.MODEL, page.GPU
# Llama-2-7B caches 2 (K, V) x 32 layers x 32 KV heads x 128 x 2 B = 524,288 B a token;
# Llama-3-8B 2 x 32 x 8 x 128 x 2 = 131,072 B.
KV_L2, KV_L3 = 524_288, 131_072


@pytest.mark.parametrize("gpu", ["T4", "A100 80GB", "H200"])
def test_batch1_decode_is_memory_bound_at_every_gpu(gpu):
    assert (llm.decode_step_breakdown(MODEL, gpu, context=2048)["bound"] == "memory").all()


def test_phase_values_by_hand():
    v = page.phase_values(2048)
    # A decoded token over a prefilled one: the TPOT over the TTFT's share of one token.
    assert v["ph_ratio"] == pytest.approx(v["ph_tpot_ms"] / (v["ph_ttft_ms"] / 2048))
    assert v["ph_prefill_us"] == pytest.approx(1e3 * v["ph_ttft_ms"] / 2048)
    assert v["ph_tpot_ms"] == pytest.approx(1e3 * llm.decode_step_s(MODEL, GPU, 1, 2048))


def test_batch1_step_by_hand():
    v = page.batch1_step(2048)
    # Attention reads 2,048 x 524,288 B = 1,073.7 MB of cache (plus a few kB of query and
    # output): about 1.07 of the step's ~14.3 GB, 7.5% of its time.
    assert v["b1_attn_mb"] == pytest.approx(2048 * KV_L2 / 1e6, rel=0.01)
    assert 3 < v["b1_attn_share_pct"] < 15
    assert v["b1_tps"] == pytest.approx(1e3 / v["b1_step_ms"])
    assert v["b1_step_ms"] == pytest.approx(1e3 * llm.decode_step_s(MODEL, GPU, 1, 2048), abs=1e-9)


def test_kv_crossover_by_hand():
    v = page.kv_crossover(16)
    # Llama-2-7B: ~13.2e9 B of weights / (16 x 524,288 B) = ~1,570 tokens. Llama-3-8B has a
    # quarter of the cache and 15.0 / 13.2 the weights: 4 x 1.14 = 4.5 times later.
    assert 1400 < v["cross_l2"] < 1700
    assert 3.5 < v["cross_l3"] / v["cross_l2"] < 5
    assert v["cross_l2_b1"] == pytest.approx(16 * v["cross_l2"])
    assert page.crossover_context("llama-2-7b", 16) == pytest.approx(
        llm.decode_step_bytes("llama-2-7b", 16, 0) / (16 * KV_L2))


def test_kv_bytes_by_hand():
    v = page.kv_bytes(4096)
    assert (v["kv_l2_kib"], v["kv_l3_kib"]) == (512, 128)
    assert v["kv_l370_kib"] == 2 * 80 * 8 * 128 * 2 / 2**10            # 320 KiB
    assert v["kv_l2_gb_4k"] == pytest.approx(4096 * KV_L2 / 1e9)       # 2.15 GB
    # The query-head bug overstates by heads / KV heads: 32 / 8 and 64 / 8.
    assert (v["kv_l3_bug"], v["kv_l370_bug"]) == (4, 8)
    # DeepSeek-V3's MLA caches a latent of 512 and a RoPE key of 64 per layer, 61 layers,
    # bf16: 61 x 576 x 2 B = 70,272 B = 68.625 KiB.
    assert v["dsv3_kv_kib"] == pytest.approx(61 * 576 * 2 / 2**10)


def test_the_query_head_bug_is_the_group_size_for_every_dense_model():
    for name in architectures.names():
        m = architectures.get(name)
        if m.is_moe:
            continue
        wrong = step_model.kv_cache_bytes_per_token(dataclasses.replace(m, n_kv_heads=m.n_heads))
        assert wrong / step_model.kv_cache_bytes_per_token(m) == m.n_heads / m.n_kv_heads, name


@pytest.mark.parametrize("gpu", ["T4", "A100 80GB", "H200"])
@pytest.mark.parametrize("model, kv", [("llama-2-7b", KV_L2), ("llama-3-8b", KV_L3)])
def test_sequences_that_fit_by_hand(gpu, model, kv):
    # (memory - 1 GiB reserve - weights) // (4,096 x KV bytes a token), none if negative.
    free = hardware.get(gpu).memory_bytes - 2**30 - step_model.weight_bytes(model)
    assert llm.max_batch(model, gpu, 4096) == max(0, int(free // (4096 * kv)))


def test_memory_fit_by_hand():
    v = page.memory_fit()
    t4 = hardware.get("T4")
    # The T4's longest Llama-2-7B sequence: (15.84e9 - 2**30 - 13.48e9) / 524,288 B.
    c = v["t4_max_context"]
    assert llm.max_batch(MODEL, "T4", c) == 1 and llm.max_batch(MODEL, "T4", c + 1) == 0
    assert c == int((t4.memory_bytes - 2**30 - step_model.weight_bytes(MODEL)) // KV_L2)
    # vLLM's default utilisation 0.92 leaves 8% of the A100's 85.1 GB: 6.81 GB.
    assert v["vllm_unused_gb"] == pytest.approx(0.08 * 85.100068864, rel=1e-9)
    assert v["mb_a100_l2"] == 32 and v["mb_a100_l2_vllm"] < 32


def test_mla_intensity_by_hand():
    # 128 heads x (576 + 512) / 576 = 241.8 FLOP/byte; under TP8 16 heads: 30.2.
    assert step_model.mla_decode_intensity(128, 512, 64) == 128 * (576 + 512) / 576
    assert step_model.mla_decode_intensity(128, 512, 64, n_devices=8) == 16 * (576 + 512) / 576
    v = page.attention_intensity()
    # H100 SXM: 989 TFLOP/s bf16 / 3.35 TB/s = 295.2; throttled 865 / 3.35 = 258.2.
    assert v["hopper_ridge"] == pytest.approx(989 / 3.35)
    assert v["hopper_throttled_ridge"] == pytest.approx(865 / 3.35)
    assert v["mla_roof_tflops"] == pytest.approx(241.78 * 3.35, rel=1e-4)
    # FlashMLA's best, 660 TFLOP/s, stays under that roof (810): no measurement beats it.
    assert page.FLASHMLA_BEST_FLOPS < 1e12 * v["mla_roof_tflops"]


@pytest.mark.parametrize("model", ["llama-2-7b", "llama-3-8b", "llama-3-70b"])
def test_attention_intensity_is_heads_over_kv_heads_at_every_batch(model):
    # 4 H_Q d_h C FLOPs over 4 H_KV d_h C bytes per layer and sequence, whatever the batch.
    spec = architectures.get(model)
    for b in (1, 16, 256):
        got = llm.decode_step_breakdown(model, GPU, batch=b, context=1024).loc["attention", "intensity"]
        assert got == pytest.approx(spec.n_heads / spec.n_kv_heads, rel=0.02)


@pytest.mark.parametrize("context", [0, 1024, 16384])
def test_compute_bound_batch_is_the_same_at_every_context(context):
    b = int(llm.compute_bound_batch("llama-3-8b", GPU))
    at = llm.decode_step_breakdown("llama-3-8b", GPU, b, context)
    below = llm.decode_step_breakdown("llama-3-8b", GPU, b - 1, context)
    assert at.loc["linear", "bound"] == "compute" and at.loc["attention", "bound"] == "memory"
    assert below.loc["linear", "bound"] == "memory"


def test_attention_takes_over_where_the_closed_form_says():
    dominant = page.dominant_contexts()
    for gpu in dominant.columns:
        for m in dominant.index:
            # C ~ 2 N / (ridge x KV bytes a token), within 10% (activations, attention FLOPs).
            approx = 2 * architectures.get(m).n_params / (
                hardware.get(gpu).ridge_point("fp16") * step_model.kv_cache_bytes_per_token(m))
            assert dominant.loc[m, gpu] == pytest.approx(approx, rel=0.1), (m, gpu)
    # At that context, at the compute-bound batch, attention and the matmuls take as long.
    for model in ("llama-2-7b", "llama-3-8b"):
        split = page.attention_split(model, [int(round(dominant.loc[model, GPU]))])
        assert split["attention"].iloc[0] == pytest.approx(split["matmuls"].iloc[0], rel=0.02)
    v = page.attention_takeover()
    assert v["dom_l3_min"] == dominant.loc["llama-3-8b"].min()
    # Llama-3-70B's fp16 weights over the H200's bytes: 141.1 / 150.06 = 0.940.
    assert v["l370_min_utilisation"] == pytest.approx(v["l370_weights_gb"] / v["h200_mem_gb"])


def test_sum_and_overlap_agree_while_every_row_is_memory_bound():
    small = int(llm.compute_bound_batch(MODEL, GPU)) // 2
    assert (llm.decode_step_breakdown(MODEL, GPU, small, 128)["bound"] == "memory").all()
    assert llm.decode_step_s(MODEL, GPU, small, 128) == pytest.approx(
        llm.decode_step_time_overlapped(MODEL, GPU, small, 128), rel=1e-9)
    v = page.overlap_at(512, 128)
    # The step's time is the sum of its rows; tokens/s is 512 over it.
    assert v["b512_per_op"] == pytest.approx(512e3 / v["b512_sum_ms"])
    assert v["b512_gain_pct"] == pytest.approx(100 * (v["b512_sum_ms"] / v["b512_pooled_ms"] - 1))


def test_throughput_curves_run_up_to_the_batch_that_fits():
    curves = page.throughput_curves(4096, points=10)
    assert curves.index[0] == 1 and curves.index[-1] == llm.max_batch(MODEL, GPU, 4096)
    assert curves.loc[1, "summed"] == pytest.approx(llm.decode_ceiling(MODEL, GPU, 1, 4096))
    assert (curves["achievable"] < curves["summed"]).all()
    assert page.full_batch()["tps_max_4k"] == pytest.approx(curves["summed"].iloc[-1])


def test_gpt_fast_anchors_by_hand():
    v = page.gpt_fast_anchors()
    # gpt-fast's int4 keeps a bf16 scale and zero point per 32 weights: 0.5 + 4/32 = 0.625 B,
    # 2 / 0.625 = 3.2 times fewer bytes than bf16; the package's int4 (scale only) 0.5625 B.
    assert v["int4_asym_factor"] == pytest.approx(3.2)
    assert v["int4_factor"] == pytest.approx(2 / 0.5625)
    assert step_model.weight_bytes(MODEL, "int4-g32-zp") > step_model.weight_bytes(MODEL, "int4")
    # A step's bytes shrink a little less than a weight's (the activations stay bf16).
    for fmt in ("int4", "int4-g32-zp"):
        ratio = llm.decode_step_bytes(MODEL, dtype="bf16") / llm.decode_step_bytes(MODEL, dtype=fmt)
        assert ratio < 2 / dtypes.bytes_per_element(fmt) < 1.01 * ratio
    # MBU: 104.9 tokens/s x the step's bytes over 2.039 TB/s.
    assert v["gf_mbu_pct"] == pytest.approx(
        100 * 104.9 * llm.decode_step_bytes(MODEL, dtype="bf16") / 2.039e12, rel=1e-6)
    assert v["gf_int4_speedup"] == pytest.approx(196.8 / 104.9)
    # The fixed cost: FITTED's step cost + 32 layers x its kernels a layer x its gap
    # (1.6 ms + 32 x 13 x 0.5 us = 1.808 ms at today's constants).
    fit = achievable.FITTED
    fixed_s = fit.step_s + 32 * fit.kernels_per_layer * fit.kernel_gap_s
    assert v["fit_fixed_ms"] == pytest.approx(1e3 * fixed_s)
    for fmt in ("bf16", "int8", "int4"):
        assert achievable.decode_tokens_per_s(MODEL, GPU, 1, 0, fmt) < llm.decode_ceiling(MODEL, GPU, dtype=fmt)
    # The format verdict, both branches: overlapping ranges speak of the ratio, since the two
    # formats' errors on one engine and GPU move together.
    overlap = page._fmt_verdict({"flips": True, "other_low": 20.3, "other_high": 33.8})
    assert overlap.startswith("int8's, 20.3 to 33.8, overlaps it. The absolute rates are "
                              "uncertain; their ratio less so")
    below = page._fmt_verdict({"flips": False, "other_low": 20.3, "other_high": 23.8})
    assert below.endswith("lies below it: int4 stays the faster within the model's error")


def test_problem_values_by_hand():
    assert page.problems_answered()
    v = page.problem_values()
    assert v["ans_kv70"] == 2 * 80 * 8 * 128 * 2                        # 327,680 B
    assert v["ans_bug"] == 8192 * 2 * 80 * 64 * 128 * 2                 # 21.5 GB
    assert v["ans_seq_gb"] == pytest.approx(8192 * KV_L3 / 1e9)          # 1.07 GB
    # 1,600 tokens/s at batch 32: 50 steps a second of the step's bytes.
    assert v["ans_tbs"] == pytest.approx(50 * v["ans_step_gb"] / 1e3)
    assert v["ans_kv_gb"] == pytest.approx(32 * 2048 * KV_L3 / 1e9)


def test_decision_by_hand():
    v = page.decision()
    d = decode_exercises
    b = get("decode-decision-batch-tpot").answer()
    assert b == achievable.max_batch_within(d.DECISION_MODEL, d.DECISION_GPU, d.DECISION_CONTEXT,
                                            d.DECISION_TPOT_S)
    rng = d.decision_batch_range()
    assert rng["low"] <= b <= rng["high"] and rng["fits"] == v["ans_dec_fits"]
    assert rng["ceiling"] == v["ans_dec_ceil_batch"]
    # The hand rule: (35 ms - the fixed 1.808 ms) x FITTED's 0.85 of 2.039 TB/s = 57.5 GB a
    # step, less 15.0 GB of weights, over 4,096 x 131,072 B a sequence: 79.2, near the
    # model's batch.
    fit = achievable.FITTED
    fixed_s = fit.step_s + 32 * fit.kernels_per_layer * fit.kernel_gap_s
    assert v["ans_dec_rule"] == pytest.approx(
        ((35e-3 - fixed_s) * fit.bandwidth * 2.039e12 - 15.0148e9) / (4096 * KV_L3), rel=1e-4)
    assert v["ans_dec_rule"] == pytest.approx(b, rel=0.05)
    # A 512-token chunk leaves no batch within the objective.
    assert page.batch_with_chunk(512) == 0

"""Conditions and decisions chapters 5, 7 and 9 state, derived by hand."""
import pytest

from gpuinfer import dtypes, hardware
from gpuinfer.hardware import devices
from gpuinfer.hardware import measured_rates
from gpuinfer.hardware import mig_slices
from gpuinfer.predict import step_model


def test_chapter05_fusion_gpu_intermediate_exceeds_every_catalogued_l2():
    # Chapter 5's GPU run: 2**26 fp16 elements = 134,217,728 B = 128 MiB an intermediate.
    # Time follows bytes there only because no L2 holds one: the largest in the catalogue
    # is the B200's 132,644,864 B (126.5 MiB). A GPU added with a larger L2 breaks the claim.
    intermediate = 2**26 * dtypes.bytes_per_element("fp16")
    assert intermediate == 134_217_728
    l2 = {a.name: a.cache_bytes for a in map(hardware.get, devices.names())
          if a.kind == "gpu" and a.cache_bytes}
    assert max(l2, key=l2.get) == "B200" and l2["B200"] == 132_644_864
    assert all(b < intermediate for b in l2.values())


def test_chapter09_h100_memory_is_79_2_gib_as_cuda_reports_it():
    # 85,045,477,376 B / 2**30 = 79.2 GiB; the 80 GiB of HBM would be 85,899,345,920 B.
    b = hardware.get("H100 SXM").memory_bytes
    assert b == 85_045_477_376
    assert round(b / 2**30, 1) == 79.2 and b < 80 * 2**30


def test_chapter05_seven_models_ceiling_and_achievable_orders():
    # Llama-3-8B int4, one sequence of 2,048 tokens. A 1g.10gb slice has 1/8 of the H100's
    # bandwidth (418.75 of 3,350 GB/s) and reads the same bytes a step, so on the ceiling
    # seven batch-1 steps in turn on the whole GPU serve 1/t tokens/s and seven slices
    # 7/(8t): serial / slices = 8/7.
    from gpuinfer.predict import achievable, llm

    h100, part = hardware.get("H100 SXM"), mig_slices.mig_slice("H100 SXM", "1g.10gb")
    assert part.bandwidth * 8 == h100.bandwidth
    whole_c = llm.decode_step_s("llama-3-8b", h100, 1, 2048, "int4")
    slice_c = llm.decode_step_s("llama-3-8b", part, 1, 2048, "int4")
    assert (1 / whole_c) / (7 / slice_c) == pytest.approx(8 / 7, rel=1e-6)
    # The achievable step is a read time t plus a fixed cost F = step_s + layers x kernels x
    # gap = 1.6 ms + 32 x 13 x 0.5 us = 1.808 ms, the same on a slice, whose read takes 8t.
    fit = achievable.FITTED      # step_s 1.6 ms, 13 kernels a layer, kernel_gap_s 0.5 us
    fixed = fit.step_s + 32 * fit.kernels_per_layer * fit.kernel_gap_s
    whole_a = achievable.decode_step_s("llama-3-8b", h100, 1, 2048, "int4")
    slice_a = achievable.decode_step_s("llama-3-8b", part, 1, 2048, "int4")
    t = whole_a - fixed
    assert slice_a == pytest.approx(8 * t + fixed, rel=1e-9)
    # Slices win iff 7 / (8t + F) > 1 / (t + F), i.e. 6F > t: the ceiling (F = 0) says the
    # whole GPU, the achievable model (t ~ 2.1 ms < 6 x 1.808 ms) the slices.
    assert 6 * fixed > t and 7 / slice_a > 1 / whole_a


def test_chapter07_t4_fraction_is_clock_times_kernel_efficiency():
    # The same crowd-sourced torch.mm: T4 41.91 of 65 TFLOP/s = 64.5%; A100 80GB 258.74 of
    # 312 = 82.9%; H100 SXM 760.04 of 989 = 76.8%. At those fractions the T4 would hold
    # 1,590 x 0.645 / 0.829 = 1,236 MHz and 1,590 x 0.645 / 0.768 = 1,334 MHz: between the
    # MLPerf T4's 900 MHz and the 1,590 MHz boost, so the number alone cannot say which.
    frac = {n: measured_rates.achievable(n)["matmul_fp16_flops"] / hardware.get(n).peak_flops("fp16")
            for n in ("T4", "A100 80GB", "H100 SXM")}
    assert frac["T4"] == pytest.approx(41.91 / 65)
    mhz = [1590 * frac["T4"] / frac[n] for n in ("A100 80GB", "H100 SXM")]
    assert mhz == pytest.approx([1236.2, 1334.0], abs=0.5)
    assert all(900 < m < 1590 for m in mhz)


def test_chapter09_paging_contiguous_batch_and_interval_disjointness():
    # A contiguous reservation of 8,192 tokens x 131,072 B a token (32 layers x 8 KV heads x
    # 128 x 2 (K, V) x 2 B) is exactly 2**30 B, so the contiguous batch is budget // 2**30.
    import numpy as np

    from gpuinfer.predict import paged_kv, validation

    assert step_model.kv_cache_bytes_per_token("llama-3-8b") * 8192 == 2**30
    lengths = np.array([1000, 3000, 5000])
    g = paged_kv.paging_gain("llama-3-8b", "H100 SXM", lengths, max_len=8192,
                             achievable=True)
    assert g["batch_contiguous"] == paged_kv.kv_cache_budget("llama-3-8b", "H100 SXM") // 2**30
    # An interval is the value times the regime's ratio quantiles, so the two options'
    # intervals are disjoint iff their ratio exceeds high ratio / low ratio.
    lo, hi = validation.interval(1.0, "dense throughput")
    p_lo, _ = validation.interval(g["tokens_per_s_paged"], "dense throughput")
    _, c_hi = validation.interval(g["tokens_per_s_contiguous"], "dense throughput")
    assert (p_lo > c_hi) == (g["throughput_gain"] > hi / lo)


def test_chapter09_tree_cutoff_below_chain_under_each_perturbed_rate():
    # A tree of widths 4, 2, 2, 1 verifies 4 + 8 + 16 + 16 = 44 nodes + 1 = 45 tokens a
    # sequence, the chain of 4 only 5: the verify step turns compute-bound at ~1/9 the batch,
    # whichever rate is off. A slower matmul turns it compute-bound sooner: a lower cut-off.
    import dataclasses

    from gpuinfer.predict import achievable, speculative

    tree = (4, 2, 2, 1)
    assert speculative.tree_nodes(tree) == 44
    fit = achievable.FITTED

    def cut(eff, t):
        return speculative.cutoff_batch("llama-3-8b", speculative.LLAMA_3_2_1B, "H100 SXM",
                                        acceptance=0.8, k=4, context=256, achievable=eff,
                                        tree=t)
    slow, fast = (dataclasses.replace(fit, matmul_scale=fit.matmul_scale * f)
                  for f in (0.8, 1.1))
    for eff in (slow, fast):
        assert cut(eff, tree) < cut(eff, None)
    assert cut(slow, tree) <= cut(fit, tree) <= cut(fast, tree)

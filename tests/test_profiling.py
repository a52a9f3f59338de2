"""gpuinfer.measure.profiling: a profiler's rows priced on the roofline, the throughput-vs-
interactivity curve, and chapter 7's two profiling exercises, each derived by hand."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from gpuinfer.course import exercises
from gpuinfer import hardware
from gpuinfer.measure import profiling
from gpuinfer.measure.lab_measurements import GOOD_STREAM

H100_BW, H100_PEAK = 3.35e12, 989e12       # H100 SXM: datasheet bandwidth, dense fp16 FLOP/s


def test_the_constants_used_here_are_the_catalogues():
    h100 = hardware.get("H100 SXM")
    assert (h100.bandwidth, h100.peak_flops("fp16")) == (H100_BW, H100_PEAK)


# --- op_cost: each priced operation's FLOPs and bytes from its shapes ------------------------

def test_a_matrix_product_costs_2mnk_and_reads_both_operands():
    # [1, 576] @ [576, 1536] in fp32: 2 x 1 x 576 x 1536 = 1,769,472 FLOPs;
    # (576 + 576 x 1536 + 1536) x 4 B = (576 + 884,736 + 1,536) x 4 = 3,547,392 B.
    assert profiling.op_cost("aten::mm", [[1, 576], [576, 1536]], 4) == (1_769_472, 3_547_392)
    # bmm [9, 1, 64] @ [9, 64, 22]: 9 x 2 x 1 x 22 x 64 = 25,344 FLOPs;
    # 9 x (64 + 1,408 + 22) x 2 B = 26,892 B.
    assert profiling.op_cost("aten::bmm", [[9, 1, 64], [9, 64, 22]], 2) == (25_344, 26_892)
    # addmm(bias [8], [4, 16], [16, 8]): 2 x 4 x 8 x 16 = 1,024 FLOPs;
    # (8 + 64 + 128 + 32) x 2 B = 464 B.
    assert profiling.op_cost("aten::addmm", [[8], [4, 16], [16, 8], [], []], 2) == (1024, 464)


def test_elementwise_in_place_and_reductions_are_one_pass_and_the_rest_unpriced():
    # add [1, 576] + [1, 576]: reads 1,152 elements, writes 576: 1,728 x 4 B = 6,912 B.
    assert profiling.op_cost("aten::add", [[1, 576], [1, 576], []], 4) == (576, 6912)
    # copy_ dst [3, 64] <- src [3, 64]: 192 written, 192 read: 384 x 2 B = 768 B.
    assert profiling.op_cost("aten::copy_", [[3, 64], [3, 64], []], 2) == (192, 768)
    # sum over [1, 576] into the [1, 1] result the profiler lists too: 577 elements read
    # once, 577 x 4 B = 2,308 B.
    assert profiling.op_cost("aten::sum", [[1, 576], [], [], [], [1, 1]], 4) == (576 + 1, 2308)
    for name in ("aten::view", "aten::empty", "aten::linear", "aten::_index_put_impl_"):
        assert all(math.isnan(x) for x in profiling.op_cost(name, [[4, 4]], 2))
    # A list of tensors is recorded as [] (aten::stack([a, b])): no shape, no price.
    assert all(math.isnan(x) for x in profiling.op_cost("aten::add", [[], []], 2))


def test_op_cost_refuses_mismatched_shapes_and_bad_element_bytes():
    with pytest.raises(ValueError, match="inner dimensions"):
        profiling.op_cost("aten::mm", [[1, 4], [5, 6]], 2)
    with pytest.raises(ValueError, match="element_bytes"):
        profiling.op_cost("aten::mm", [[1, 4], [4, 6]], 0)


# --- a profiler's rows (duck-typed key_averages) against the roofline -----------------------

def _avg(key, shapes, count, self_us, device_us=0.0, device_type="DeviceType.CPU"):
    return SimpleNamespace(key=key, input_shapes=shapes, count=count,
                           self_cpu_time_total=self_us, self_device_time_total=device_us,
                           device_type=device_type)


def _run(mm_us, view_us=100.0):
    # Two steps profiled, `mm_us` and `view_us` a step: 4 calls of a 4096 x 4096 fp16 GEMV
    # (2 a step), views, and a GPU kernel's own row (skipped: its time is in the aten::mm
    # that launched it).
    return [_avg("aten::mm", [[1, 4096], [4096, 4096]], 4, 2 * mm_us, device_us=2 * mm_us),
            _avg("aten::view", [[1, 4096], []], 8, 2 * view_us),
            _avg("ampere_gemv", [], 4, 0.0, 2 * mm_us, device_type="DeviceType.CUDA")]


def test_operations_are_per_step_and_priced_and_kernels_are_not_counted_twice():
    t = profiling.operations(_run(100.0), element_bytes=2, steps=2, on_device=True)
    assert list(t["op"]) == ["aten::mm", "aten::view"]            # the kernel row skipped
    mm = t.iloc[0]
    # per step: 2 calls in 100 us; FLOPs 2 x (2 x 4096^2) = 67,108,864;
    # bytes 2 x (4096 + 4096^2 + 4096) x 2 B = 67,141,632 B.
    assert (mm["calls"], mm["seconds"]) == (2, pytest.approx(100e-6))
    assert (mm["flops"], mm["bytes"]) == (67_108_864, 67_141_632)
    assert math.isnan(t.iloc[1]["bytes"])


def test_against_roofline_gives_each_rows_fraction_of_its_roofline():
    tables = [profiling.operations(_run(us), element_bytes=2, steps=2) for us in (60, 64, 68)]
    t = profiling.against_roofline(profiling.pooled(tables), "H100 SXM", "fp16")
    mm = t.loc[t["op"] == "aten::mm"].iloc[0]
    # median 64 us a step; roofline 67,141,632 B / 3.35e12 B/s = 20.04 us
    # (memory-bound: 67.1 MFLOP / 989e12 = 0.068 us): 20.04 / 64 = 0.3132 of the roofline.
    assert mm["seconds"] == pytest.approx(64e-6)
    assert mm["roofline_s"] == pytest.approx(67_141_632 / H100_BW)
    assert mm["of_roofline"] == pytest.approx(67_141_632 / H100_BW / 64e-6)
    assert mm["bound"] == "memory"
    # spread over the runs: (68 - 60) / 64 = 0.125; the views are 100 us of 164 a step.
    assert mm["spread"] == pytest.approx(8 / 64)
    assert t["share"].sum() == pytest.approx(1.0)
    assert t.attrs["priced_s"] == pytest.approx([60e-6, 64e-6, 68e-6])
    assert t.attrs["total_s"] == pytest.approx([160e-6, 164e-6, 168e-6])


def test_the_verdict_branches_on_the_data():
    def verdict(mm_us, view_us, runs=(1.0, 1.02, 1.04)):
        tables = [profiling.operations(_run(mm_us * r, view_us), element_bytes=2, steps=2)
                  for r in runs]
        t = profiling.against_roofline(profiling.pooled(tables), "H100 SXM", "fp16")
        return profiling.verdict(t, on_gpu=True)

    # The GEMVs' roofline is 20.04 us a step. 25 us: 0.80 of it, beyond GOOD_STREAM = 0.6;
    # views 1 us a step: the priced share ~25 / 26, over half.
    fast = verdict(25.0, 1.0)
    assert "priced by its work" in fast and "close to what the device allows" in fast
    # 100 us: 0.20 of its roofline, below 0.6; views 500 us a step: a sixth priced.
    slow = verdict(100.0, 500.0)
    assert "overhead-bound" in slow and "the kernel, not the memory" in slow
    # 15 us: 1.34x the roofline: a cache, or the wrong entry.
    assert "faster than memory allows" in verdict(15.0, 1.0)
    # Runs 0.5x to 2x apart (spreads 1.5 and 0.67, over TOO_NOISY): nothing ordered.
    noisy = verdict(25.0, 25.0, runs=(0.5, 1.0, 2.0))
    assert noisy.count("Inconclusive") == 2
    empty = profiling.pooled([profiling.operations([], element_bytes=2)] * 2)
    assert "No operation was timed" in profiling.verdict(
        profiling.against_roofline(empty, "H100 SXM", "fp16"), on_gpu=False)
    assert GOOD_STREAM == 0.6


# --- throughput against interactivity ---------------------------------------------------------

def test_the_curve_is_one_over_the_step_and_the_batch_over_the_step_and_gpus():
    # step (10 + 0.2 B) ms on 4 GPUs. B = 50: 20 ms, 50 tokens/s a user, 50 / 0.02 / 4 = 625.
    c = profiling.curve(lambda b: (10 + b / 5) * 1e-3, [1, 50, 150], n_devices=4)
    assert c.loc[50, "tokens_per_s_per_user"] == pytest.approx(50.0)
    assert c.loc[50, "tokens_per_s_per_gpu"] == pytest.approx(625.0)
    # Within 40 ms the largest batch is 150 (exactly 40 ms): 150 / 0.04 / 4 = 937.5.
    assert profiling.best_within(c, 0.040).name == 150
    with pytest.raises(KeyError, match="no batch meets"):
        profiling.best_within(c, 0.005)
    with pytest.raises(ValueError, match="n_devices"):
        profiling.curve(lambda b: 1.0, [1], n_devices=0)


def test_the_interactivity_curve_is_the_achievable_model_with_the_ceiling_beside():
    from gpuinfer.predict import achievable, llm
    from gpuinfer.predict import architectures

    c = profiling.interactivity_curve("llama-3-8b", "H100 SXM", [1, 64, 10**6], 1024)
    assert list(c.index) == [1, 64]                      # a million sequences do not fit
    # The ceiling at batch 1 is the weight read: 32 layers x (2 x 4096^2 + 2 x 4096 x 1024
    # + 3 x 4096 x 14336) + the LM head 128,256 x 4096 = 6,979,321,856 weights x 2 B =
    # 13.96 GB at 3.35e12 B/s: 4.17 ms; the KV cache adds 32 x 2 x 1,024 x 1,024 x 2 B =
    # 134 MB (1%) and the activations far less.
    head_and_linear = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128_256 * 4096
    ceiling_1 = c.loc[1, "ceiling_step_s"]
    assert head_and_linear * 2 / H100_BW < ceiling_1 < 1.02 * head_and_linear * 2 / H100_BW
    assert c.loc[1, "step_s"] == pytest.approx(achievable.decode_step_s("llama-3-8b",
                                                                        "H100 SXM", 1, 1024))
    assert c.loc[64, "ceiling_step_s"] == pytest.approx(float(llm.decode_step_s(
        architectures.get("llama-3-8b"), "H100 SXM", 64, 1024)))
    # The achievable model is slower than the ceiling everywhere on the curve.
    assert (c["tokens_per_s_per_gpu"] < c["ceiling_tokens_per_s_per_gpu"]).all()


def test_mlperf_objectives_as_the_rules_state_them():
    # inference_rules.adoc: Llama2-70b "Conversational category: TTFT/TPOT: 2000 ms/200 ms.
    # Interactive category: TTFT/TPOT: 450 ms/40 ms."; Llama3.1-8B 2000/100 and 500/30.
    objectives = profiling.MLPERF_LLM_OBJECTIVES
    assert objectives[("llama2-70b", "server")] == (2.0, 0.2)
    assert objectives[("llama2-70b", "interactive")] == (0.45, 0.04)
    assert objectives[("llama3.1-8b", "interactive")] == (0.5, 0.03)


# --- chapter 7's profiling exercises, derived by hand -----------------------------------------

def test_bench_profile_linear_fraction():
    # Llama-2-7B's linear weights: 32 x (4 x 4096^2 + 3 x 4096 x 11008) = 6,476,005,376,
    # x 2 B = 12,952,010,752 B (activations add 32 x 7 x ~2 x 8 KB, 1e-5 of it) at
    # 3.35e12 B/s: 3.8663 ms on the roofline; the trace's 6.10 ms is 0.6338 of it.
    roofline_s = 32 * (4 * 4096**2 + 3 * 4096 * 11008) * 2 / H100_BW
    ex = exercises.get("bench-profile-linear-fraction")
    assert ex.is_correct(roofline_s / 6.10e-3)
    assert "fraction" in ex.kind


def test_bench_interactivity_per_gpu():
    # 10 + 0.2 B <= 40 ms -> B <= 150; 150 tokens in 40 ms on 4 GPUs: 150 / 0.040 / 4 = 937.5.
    b = int((40 - 10) / 0.2)
    ex = exercises.get("bench-interactivity-per-gpu")
    assert ex.is_correct(b / 0.040 / 4)
    assert ex.kind == "rate"
    assert not ex.is_correct(b / 0.040)                        # the server's, not a GPU's


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="tpot_s"):
        profiling.best_within(profiling.curve(lambda b: 0.01, [1]), -1)
    with pytest.raises(ValueError, match="steps"):
        profiling.operations([], element_bytes=2, steps=0)
    assert np.isinf(profiling.pooled([profiling.operations(_run(30), element_bytes=2)])
                    ["spread"]).all()


def test_profile_steps_pools_separate_profiles_and_top_shows_the_longest_rows():
    import torch

    a = torch.ones(64, 64)
    rows = profiling.profile_steps(lambda: a @ a, 2, element_bytes=4, on_gpu=False)
    assert len(rows.attrs["total_s"]) == 2 and "spread" in rows.columns
    mm = rows.loc[[i for i in rows.index if i.startswith("aten::mm")]]
    assert len(mm) == 1 and mm["flops"].iloc[0] == 2 * 64 ** 3     # 2 m n k
    shown = profiling.top(profiling.against_roofline(rows, "T4", "fp32"), 1)
    assert list(shown.columns) == ["calls", "measured us", "roofline us", "of roofline",
                                   "share", "spread", "bound"] and len(shown) == 1
    with pytest.raises(ValueError, match="n"):
        profiling.profile_steps(lambda: None, 0, element_bytes=4, on_gpu=False)

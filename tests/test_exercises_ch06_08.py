"""Decision exercises of chapters 6 and 8 on the achievable model, reached by hand."""

import numpy as np
import pytest

from gpuinfer.predict import achievable, parallel
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter08_multi_gpu as px
from gpuinfer.predict import engine_step

# --- chapter 8: the GPU and TP degree -----------------------------------------------------

# Llama-2-70B (config.json): 80 layers, d_model 8192, 64 query heads and 8 KV heads of
# 128, MLP 28672, vocabulary 32000. A TP4 shard holds 16 query heads, 2 KV heads, an MLP
# of 7168 and 8000 rows of the LM head.
LAYER_WEIGHTS = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672      # q, o; k, v; MLP


def test_tp4_h200_step_at_113_sequences_by_hand():
    # Shard weights: 80 x 855,638,016 / 4 x 2 B = 34,225,520,640 B.
    # Activations a token and layer (llm counts each matmul's input and output): QKV 8192
    #   in, 2048 + 2 x 256 out; O 2048 in, 8192 out; gate/up 8192 in, 2 x 7168 out; down
    #   7168 in, 8192 out: 58,880 elements; attention 5,120 more (query, output, new K, V).
    # KV cache read: 113 x 4096 tokens x 80 layers x 2 (K, V) x 2 heads x 128 x 2 B.
    # LM head: 8000 x 8192 x 2 B, plus 113 x (8192 in + 8000 out) x 2 B.
    # Embedding: 113 x 8192 x 2 x 2 B (read a row, write it).
    b = 113
    weights = 80 * LAYER_WEIGHTS // 4 * 2
    assert weights == 34_225_520_640
    linear = weights + b * 80 * 58_880 * 2
    attention = b * 4096 * 80 * 2 * 2 * 128 * 2 + b * 80 * 5_120 * 2
    head = 8000 * 8192 * 2 + b * (8192 + 8000) * 2
    embedding = b * 8192 * 2 * 2
    # achievable.FITTED: 0.85 x the H200's 4.8e12 B/s = 4.08e12 B/s; every row memory-bound
    # (the linear rows' 3.87e12 FLOPs at 0.70 x 794.5e12 take 6.95 ms < 8.65 ms of bytes).
    fit = achievable.FITTED
    assert (fit.bandwidth, fit.matmul_scale) == (0.85, 0.70)
    rows_s = (linear + attention + head + embedding) / (fit.bandwidth * 4.8e12)
    flops = 2 * b * 80 * LAYER_WEIGHTS / 4
    assert flops / (fit.matmul_scale * 794.5e12) < linear / (fit.bandwidth * 4.8e12)
    # 161 all-reduces of [113, 8192] fp16 = 1,851,392 B on 4 GPUs, NCCL's ring LL: 6.6 us
    # + 2 x 3 steps x 0.6 us + 2 x 3/4 x 1,851,392 B / 141 GB/s (LL capped at llMaxBw).
    one = 6.6e-6 + 6 * 0.6e-6 + 1.5 * b * 8192 * 2 / 141e9
    comm_s = 161 * one
    # Overheads: 80 layers x 13 kernels x 0.5 us (CUDA graphs) + 1.6 ms a step.
    assert (fit.kernels_per_layer, fit.kernel_gap_s, fit.step_s) == (13, 0.5e-6, 1.6e-3)
    overhead_s = 80 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    step = rows_s + comm_s + overhead_s                       # 17.999 + 4.813 + 2.12 ms
    assert step == pytest.approx(24.93e-3, abs=0.01e-3)
    assert parallel.tp_step_s("llama-2-70b", "H200", 4, b, 4096) == pytest.approx(
        step, rel=1e-3)
    # 113 meets 25 ms; 114 does not (each sequence adds ~0.1 ms): the largest batch.
    assert parallel.tp_max_batch_within("llama-2-70b", "H200", 4, 4096, 0.025) == b
    # Cost: 4 GPUs x 5.4075 USD / (3600 x 113 / 24.93 ms) x 1e6 = 1.326 USD a million.
    usd = 4 * px.DECISION_PRICES["H200"] / (3600 * b / step) * 1e6
    assert exercises.get("parallel-decision-gpu-tp").answer() == pytest.approx(usd, rel=2e-3)
    assert usd == pytest.approx(1.326, abs=0.002)


def test_b200_crossover_compares_the_achievable_shard_with_its_all_reduces():
    # One model on both sides. One B200's kernels: 137.95e9 B of weights at 0.85 x 7.7e12
    # B/s = 21.1 ms (plus the KV read and the rest: ~21.2 ms); overheads 80 x 13 x 0.5 us +
    # 1.6 ms = 2.12 ms at every N. TP8: ~21.2 / 8 + 2.12 = 4.77 ms of shard against 161
    # NVLink-5 LL all-reduces of ~15 us (2.43 ms): the shard longer. TP16 crosses servers:
    # ~21.2 / 16 + 2.12 = 3.45 ms against 161 x ~26 us (4.25 ms): the all-reduces longer.
    fit = achievable.FITTED
    overhead_s = 80 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    for n, longer in ((8, "shard_s"), (16, "comm_s")):
        p = parallel.tp_step_s("llama-2-70b", "B200", n, 1, 4096, parts=True)
        assert p["shard_s"] == pytest.approx(137.95e9 / n / (0.85 * 7.7e12) + overhead_s,
                                             rel=0.05)
        assert max(("shard_s", "comm_s"), key=p.get) == longer
    assert exercises.get("parallel-crossover-batch1").answer() == 16


def test_tp_step_is_the_serving_simulators_and_above_its_ceiling():
    from gpuinfer.predict import step_cost

    for n, batch in [(8, 1), (16, 1), (4, 64)]:
        ceiling = parallel.tp_step_s("llama-2-70b", "H100 SXM", n, batch, 4096,
                                     achievable=False)
        got = parallel.tp_step_s("llama-2-70b", "H100 SXM", n, batch, 4096)
        ones = np.ones(batch)
        z = step_cost.step_aggregates(ones, 4096 * ones)
        for eff, want in ((achievable.FITTED, got), (achievable.CEILING, ceiling)):
            timer = engine_step.EngineStep("llama-2-70b", "H100 SXM", n_devices=n, achievable=eff)
            assert timer.many(z[:, None])[0] == pytest.approx(want, rel=1e-9)
        assert got > ceiling


def test_decision_on_the_achievable_model_keeps_h200_tp4_and_names_the_ceiling_slip():
    q = dict(prices=px.DECISION_PRICES, context=px.CONTEXT, tpot_s=px.DECISION_TPOT_S)
    a, c = parallel.tp_options(px.MODEL, **q), parallel.tp_options(px.MODEL, **q, achievable=False)
    assert (a.iloc[0].GPU, a.iloc[0].N) == (c.iloc[0].GPU, c.iloc[0].N) == ("H200", 4)
    assert a.iloc[0].batch < c.iloc[0].batch                  # 113 against 223
    ratio = c.usd_per_million.iloc[0] / a.usd_per_million.iloc[0]
    # The ceiling's cost per token over the achievable's is the batch ratio times the
    # step ratio: (113 / 223) x (step at 223 on the ceiling / 24.93 ms) = 0.6725 / 1.3257.
    assert ratio == pytest.approx(113 / 223 * c.step_ms.iloc[0] / a.step_ms.iloc[0], rel=1e-9)
    assert ratio == pytest.approx(0.5073, rel=0.005)
    # The registered slip is that ratio, computed from the two tables (not typed in).
    slips = exercises._REGISTRY["parallel-decision-gpu-tp"].slips
    assert any(f == pytest.approx(ratio, rel=1e-12) for f in slips)
    assert px._ceiling_over_achievable() == pytest.approx(ratio, rel=1e-12)
    assert "ceiling's answer" in repr(exercises.check("parallel-decision-gpu-tp",
                                                             c.usd_per_million.iloc[0]))


def test_the_ceilings_allreduces_are_bytes_alone_the_achievables_nccl_ring():
    # The ceiling (achievable=False) charges each all-reduce its bytes alone at NCCL's
    # bus bandwidth: 161 x 16,384 B / 370.8e9 B/s = 7.1 us in all at TP8, batch 1; the
    # achievable model NCCL's LL ring with its latency: 161 x (6.6 us + 14 x 0.6 us +
    # 2 x 7/8 x 16,384 B / 141e9 B/s) = 161 x 15.2 us.
    floor = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096, achievable=False,
                               parts=True)["comm_s"]
    assert floor == pytest.approx(161 * 16_384 / 370.8e9, rel=1e-9)
    ring = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096, parts=True)["comm_s"]
    assert ring == pytest.approx(161 * (6.6e-6 + 14 * 0.6e-6 + 1.75 * 16_384 / 141e9), rel=1e-9)
    assert ring > 300 * floor


# --- chapter 6: the CPU or the T4 under a p99 objective ------------------------------------

def test_cpu_or_gpu_decision_is_one_cpu_machine_at_the_fastest_path_and_one_t4_at_eager():
    # 6,000 predictions/s. The CPU side at numpy's 240 us a prediction: a core is an M/D/1
    # queue at rho = 240e-6 x lambda; four a machine, 1,500/s a core, rho = 0.36, whose p99
    # wait is far under 2 ms (the M/D/1 mean wait rho x S / (2 (1 - rho)) = 67 us), so one
    # machine at 0.34 USD/h: 0.34 / (3600 x 6000) x 1e6 = 0.015741 USD a million, below one
    # g4dn.xlarge at 0.526 USD/h, 0.526 / (3600 x 6000) x 1e6 = 0.024352 USD.
    # At eager PyTorch's 480 us a core serves fewer than 1,000/s within the p99, so 6,000/s
    # need 2 machines, 0.68 / (3600 x 6000) x 1e6 = 0.031481 USD, and the T4 wins.
    from gpuinfer.course.exercises import chapter06_cpu_vs_gpu as cx

    assert exercises.get("cpu-or-gpu-under-slo").answer() == pytest.approx(
        0.34 / (3600 * 6000) * 1e6, rel=1e-9)
    assert cx.DECISION_CPU_EAGER_S == 2 * cx.DECISION_CPU_SERVICE_S
    for machines in (cx.DECISION_MACHINES, cx.DECISION_MACHINES_CEILING):
        t = cx.decision_table(machines)
        assert t.loc["AWS c5.2xlarge", "machines"] == 1
        assert t.loc["AWS g4dn.xlarge", "usd_per_million"] == pytest.approx(
            0.526 / (3600 * 6000) * 1e6, rel=1e-9)
    eager = cx.decision_table(cx.DECISION_MACHINES_EAGER)
    assert eager.loc["AWS c5.2xlarge", "usd_per_million"] == pytest.approx(
        0.68 / (3600 * 6000) * 1e6, rel=1e-9)
    assert eager.loc["AWS c5.2xlarge", "usd_per_million"] > 0.526 / (3600 * 6000) * 1e6
    # The achievable per-prediction time is the slower: the T4 sustains less.
    assert cx.DECISION_GPU_PER_ITEM_S > cx.DECISION_GPU_PER_ITEM_CEILING_S


def test_cpu_or_gpu_slip_names_the_eager_path():
    # Answering with the T4's cost (the winner against eager PyTorch) names the faster path.
    from gpuinfer.course.exercises import chapter06_cpu_vs_gpu as cx

    said = repr(exercises.check("cpu-or-gpu-under-slo", 0.526 / (3600 * 6000) * 1e6))
    assert f"{cx.DECISION_CPU_EAGER_S * 1e6:.0f} us" in said and "faster path" in said

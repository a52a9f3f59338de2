"""The 2026 serving stack of chapters 5 and 9, against values worked by hand: goodput's
bracket, tree verification and speculation switched off under load, prefix-cache hits
under KV-aware and random routing, KV offload against recompute, the KV transfer of
disaggregated serving, an engine's memory fraction beside other models, and the chapters'
exercises on them (each answer reached a second way)."""

import math

import numpy as np
import pandas as pd
import pytest

from gpuinfer.predict import (achievable, batching, colocation, llm, llm_slo, paged_kv,
                              speculative)
from gpuinfer.course import exercises
from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.hardware import mig_slices
from gpuinfer.predict import mig_sizing

MODEL, GPU = "llama-3-8b", "H100 SXM"
KV_8B = 2 * 32 * 8 * 128 * 2          # Llama-3-8B: 131,072 B of fp16 cache a token
KV_70B = 2 * 80 * 8 * 128 * 2         # Llama-3-70B: 327,680 B


# --- goodput at the resolution its search has --------------------------------------------

def _made_up_server(limit):
    """Every request's TTFT is 1 ms per request/s of load: the 50 ms SLO holds up to
    `limit` requests/s as the server measures its load, (n - 1) / span."""
    def serve(arrivals):
        rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
        return pd.DataFrame({"ttft": np.full(len(arrivals), 0.05 * rate / limit),
                             "tpot": np.zeros(len(arrivals)),
                             "latency": np.full(len(arrivals), 0.001)})
    return serve


def test_goodput_bracket_holds_the_answer_and_is_as_narrow_as_asked():
    unit = batching.poisson_arrivals(1.0, 300, seed=0)
    expected = 37.0 * unit[-1] / 299          # the nominal rate at which load reaches 37/s
    lo, hi = llm_slo.goodput_bracket(_made_up_server(37.0), 300, ttft_slo_s=0.05,
                                     tpot_slo_s=1.0, rel_tol=0.05, rate=8.0)
    assert lo <= expected < hi
    assert hi / lo <= 1.05
    assert llm_slo.goodput(_made_up_server(37.0), 300, ttft_slo_s=0.05, tpot_slo_s=1.0,
                           rel_tol=0.05, rate=8.0) == lo


def test_goodputs_from_one_start_lie_on_a_grid_of_4_to_the_1_32():
    # From rate 8 the search multiplies by 4 (8, 32, 128) and then halves the bracket's
    # logarithm 5 times (4^(1/32) = 1.0443 < 1.05): every answer is 8 x 4^(j/32).
    step = 4 ** (1 / 32)
    for limit in (23.0, 37.0, 61.0):
        lo, hi = llm_slo.goodput_bracket(_made_up_server(limit), 300, ttft_slo_s=0.05,
                                         tpot_slo_s=1.0, rel_tol=0.05, rate=8.0)
        j = math.log(lo / 8.0, step)
        assert j == pytest.approx(round(j), abs=1e-9)
        assert hi / lo == pytest.approx(step)
    # So two goodputs' ratio is a power of the step: (4^(1/32))^8 = sqrt(2), chapter 9's
    # two gains, is such a ratio, known only to one step either way.


def test_goodput_bracket_when_even_a_light_load_fails():
    lo, hi = llm_slo.goodput_bracket(_made_up_server(37.0), 300, ttft_slo_s=1e-9, tpot_slo_s=1.0)
    assert lo == 0.0 and hi > 0


# --- tree verification and speculation switched off under load ----------------------------

def test_tree_nodes_and_expected_tokens_by_hand():
    # Widths (4, 2, 2, 1): depth 1 holds 4, depth 2 8, depth 3 16, depth 4 16: 44 nodes.
    assert speculative.tree_nodes((4, 2, 2, 1)) == 44
    # alpha 0.8: p = 1 - 0.2^w: 0.9984, 0.96, 0.96, 0.8;
    # E = 1 + 0.9984 + 0.9984 x 0.96 + ... = 1 + 0.9984 + 0.958464 + 0.92012544 + 0.73610035
    assert speculative.tree_expected_tokens(0.8, (4, 2, 2, 1)) == pytest.approx(4.61308979)
    # A chain is Leviathan et al.'s formula: (1 - 0.8^5) / 0.2 = 3.3616.
    assert speculative.tree_expected_tokens(0.8, (1, 1, 1, 1)) == pytest.approx(3.3616)
    assert speculative.expected_tokens(0.8, 4) == pytest.approx(3.3616)


def test_a_tree_verifies_its_nodes_and_stops_paying_at_a_smaller_batch():
    d = speculative.LLAMA_3_2_1B
    chain = speculative.round_breakdown(MODEL, d, GPU, acceptance=0.8, k=4, batch=1, context=256, achievable=False)
    tree = speculative.round_breakdown(MODEL, d, GPU, acceptance=0.8, k=4, batch=1, context=256,
                                       tree=(4, 2, 2, 1), achievable=False)
    assert (chain["verified_tokens"], tree["verified_tokens"]) == (5, 45)
    # At batch 1 the verify step is a weight read either way: the tree's extra tokens
    # accepted make it faster.
    assert tree["speedup"] > chain["speedup"]
    # The verify step of 45 tokens a sequence turns compute-bound 9 times sooner.
    cut = {t: speculative.cutoff_batch(MODEL, d, GPU, acceptance=0.8, k=4, context=256, tree=t, achievable=False)
           for t in (None, (4, 2, 2, 1))}
    assert cut[(4, 2, 2, 1)] < cut[None] / 4
    # A chain passed as a tree is the chain.
    same = speculative.round_breakdown(MODEL, d, GPU, acceptance=0.8, k=4, batch=8, context=256,
                                       tree=(1, 1, 1, 1), achievable=False)
    assert same["speedup"] == pytest.approx(speculative.decode_speedup(
        MODEL, d, GPU, acceptance=0.8, k=4, batch=8, context=256, achievable=False))
    with pytest.raises(ValueError, match="k=3 must equal len"):
        speculative.round_breakdown(MODEL, d, GPU, acceptance=0.8, k=3, tree=(2, 2), achievable=False)
    with pytest.raises(ValueError, match=r"tree\[1\]"):
        speculative.tree_expected_tokens(0.8, (2, 0))


def test_speculation_schedule_switches_off_where_it_stops_paying():
    d = speculative.LLAMA_3_2_1B
    grid = [1, 16, 128, 512]
    kw = dict(acceptance=0.8, context=256, max_k=4)
    sched = speculative.speculation_schedule(MODEL, d, GPU, batches=grid, **kw, achievable=False)
    # Each range's k is best_k at its first batch; the ranges tile 1..512.
    assert sched[0][0] == 1 and sched[-1][1] == 512
    for (_, b, _), (c, _, _) in zip(sched, sched[1:]):
        assert c == b + 1
    for first, _, k in sched:
        assert k == speculative.best_k(MODEL, d, GPU, batch=first, **kw, achievable=False)
    # Past the cut-off of every k the schedule is off: at batch 512 (the ceiling's
    # chain k=1 stops paying below it) k = 0, and the speed-up is exactly 1.
    assert sched[-1][2] == 0
    assert speculative.scheduled_speedup(MODEL, d, GPU, acceptance=0.8, schedule=sched,
                                         batch=512, context=256, achievable=False) == 1.0
    # TensorRT-LLM's max_concurrency by hand: k = 4 up to 8 requests, off above.
    hand = [[1, 8, 4], [9, 1024, 0]]
    assert speculative.scheduled_speedup(MODEL, d, GPU, acceptance=0.8, schedule=hand,
                                         batch=4, context=256, achievable=False) == pytest.approx(
        speculative.decode_speedup(MODEL, d, GPU, acceptance=0.8, k=4, batch=4, context=256, achievable=False))
    assert speculative.scheduled_speedup(MODEL, d, GPU, acceptance=0.8, schedule=hand,
                                         batch=9, context=256, achievable=False) == 1.0
    with pytest.raises(ValueError, match="no range"):
        speculative.scheduled_speedup(MODEL, d, GPU, acceptance=0.8, schedule=hand, batch=2000, achievable=False)
    # Nothing accepted: never speculate.
    assert speculative.speculation_schedule(MODEL, d, GPU, acceptance=0.0, batches=[1, 64],
                                            max_k=2, achievable=False) == [[1, 64, 0]]
    with pytest.raises(ValueError, match="ascending"):
        speculative.speculation_schedule(MODEL, d, GPU, acceptance=0.8, batches=[4, 2], achievable=False)


# --- prefix caching and routing -----------------------------------------------------------

def _whole(t):
    return t // 16 * 16


def test_conversation_prefix_hits_by_hand():
    # 8 turns, system 1,000, user 200, reply 300: turn t sends 1,200 + 500 (t - 1).
    sent = sum(1200 + 500 * (t - 1) for t in range(1, 9))
    assert sent == 23600
    # KV-aware: turn 1 hits the system prompt's 62 blocks (992); turn t >= 2 the whole
    # blocks of 1,000 + 500 (t - 1): 1,488 2,000 2,496 2,992 3,488 4,000 4,496.
    cached = 992 + 1488 + 2000 + 2496 + 2992 + 3488 + 4000 + 4496
    h = paged_kv.conversation_prefix_hits(8, system_tokens=1000, user_tokens=200,
                                          output_tokens=300)
    assert (h["prompt_tokens"], h["cached_tokens"]) == (sent, cached)
    assert h["hit_rate"] == pytest.approx(21952 / 23600)
    assert h["last_turn_hit_rate"] == pytest.approx(4496 / 4700)
    # Random routing over 4 replicas: turn t's replica served turn j last with
    # probability 1/4 (3/4)^(t-1-j); none with (3/4)^(t-1).
    rnd = 0.0
    for t in range(1, 9):
        rnd += (0.75 ** (t - 1)) * 992
        for j in range(1, t):
            rnd += 0.25 * 0.75 ** (t - 1 - j) * _whole(1000 + 500 * j)
    b = paged_kv.conversation_prefix_hits(8, system_tokens=1000, user_tokens=200,
                                          output_tokens=300, replicas=4, kv_aware=False)
    assert b["cached_tokens"] == pytest.approx(rnd)
    # One replica: routing cannot miss.
    one = paged_kv.conversation_prefix_hits(8, system_tokens=1000, user_tokens=200,
                                            output_tokens=300, replicas=1, kv_aware=False)
    assert one["cached_tokens"] == cached
    with pytest.raises(TypeError, match="kv_aware"):
        paged_kv.conversation_prefix_hits(2, system_tokens=1, user_tokens=1,
                                          output_tokens=1, kv_aware="yes")
    with pytest.raises(ValueError, match="turns"):
        paged_kv.conversation_prefix_hits(0, system_tokens=1, user_tokens=1, output_tokens=1)


def test_prefix_ttft_is_the_uncached_tokens_on_top_of_the_cached():
    # The ceiling: llm.forward_step_s of 1,000 new tokens on 19,000 cached.
    assert paged_kv.prefix_ttft_s(MODEL, GPU, 20000, 19000, achievable=False) == pytest.approx(
        llm.forward_step_s(MODEL, GPU, [1000], [19000]))
    assert paged_kv.prefix_ttft_s(MODEL, GPU, 20000, 0, achievable=False) == pytest.approx(
        llm.prefill_s(MODEL, GPU, 20000))
    with pytest.raises(ValueError, match="cached_tokens"):
        paged_kv.prefix_ttft_s(MODEL, GPU, 100, 100, achievable=False)


# --- KV offload and transfer ----------------------------------------------------------------

def test_kv_reload_or_recompute_by_hand():
    # 32,768 tokens x 131,072 B = 4,294,967,296 B; over 7e9 B/s: 0.6136 s.
    r = paged_kv.kv_reload_or_recompute(MODEL, GPU, 32768, bandwidth_bytes_per_s=7e9, achievable=False)
    assert r["kv_bytes"] == 32768 * KV_8B == 4_294_967_296
    assert r["reload_s"] == pytest.approx(4_294_967_296 / 7e9)
    # The ceiling's recompute: a prefill of the 32,768 tokens with no LM head.
    rows = llm.forward_step_breakdown(MODEL, GPU, [32768], [0], logits=[0])
    assert r["recompute_s"] == pytest.approx(rows["seconds"].sum())
    assert r["breakeven_bytes_per_s"] == pytest.approx(r["kv_bytes"] / r["recompute_s"])
    assert r["reload_wins"] == (7e9 > r["breakeven_bytes_per_s"])
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        paged_kv.kv_reload_or_recompute(MODEL, GPU, 10, bandwidth_bytes_per_s=0, achievable=False)


def test_kv_transfer_by_hand():
    # 8,000 x 327,680 B = 2.62144e9 B over 50e9 B/s: 52.43 ms; over 8 links 6.55 ms.
    assert paged_kv.kv_transfer_s("llama-3-70b", 8000, link_bytes_per_s=50e9) == pytest.approx(
        8000 * KV_70B / 50e9)
    assert paged_kv.kv_transfer_s("llama-3-70b", 8000, link_bytes_per_s=50e9,
                                  links=8) == pytest.approx(8000 * KV_70B / 400e9)
    # DeepSeek-V3's MLA: 61 x (512 + 64) x 2 = 70,272 B a token.
    assert paged_kv.kv_transfer_s("deepseek-v3", 1000, link_bytes_per_s=1e9,
                                  kv_dtype="bf16") == pytest.approx(1000 * 70272 / 1e9)
    with pytest.raises(ValueError, match="links"):
        paged_kv.kv_transfer_s(MODEL, 10, link_bytes_per_s=1e9, links=0)


# --- chapter 5: an engine's memory fraction, MIG in FP8 -------------------------------------

def test_engine_memory_fraction_by_hand():
    # Chapter 5's chat instance: Llama-3-8B fp16 weights 16,060,522,496 B, KV for 16 x
    # 4,096 tokens 8,589,934,592 B, 1e9 B of workspace, 1 GiB of activations, over the
    # A100 80GB's 85,100,068,864 B.
    chat = colocation.deployment("chat", "llama-3-8b", batch=16, context=4096, workspace_bytes=1e9)
    need = 16_060_522_496 + 16 * 4096 * KV_8B + 1e9 + 2**30
    assert chat.weight_bytes == 16_060_522_496
    assert colocation.engine_memory_fraction(chat, "A100 80GB") == pytest.approx(
        need / 85_100_068_864)
    with pytest.raises(TypeError, match="Deployment"):
        colocation.engine_memory_fraction("chat", "A100 80GB")


def test_mig_decision_in_fp8_by_hand():
    # FP8 W8A8: the matmul weights in fp8 (7,504,658,432 B), embedding and norms in fp16
    # (1,050,673,152 + 532,480 B). Batch 8 at 4,096: 4,294,967,296 B of cache. The step on
    # the achievable model (achievable.FITTED: bytes at 0.85 of the slice's bandwidth; a
    # W8A8 matmul is no weight-only kernel, so no further derating; 32 x 13 gaps of
    # 0.5 us; 1.6 ms a step), memory-bound at batch 8:
    #   1g.20gb, 2/8 of 3.35e12 = 837.5e9 B/s: (7.5047e9 + 4.295e9) / (0.85 x 837.5e9)
    #   = 16.58 ms + 0.21 + 1.6 = 18.38 ms > 15 ms: misses (the ceiling's 14.1 ms passes);
    #   3g.40gb, 4/8: 8.29 + 1.81 = 10.10 ms: chosen; an H100 holds 2 of them.
    f = achievable.FITTED
    matmul, cache = 7_504_658_432, 8 * 4096 * KV_8B
    tpot = {}
    for slices, ok in ((2, False), (4, True)):
        bw = 3.35e12 * slices / 8
        tpot[slices] = ((matmul + cache) / (f.bandwidth * bw)
                        + 32 * f.kernels_per_layer * f.kernel_gap_s + f.step_s)
        assert (tpot[slices] <= 0.015) == ok
    assert (matmul + cache) / (3.35e12 * 2 / 8) < 0.015        # the ceiling's slip
    opts = mig_sizing.mig_options("llama-3-8b", accelerator=GPU, batch=8, context=4096,
                                  dtype="fp8", compute_dtype="fp8")
    assert opts.loc["1g.20gb", "tpot_s"] == pytest.approx(tpot[2], rel=0.01)     # 18.38 ms
    assert opts.loc["3g.40gb", "tpot_s"] == pytest.approx(tpot[4], rel=0.01)     # 10.10 ms
    assert mig_slices.mig_profiles(GPU).loc["3g.40gb", "max_instances"] == 2
    assert exercises.get("serving-decision-mig-profile").answer() == 2


# --- chapter 9's exercises on the serving stack, by a second route -------------------------

def test_chapter9_serving_stack_answers_by_hand():
    # "llm-prefix-hit-rate": 21,952 of 23,600 tokens (test above).
    assert exercises.get("llm-prefix-hit-rate").answer() == pytest.approx(21952 / 23600)
    # "llm-routing-prefill-ratio": uncached 23,600 - random's expected hits, over 1,648.
    rnd = sum(0.75 ** (t - 1) * 992 + sum(0.25 * 0.75 ** (t - 1 - j) * _whole(1000 + 500 * j)
                                          for j in range(1, t)) for t in range(1, 9))
    assert exercises.get("llm-routing-prefill-ratio").answer() == pytest.approx(
        (23600 - rnd) / (23600 - 21952))
    # "llm-kv-transfer-ms": 8,000 x 327,680 B over 50e9 B/s = 52.4288 ms.
    assert exercises.get("llm-kv-transfer-ms").answer() == pytest.approx(52.4288)
    # "llm-offload-breakeven": 4,294,967,296 B over the achievable prefill, summed from
    # the rows' achievable times (achievable.table_s) and the step's overheads.
    rows = llm.forward_step_breakdown(MODEL, GPU, [32768], [0], logits=[0])
    eff = achievable.FITTED
    device = float(achievable.table_s(rows, hardware.get(GPU), eff, "fp16").sum())
    seconds = float(achievable.overheads(device, 32, eff))
    assert exercises.get("llm-offload-breakeven").answer() == pytest.approx(
        32768 * KV_8B / seconds / 1e9, rel=1e-6)


def test_chapter9_kv_transfer_runs_over_the_rdma_nic_chapter10_uses():
    # One GPU's NIC is one of a DGX H100's eight NDR ports: 8 x 400 Gb/s = 3,200 Gb/s =
    # 400e9 B/s a node, 50e9 B/s a GPU; chapter 10 divides the same entry by 8.
    from gpuinfer.course.exercises import chapter09_llm_serving as ch09
    assert ch09.TRANSFER_LINK == "InfiniBand NDR x8"
    assert device_links.get_interconnect(ch09.TRANSFER_LINK).bandwidth_bytes_per_s == 400e9
    assert ch09.transfer_link_bytes_per_s() == 400e9 / 8 == 50e9
    assert "RDMA NIC" in exercises.get("llm-kv-transfer-ms").question


def test_chapter9_two_instances_question_gives_the_gib_cuda_reports():
    # 85,045,477,376 B / 2**30 = 79.204... GiB: CUDA's total_memory, not the 80 GiB of HBM
    # (80 x 2**30 = 85,899,345,920 B).
    q = exercises.get("llm-two-instances").question
    assert "85.0 GB" in q and "79.2 GiB" in q and "80 GiB" not in q

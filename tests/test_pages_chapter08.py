"""course.pages.chapter08_multi_gpu: what chapter 8's prose quotes, against arithmetic done
by hand from the model card (Llama-2-70B: 80 layers, d_model 8192, 64 query and 8 KV
heads of 128, d_ff 28672, vocabulary 32000, untied embeddings), the catalogue (an H100
SXM's 85,045,477,376 B, NVLink 4) and NCCL's constants (tuning.cc, topo.h); and the
checks the page used to run on the package's functions."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from gpuinfer.course import exercises
from gpuinfer.course.exercises import check
from gpuinfer.course.exercises import chapter08_multi_gpu as px
from gpuinfer.course.pages import chapter08_multi_gpu as page
from gpuinfer.hardware import device_links
from gpuinfer.measure import reference
from gpuinfer import hardware
from gpuinfer.predict import (achievable, calibration, collectives, multinode, parallel,
                              validation)

M, GPU, CONTEXT = "llama-2-70b", "H100 SXM", 4096
H100_BYTES = 85_045_477_376
# Llama-2-70B's parameters from its config: per layer q and o 8192^2 each, k and v
# 8192 x 1024 each (8 KV heads of 128), the MLP 3 x 8192 x 28672, two norms of 8192:
# 67,108,864 x 2 + 8,388,608 x 2 + 704,643,072 + 16,384 = 855,654,400; x 80 layers
# = 68,452,352,000; plus embedding and LM head 2 x 32000 x 8192 = 524,288,000 and the
# final norm 8192: 68,976,648,192 parameters, 137,953,296,384 B in fp16.
W70_BYTES = 137_953_296_384
KV_TOKEN_BYTES = 2 * 80 * 8 * 128 * 2           # K and V, 80 layers, 8 heads of 128, fp16
S1 = 8192 * 2                                   # a batch-1 all-reduce: [1, 8192] fp16
LL_BW = 141e9                                   # NCCL's llMaxBw, Hopper, one node
ALPHA, T0 = 0.6e-6, 6.6e-6                      # NCCL's LL step and base on NVLink 4


@pytest.fixture(scope="module")
def tp8():
    return parallel.tp_step_s(M, GPU, 8, 1, CONTEXT, parts=True)


@pytest.fixture(scope="module")
def pp8():
    return parallel.pp_decode_breakdown(M, GPU, 8, batch=1, context=CONTEXT, achievable=True)


@pytest.fixture(scope="module")
def sweep():
    return pd.DataFrame([parallel.tp_step_s(M, GPU, n, 1, CONTEXT, parts=True)
                         for n in parallel.valid_tp_degrees(M)]).set_index("n_devices")


# The memory ------------------------------------------------------------------------------

def test_the_weights_do_not_fit_one_h100_and_fit_an_h200_with_a_handful():
    fits = page.fits_table()
    values = page.memory_block(fits)
    assert values["w70_gb"] * 1e9 == W70_BYTES                  # the config's sum, fp16
    assert values["kv70_kb"] * 1e3 == KV_TOKEN_BYTES            # 327,680 B a token
    # 137.95 GB of weights against 85.05 GB (H100) and 85.1 GB (A100 80GB): nothing fits.
    assert fits.loc["H100 SXM", "batch at 4,096"] == fits.loc["A100 80GB", "batch at 4,096"] == 0
    # H200 at vLLM's 0.92: 0.92 x 150.055 GB = 138.051 GB, 0.098 GB over the weights,
    # under the activations' 1 GiB: no sequence.
    assert values["h200_vllm_spare_gb"] == pytest.approx(0.0977, abs=1e-4)
    assert fits.loc["H200", "at vLLM's 0.92"] == 0 and values["vllm_unused_pct"] == pytest.approx(8)


def test_engine_reserve_is_what_vllm_leaves_plus_a_gib():
    # 8% of an H100's 85,045,477,376 B, plus 2**30 for the activations.
    assert page.engine_reserve(GPU) == pytest.approx(0.08 * H100_BYTES + 2**30)
    assert page.engine_reserve(GPU, utilisation=1.0) == 2**30


def test_capacity_grows_faster_than_the_devices():
    ns = (2, 8)
    capacity = pd.DataFrame({f"batch, {GPU}": [parallel.tp_max_batch(M, GPU, n, CONTEXT) for n in ns],
                             "batch, H200": [parallel.tp_max_batch(M, "H200", n, CONTEXT) for n in ns],
                             f"{GPU}, vLLM's 0.92": [parallel.tp_max_batch(
                                 M, GPU, n, CONTEXT, reserve_bytes=page.engine_reserve(GPU)) for n in ns],
                             "H200, vLLM's 0.92": [0, 0]}, index=list(ns))
    values = page.capacity_block(capacity)
    # Two H100s: 2 x (85.05 - 1.07) GB = 167.9 GB less 137.95 GB of weights = 29.99 GB
    # for the cache, 29.99e9 / 327,680 B / 4096 tokens = 22.3: 22 sequences.
    assert values["batch_n2"] == 22 and values["min_n"] == 2
    assert values["batch_n8"] > 8 * values["batch_n2"]


# TP and PP at batch 1 ----------------------------------------------------------------------

def test_a_tp_step_has_two_all_reduces_a_layer_and_one_more(tp8, pp8):
    values = page.tp_block(tp8, pp8, parallel.tp_step_s(M, GPU, 1, 1, CONTEXT))
    assert values["n_allreduce"] == 2 * 80 + 1 and values["ar_bytes"] == S1
    assert values["logits_kb"] == 64.0                          # 32000 x 2 B
    # NCCL's LL ring on 8 GPUs: 6.6 us + 2 x 7 steps x 0.6 us, and 2 x 7/8 x 16,384 B at
    # LL's 141 GB/s: 15.2 us.
    assert values["ar8_us"] == pytest.approx((T0 + 14 * ALPHA + 1.75 * S1 / LL_BW) * 1e6)
    # SGLang's one-shot at 16,384 B: 5.7 us; 161 of them 0.918 ms; 15.2 / 5.7 = 2.67.
    assert values["tp8_custom_comm_ms"] == pytest.approx(161 * 5.7e-3)
    assert values["custom_ar_ratio"] == pytest.approx(values["ar8_us"] / 5.7)


def test_the_measured_one_shot_is_of_this_message_on_this_server():
    measured = collectives.CUSTOM_ALLREDUCE_MEASURED
    assert (measured["accelerator"], measured["n_devices"]) == (GPU, 8)
    assert page.custom_allreduce_measured_s(S1) == 5.7e-6


def test_pp_keeps_one_devices_latency_and_its_rate_is_a_stage_and_a_send(tp8, pp8):
    one = parallel.tp_step_s(M, GPU, 1, 1, CONTEXT)
    assert pp8["latency_s"] == pytest.approx(one, rel=0.01) and pp8["latency_s"] > tp8["total_s"]
    values = page.tp_block(tp8, pp8, one)
    # Eight stages busy at once: a token every eighth of the step plus one send.
    assert values["pp8_tps_ach"] == pytest.approx(1 / (one / 8 + pp8["send_s"]))
    assert values["pp8_tps"] == pytest.approx(values["pp8_tps_ach"])


def test_the_ceiling_prices_the_all_reduces_at_the_bus_bandwidth(tp8):
    ceil8 = parallel.tp_step_s(M, GPU, 8, 1, CONTEXT, achievable=False, parts=True)
    # Each all-reduce's bytes at the bus bandwidth, as an in-switch reduction would move
    # them: 161 x 16,384 B / 370.8 GB/s = 7.11 us, against NCCL's 161 x 15.2 us.
    assert ceil8["comm_s"] == pytest.approx(161 * S1 / 370.8e9)
    assert ceil8["comm_s"] < tp8["comm_s"] / 100
    assert ceil8["total_s"] == tp8["ceiling_s"] < tp8["total_s"]


def test_the_held_out_tp_runs_are_tp2_and_tp8_on_hopper():
    e = calibration.errors(split="heldout")
    e = e[(e.tp > 1) & e.accelerator.isin(["H100 SXM", "H200"])]
    assert set(e.tp) == {2, 8} and len(e) >= 20


# What an all-reduce costs ----------------------------------------------------------------

def test_nccl_counts_eighteen_links_of_20_6_gb_s():
    values = page.protocols_block()
    assert values["nccl_nvlink_gbs"] == pytest.approx(18 * 20.6)         # 370.8, not 450
    assert values["ll_max_gbs"] == 141 < values["nvlink_gbs"] / 2        # LL capped
    assert values["ll128_gbs"] == pytest.approx(0.92 * 370.8)
    assert values["nccl_nvlink3_gbs"] == pytest.approx(12 * 20.0)        # an A100's 12 links
    assert values["ring8_steps"] == 14


def test_the_fastest_protocol_moves_from_ll_to_ll128_to_simple():
    assert page.fastest_protocol(1e3) == ("ring", "LL")
    assert page.fastest_protocol(1e9) == ("ring", "Simple")
    to_ll128, to_simple = page.protocol_switch_bytes("LL128"), page.protocol_switch_bytes("Simple")
    assert page.fastest_protocol(to_ll128 * 1.01)[1] == "LL128" == page.fastest_protocol(to_simple * 0.99)[1]
    # LL against LL128 by hand: 15.0 us + 1.75 S / 141 GB/s = 40.6 us + 1.75 S / 341.1 GB/s
    # where 1.75 S (1/141 - 1/341.136) GB^-1 = 25.6 us: S = 3.52 MB.
    s = 25.6e-6 / (1.75 * (1 / 141e9 - 1 / 341.136e9))
    assert to_ll128 == pytest.approx(s, rel=0.01)
    values = page.protocols_block()
    batch = values["ll128_from_batch"]
    assert page.fastest_protocol(batch * S1)[1] == "LL128" and page.fastest_protocol((batch - 1) * S1)[1] == "LL"


def test_across_servers_ll_is_capped_and_a_ring_step_pays_the_network_overhead():
    values = page.multinode_block()
    # NCCL's multi-node llMaxBw for Intel hosts: 39 GB/s on two nodes, 20.4 on more.
    assert values["ll_2node_gbs"] == 39 and values["ll_more_gbs"] == pytest.approx(20.4)
    # NCCL's floor on a ring's NVLink step across nodes: 1 us for LL, 3 us for Simple.
    assert page.ring_step_floor_s(S1, 16, "LL") == pytest.approx(1e-6, abs=1e-12)
    assert page.ring_step_floor_s(S1, 16, "Simple") >= 3e-6 - 1e-12
    table = collectives.allreduce_protocols(S1, 16, device_links.interconnect_for("H100 SXM"))
    assert table.seconds.idxmin() == ("tree", "LL")
    # The tree's 2 x 7 NVLink steps keep LL's 0.6 us.
    tree = table.loc[("tree", "LL")]
    net = device_links.get_interconnect(collectives.DEFAULT_NETWORK)
    assert (tree.latency_s - tree.base_s - 2 * net.nccl("LL", "tree").step_latency_s) / 14 \
        == pytest.approx(ALPHA, abs=1e-12)


# The crossover -----------------------------------------------------------------------------

def test_sixteen_is_the_fastest_degree_and_the_ring_alone_would_lose(sweep, tp8):
    values = page.sweep_block(sweep, tp8, 128)
    t = sweep.total_s
    assert t.idxmin() == 16 and t[16] < t[32] < t[8] < t[4] and t[64] > t[8]
    # The crossover on one model: the achievable shard against its all-reduces, past 16.
    assert values["cross_b1"] == values["cross_big"] == 32
    assert page.ring_only_step_s(sweep, 16) > t[8]
    assert page.ring_only_step_s(sweep, 32) > 1.5 * t[32]
    assert sweep.algorithm[16] == "tree" and sweep.algorithm[8] == "ring"
    assert values["big16_protocol"] == "LL128" and values["nvl16_gain_pct"] > values["faster16_pct"]
    # The bandwidth quoted is the chosen (algorithm, protocol)'s: its 2 MB message's time
    # less its latency, the bytes over that bandwidth.
    big16 = parallel.tp_step_s(M, GPU, 16, 128, CONTEXT, parts=True)
    link = device_links.interconnect_for(GPU)
    row = collectives.allreduce_protocols(big16["allreduce_bytes"], 16, link).loc[
        (big16["algorithm"], big16["protocol"])]
    assert row.seconds == pytest.approx(big16["allreduce_s"])
    assert values["big16_bw_gbs"] * 1e9 == row.bandwidth_bytes_per_s
    assert 1 < values["even_batch"] <= 16
    # The one-shot TP8: the shard plus 161 x 5.7 us.
    assert page.custom_step_s(tp8) == pytest.approx(tp8["shard_s"] + 161 * 5.7e-6)


def test_the_closed_forms_by_hand(tp8, sweep):
    cf = page.closed_form(GPU, S1, 161)
    assert (cf["t0_s"], cf["alpha_s"], cf["beta"]) == pytest.approx((T0, ALPHA, LL_BW))
    # T1 on the achievable model: 137.95 GB of weights and 4096 x 327,680 B of cache at
    # 0.85 x 3.35 TB/s = 48.9 ms (the other operations are far smaller at batch 1); O, the
    # overheads every shard pays: 80 x 13 kernels x 0.5 us + 1.6 ms = 2.12 ms.
    fit = achievable.FITTED
    assert cf["t1_s"] == pytest.approx((W70_BYTES + CONTEXT * KV_TOKEN_BYTES)
                                       / (fit.bandwidth * 3.35e12), rel=0.02)
    o = 80 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    assert cf["overhead_s"] == pytest.approx(o)
    # N* is the quadratic's root; N_opt minimises T1/N + O + K (t0 + 2(N-1) alpha +
    # 2(N-1)/N S/beta), O a constant that does not move it.
    a, b = 2 * ALPHA, T0 - 2 * ALPHA + 2 * S1 / LL_BW - o / 161
    c = cf["t1_s"] / 161 + 2 * S1 / LL_BW
    assert a * cf["nstar"] ** 2 + b * cf["nstar"] - c == pytest.approx(0, abs=1e-12)
    step = lambda n: cf["t1_s"] / n + o + 161 * (T0 + 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * S1 / LL_BW)  # noqa: E731
    assert step(cf["nopt"]) < min(step(cf["nopt"] * 0.98), step(cf["nopt"] * 1.02))
    # The overheads put the crossover past the optimum: N_opt below 16, N* above.
    assert 8 < cf["nopt"] < 16 < cf["nstar"] < 32
    assert min(n for n in parallel.valid_tp_degrees(M) if n >= cf["nstar"]) \
        == parallel.crossover_devices(M, GPU, 1, CONTEXT)
    # The quadratic's 16-GPU all-reduce: 6.6 + 30 x 0.6 us + 2 x 15/16 x S / 141 GB/s.
    values = page.closed_form_block(tp8)
    assert values["quad16_us"] == pytest.approx(T0 * 1e6 + 18 + 1.875 * S1 / LL_BW * 1e6)
    assert sweep.allreduce_s[16] * 1e6 > values["quad16_us"]
    # The search's terms, one model: the all-reduces under the shard at 16, over at 32.
    assert sweep.comm_s[16] < sweep.shard_s[16] and sweep.comm_s[32] > sweep.shard_s[32]


def test_the_nvlink_interval_leaves_out_the_mi300x_runs_only():
    e = validation.validation_errors()
    tp = e[e.tp > 1]
    # The TP > 1 rows on a GPU without NVLink are vLLM's MI300X runs (Oracle's), no other.
    assert set(tp.accelerator[[hardware.get(a).nvlink is None for a in tp.accelerator]]) \
        == {"MI300X"}
    lo, hi = page.tp_interval_nvlink()
    assert (lo, hi) == validation.interval(1.0, "tp>1", errors=e[e.accelerator != "MI300X"])
    # Those runs sit at 0.31 to 0.63 of the model: without them the low end rises, and the
    # high end too (one source fewer, each weighing a quarter instead of a fifth).
    mi = tp[tp.accelerator == "MI300X"]
    assert (mi.measured / mi.achievable).max() < lo
    pooled = validation.interval(1.0, "tp>1")
    assert pooled[0] < lo and pooled[1] < hi


def test_tp16_verdict_follows_the_interval():
    rng = {"other": 0.0107, "other_low": 0.0101, "other_high": 0.0230}
    assert "(10.10 to 23.00 ms) overlaps it" in page.tp16_verdict({"flips": True, **rng})
    assert "does not overlap it" in page.tp16_verdict({"flips": False, **rng})
    assert page.CONSERVATIVE in page.tp16_verdict({"flips": False, **rng})


# Across servers ----------------------------------------------------------------------------

def test_pp16_pays_fourteen_nvlink_sends_and_one_over_the_network(pp8):
    pp16 = parallel.pp_decode_breakdown(M, GPU, 16, 1, CONTEXT, achievable=True)
    # 16 stages, one a GPU, 8 a server: 15 hand-offs, the one between servers on InfiniBand.
    assert pp16["sends_s"] == pytest.approx(14 * pp8["send_s"] + pp16["send_s"])
    assert pp16["send_s"] > pp8["send_s"]


def test_the_layouts_rank_as_the_text_says(pp8):
    seqs = 16
    parts = {"tp16": parallel.tp_step_s(M, GPU, 16, seqs, CONTEXT, parts=True),
             "pp16": parallel.pp_decode_breakdown(M, GPU, 16, 1, CONTEXT, achievable=True),
             "tp8pp2": multinode.tp_pp_decode(M, GPU, 8, 2, batch=seqs // 2, context=CONTEXT,
                                              achievable=True),
             "tp8x2": parallel.tp_step_s(M, GPU, 8, seqs // 2, CONTEXT, parts=True)}
    layouts = pd.DataFrame({"tokens/s, 16 GPUs": [10.0, 5.0, 15.0, 20.0]})
    values = page.layouts_block(layouts, parts, pp8, seqs)
    assert values["tp8pp2_over_tp16"] == 1.5 and values["tp8pp2_over_x2"] == 0.75   # 15/10, 15/20
    # Achievable: PP16 < TP16 < TP8 x PP2 < two TP8 replicas, one send apart.
    assert values["pp16_tps_ach"] < values["tp16_tps_ach"] < values["tp8pp2_tps_ach"] \
        < values["tp8x2_tps_ach"]
    assert 0.95 < values["tp8pp2_over_x2_ach"] <= 1


def test_layout_verdict_branches():
    ceil = {"tp16": 2000.0, "tp8pp2": 1000.0}
    text = page.layout_verdict({"flips": False}, ceil)
    assert "do not overlap" in text and "the ceilings reverse it" in text
    assert text.endswith("before settling on one")
    agree = page.layout_verdict({"flips": False}, {"tp16": 1000.0, "tp8pp2": 2000.0})
    assert "the ceilings agree" in agree and agree.endswith("still has the last word")


# The launch floor --------------------------------------------------------------------------

def test_the_launch_floor_is_the_kernels_times_the_host_cost():
    kernels = 80 * 13                                           # 1,040 kernels a step
    per_kernel = pd.DataFrame({page.LAUNCH_SHARD: [4.0, 2.0], page.LAUNCH_KERNELS: [5.0, 3.1],
                               page.LAUNCH_STEP: [9.0, 8.0],
                               "GPU work a kernel (us)": [4.8, 3.05]}, index=[8, 16])
    values = page.launch_block(per_kernel, kernels, (3.12, 10.4), (3e-6, 10e-6))
    assert values["kernels"] == 1040 and values["tp8_roof_shard_ms"] == 4.0
    assert values["tp8_kernels_ms"] == 5.0 and values["tp16_kernels_ms"] == 3.1
    # 4.8 us inside 3-10 us; 3.05 us within 5% of the range's low end.
    assert values["launch8_text"] == "as much the CPU's as the GPU's"
    assert values["launch16_text"].endswith("where the two are even")
    # NVIDIA's post: 3.4 us a replayed kernel against 2.9 us of work: 0.5 us x 1,040 = 0.52 ms.
    assert values["graph_overhead_us"] == pytest.approx(0.5)
    assert values["floor_graph_ms"] == pytest.approx(0.52)
    assert parallel.launch_floor_s(M, 3e-6) == pytest.approx(1040 * 3e-6)
    # gpt-fast's post: 25.5 tokens/s eager; a layer of Llama-2-7B's 32 has 1/32 of the gap.
    assert values["gf_eager"] == 25.5
    compiled = reference.published("decode").set_index("what")["value"][
        "gpt-fast blog, torch.compile and a static KV cache"]
    assert values["gf_layer_ms"] == pytest.approx((1 / 25.5 - 1 / compiled) / 32 * 1e3)


def test_the_kernels_are_the_shard_less_the_graph_gaps_and_the_step_cost(tp8):
    # 80 layers x 13 kernels x the fitted gap, plus the fitted step cost, off the shard.
    fit = achievable.FITTED
    o = 80 * 13 * fit.kernel_gap_s + fit.step_s
    assert page.kernels_s(tp8) == pytest.approx(tp8["shard_s"] - o)
    # ... which is the shard's rows at the derated rates, summed.
    assert page.kernels_s(tp8) == pytest.approx(tp8["ops"]["seconds"].sum())
    # And a floor under it: the roofline's shard.
    roof = parallel.tp_step_s(M, GPU, 8, 1, CONTEXT, achievable=False, parts=True)
    assert roof["shard_s"] < page.kernels_s(tp8)


def test_launch_verdict_branches():
    host = (3.0, 10.0)
    assert page.launch_verdict(2.0, host) == "the CPU's at any cost in the range"
    assert page.launch_verdict(3.1, host).endswith("where the two are even")   # 3.1 < 3.15
    assert page.launch_verdict(5.0, host) == "as much the CPU's as the GPU's"
    assert page.launch_verdict(12.0, host) == "the GPU's at any cost in the range"


# The trade-off -----------------------------------------------------------------------------

def test_replicas_serve_more_per_gpu_and_past_eight_tp_only_loses():
    trade = parallel.tp_tradeoff(M, GPU, batch=16, context=CONTEXT, degrees=[2, 4, 8, 16])
    assert trade.index[0] == 2 and trade.loc[8, "replicas_of_min_tp"] == 4     # 8 / 2
    assert trade.tokens_per_s_per_gpu.is_monotonic_decreasing
    values = page.tradeoff_block(trade)
    assert values["rep_over_tp8"] > 1 and values["tp16_16_ms"] > values["tp8_16_ms"]
    assert values["rep2_tpg_ceil"] > values["rep2_tpg_ach"]
    for batch in (1, 16, 64):            # the figure: past 8, down; at 16 and 64 also right
        t = parallel.tp_tradeoff(M, GPU, batch=batch, context=CONTEXT)
        t = t[(t.index >= 8) & (t.index <= 32)]
        assert t.tokens_per_s_per_gpu.is_monotonic_decreasing, batch
        ms = t.ms_per_token
        assert (ms[16] < ms[8] < ms[32] * 1.2 and ms[32] > ms[16]) if batch == 1 \
            else ms.is_monotonic_increasing, batch


# The 1D layout and the KV heads ------------------------------------------------------------

def test_a_ring_sends_two_n_minus_one_over_n():
    values = page.sent_block()
    assert values["sent_frac_8"] == 1.75 and values["sent_frac_64"] == 126 / 64


def test_a_kv_head_cannot_be_split():
    variants = page.attention_variants()
    mqa = variants["MQA (1 KV head)"]
    kv = {n: parallel.tp_kv_cache_bytes_per_token(mqa, n) for n in parallel.valid_tp_degrees(M)}
    assert set(kv.values()) == {2 * 80 * 1 * 128 * 2}          # one head everywhere: 40,960 B
    # Split by batch, 32 devices hold 1/32 of it each.
    assert parallel.tp_kv_cache_bytes_per_token(mqa, 32, kv_sharding="batch") == 40960 / 32
    table = pd.DataFrame({"N = 16": [1, 2, 0, 0], "N = 32": [0, 0, 3, 4]}, index=pd.MultiIndex.from_tuples(
        [("GQA (8 KV heads, Llama-2-70B)", "heads"), ("GQA (8 KV heads, Llama-2-70B)", "batch"),
         ("MQA (1 KV head)", "heads"), ("MQA (1 KV head)", "batch")]))
    values = page.kv_block(variants, table)
    assert values["gqa_ratio"] == 64 / 8 and (values["gqa16_batch"], values["mqa32_batch"]) == (2, 4)


# What engines run --------------------------------------------------------------------------

def test_the_engines_all_reduce_beats_nccl_inside_a_server():
    ar = page.allreduce_kinds_table()
    assert ar["custom (us)"].lt(ar["NCCL (us)"]).all() and ar.loc[1, "kind"] == "one-shot"
    # The one-shot model against SGLang's sizes it was not fitted to, within 10%.
    link = device_links.interconnect_for("H100 SXM")
    for n_bytes, measured_s in collectives.CUSTOM_ALLREDUCE_MEASURED["seconds_by_bytes"].items():
        assert collectives.custom_allreduce_s(n_bytes, 8, link) == pytest.approx(measured_s, rel=0.1)
    assert parallel.tp_step_s(M, GPU, 8, 1, CONTEXT, allreduce="custom") \
        < parallel.tp_step_s(M, GPU, 16, 1, CONTEXT)


def test_message_label_and_the_tp_interval_sources():
    # [1, 8192] fp16 = 16,384 B; [128, 8192] fp16 = 2,097,152 B.
    assert page.message_label(1) == "batch 1 (16.4 kB)"
    assert page.message_label(128) == "batch 128 (2.1 MB)"
    text = page.tp_interval_sources()
    assert text.startswith("5 sources") and "gpt-fast's batch-1 runs on A100 80GB" in text
    # gpt-fast's TP8 Llama-2-70B bf16: 62.5 tokens/s on 8 A100s, 7.812 a GPU (its table).
    assert page.gptfast_tp_rows().loc[8, "measured"] == pytest.approx(62.5 / 8, rel=1e-3)


def test_variants_verdict_branches():
    runner = pd.Series({"GPU": "H200", "N": 8, "usd_per_million": 0.9})
    labels = list(page.ENGINE_VARIANTS)
    assert page.variants_verdict(labels, runner)[0].startswith("In all four")
    assert "H200 TP8 at 0.90 USD" in page.variants_verdict(labels, runner)[0]
    assert page.variants_verdict([], runner)[0].startswith("In none of the four")
    some = page.variants_verdict(labels[:1], runner)
    assert "for fp16, NCCL (measure both there)" in some[0] and "in some variants" in some[1]


def test_prefill_all_reduces_are_a_prompt_of_activations():
    rows = [(n, f, 10.0 / n + 1, 0.1 * n, "Simple", 5.0 / n, 1.0 + n) for n in (2, 4, 8)
            for f in ("fp16", "FP8 W8A8")]
    ttft = pd.DataFrame(rows, columns=["N", "format", "TTFT (ms)", "share", "protocol",
                                       "ceiling (ms)", "all-reduces (ms)"]
                        ).set_index(["N", "format"])
    values = page.prefill_block(ttft, 4096)
    # Each GPU sends 2(N-1)/N of the message: 1, 1.5 and 1.75 at TP2, 4 and 8.
    assert [values[f"pf{n}_sent"] for n in (2, 4, 8)] == pytest.approx([1.0, 1.5, 1.75])
    assert values["pf8_comm_ms"] == 9.0
    assert values["pf_ar_mb"] == 4096 * 8192 * 2 / 1e6          # 67.1 MB
    assert values["pf_speedup_2_8"] == pytest.approx(6 / 2.25)  # (10/2 + 1) / (10/8 + 1)
    assert values["pf8_share_pct"] == pytest.approx(80)
    # vLLM's cap, 8192 x 1024 B = 8 MiB, under the 4,096-token prompt's 67.1 MB message.
    assert values["custom_cap_mib"] == 8
    assert page.VLLM_CUSTOM_ALLREDUCE_MAX_BYTES < 4096 * S1
    # Decode's batch-128 message (2,097,152 B) is under it: the engines' table prices it.
    assert 128 * S1 < page.VLLM_CUSTOM_ALLREDUCE_MAX_BYTES


# The problems ------------------------------------------------------------------------------

def test_every_answer_is_accepted_and_glued():
    values = page.exercise_block()
    for name in page.EXERCISES:
        answer = exercises.get(name).answer()
        assert check(name, answer) and values["ans_" + name.replace("-", "_")] == float(answer)
    assert values["ans_parallel_kv_per_device_16"] == 2 * 80 * 1 * 128 * 2   # one head a device
    # The batch-64 message: 64 x 8192 x 2 B; LL wins it, its 15.0 us of latency above the
    # 1.75 x 1,048,576 B / 141 GB/s = 13.0 us of bytes.
    assert values["msg64_bytes"] == 64 * S1
    assert values["b64_ll_us"] == pytest.approx(15.0 + 1.75 * 64 * S1 / LL_BW * 1e6)
    assert values["b64_ll_us"] < min(values["b64_ll128_us"], values["b64_simple_us"])
    # The prices to the cent: 39.33 / 8 = 4.916 -> 4.92 USD; 43.26 / 8 = 5.4075 -> 5.41 USD.
    assert (values["price_h100"], values["price_h200"]) == ("4.92", "5.41")
    assert "2025-01-01" in values["price_as_of"]


def test_the_fewest_h100s_stand_at_vllms_default():
    reserve = page.engine_reserve(GPU)
    assert parallel.min_tp_degree(M, GPU, CONTEXT, batch=32, reserve_bytes=reserve) \
        == exercises.get("parallel-fewest-h100").answer()


def test_on_b200s_the_crossover_falls_at_the_servers_edge():
    b200 = page.b200_crossover()
    assert b200["ll_bandwidth"] == device_links.NCCL_LL_MAX_BUS_BANDWIDTH["blackwell"]   # 282 GB/s
    # One model: at 8 the shard is the longer term, at 16 the all-reduces.
    assert b200["shard8"] > b200["comm8"] and b200["shard16"] < b200["comm16"]
    assert 8 < b200["nstar"] <= 16
    assert min(n for n in parallel.valid_tp_degrees(M) if n >= b200["nstar"]) \
        == exercises.get("parallel-crossover-batch1").answer()


def test_the_decision_holds_on_the_ceiling_and_at_vllms_default():
    d, dc = page.decision_table(), page.decision_table(False)
    best = d.iloc[0]
    # The same winner on the ceiling, at a larger batch; H100 TP2 meets the objective only there.
    assert (dc.iloc[0].GPU, dc.iloc[0].N) == (best.GPU, best.N) and dc.iloc[0].batch > best.batch
    assert d[(d.GPU == "H100 SXM") & (d.N == 2)].batch.iloc[0] == 0
    assert dc[(dc.GPU == "H100 SXM") & (dc.N == 2)].batch.iloc[0] > 0
    # The runner-up: twice the GPUs, not twice the batch.
    assert d.iloc[1].N == 2 * best.N and d.iloc[1].batch < 2 * best.batch
    # At vLLM's default every choice's batch is still the objective's, not the memory's.
    for g, n, b in zip(d.GPU, d.N, d.batch):
        memory = parallel.tp_max_batch(M, g, int(n), CONTEXT, reserve_bytes=page.engine_reserve(g))
        assert not 0 < memory < b, (g, n)
    # Cost = N x price / (3,600 x batch / step) x 1e6.
    price = px.DECISION_PRICES[best.GPU]
    assert best.usd_per_million == pytest.approx(
        best.N * price / (3600 * best.batch / (best.step_ms / 1e3)) * 1e6)
    assert math.isfinite(best.usd_per_million)


def test_engine_choices_keep_the_winner_and_move_the_cost():
    best, runner_up = page.engine_choices()
    assert (best.GPU == "H200").all() and (best.N == 4).all()
    assert best.loc["fp16, custom all-reduce", "USD/M"] < best.loc["fp16, NCCL", "USD/M"]
    assert set(runner_up) == set(page.ENGINE_VARIANTS)


def test_engines_block_reads_the_tables_and_glues_each_variant():
    ar = pd.DataFrame({"NCCL (us)": [15.2, 20.0, 41.0], "custom (us)": [5.7, 8.0, 30.0]},
                      index=pd.Index([1, 16, 128], name="batch"))
    best = pd.DataFrame({"GPU": "H200", "N": 4, "batch": [10, 12, 14, 16],
                         "USD/M": [1.0, 0.9, 0.6, 0.5], "its USD/M": 0.4},
                        index=list(page.ENGINE_VARIANTS))
    runner = pd.Series({"GPU": "H200", "N": 8, "usd_per_million": 5.0})
    values = page.engines_block(ar, best, dict.fromkeys(page.ENGINE_VARIANTS, runner))
    assert values["ar1_ratio"] == pytest.approx(15.2 / 5.7)
    # Costs 1.0, 0.9, 0.6 and 0.5 USD: 10%, 40% and 50% less than fp16 on NCCL.
    assert (values["custom_move_pct"], values["fp8_move_pct"], values["both_move_pct"]) \
        == pytest.approx((10, 40, 50))
    assert values["v_f8c_batch"] == 16 and values["v_f16_ceil_usd"] == 0.4
    # A runner-up at five times the cost lies outside every range.
    assert values["v_flip_text"].startswith("In none of the four")
    # SGLang's 2,048 B and 131,072 B sizes, the ones the fixed cost was not fitted to.
    assert (values["cal_small_kb"], values["cal_large_kb"]) == (2.048, 131.072)
    assert (values["cal_small_us"], values["cal_large_us"]) == pytest.approx((5.9, 7.8))


def test_the_figures_draw_what_their_captions_say():
    capacity = pd.DataFrame({"batch, H100 SXM": [0, 22, 100], "batch, H200": [8, 60, 200]},
                            index=[1, 2, 4])
    ax = page.capacity_figure(capacity).axes[0]
    assert len(ax.get_lines()) == 2 and ax.get_ylabel() == "sequences of 4,096 tokens that fit"
    # Three protocols, NCCL's pick (the lowest of the three at every size), two batches.
    lines = page.protocols_figure().axes[0].get_lines()
    assert len(lines) == 6
    curves = np.array([line.get_ydata() for line in lines[:3]])
    assert np.allclose(lines[3].get_ydata(), curves.min(axis=0))
    # Both crossovers at 32, one degree past the server's edge.
    axes = page.crossover_figure(parallel.valid_tp_degrees(M), 128).axes
    assert [a.get_title() for a in axes] == ["batch 1: crossover at N = 32",
                                           "batch 128: crossover at N = 32"]
    assert len(page.tradeoff_figure().axes[0].get_lines()) == 3
    # MQA split by heads: 40,960 B = 40.96 kB on every device.
    ax = page.kv_heads_figure(page.attention_variants(), [1, 2, 4, 8]).axes[0]
    assert np.allclose(ax.get_lines()[2].get_ydata(), 40.96)
    plt.close("all")

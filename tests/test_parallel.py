"""Sharding: the ring all-reduce, tensor- and pipeline-parallel decode against values
worked by hand, and bad input."""

import dataclasses
import math

import numpy as np
import pytest

from gpuinfer.predict import achievable, collectives, llm, parallel
from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.predict import engine_step


# --- the ring all-reduce ---------------------------------------------------------------

def test_ring_allreduce_bandwidth_term():
    # 1 GB on 8 devices: each sends 2 x 7/8 GB = 1.75 GB; at 450 GB/s each way, 3.889 ms.
    assert collectives.allreduce_bytes_sent(1e9, 8) == pytest.approx(1.75e9)
    assert collectives.allreduce_s(1e9, 8, 450e9) == pytest.approx(1.75e9 / 450e9)
    # Two devices: each sends exactly the message once (half, then the other half).
    assert collectives.allreduce_s(1e6, 2, 1e9) == pytest.approx(1e-3)


def test_ring_allreduce_latency_terms():
    # 2(N-1) = 14 steps of 0.6 us, plus 6.6 us a call: 15 us on top of the bandwidth term.
    t = collectives.allreduce_s(1e9, 8, 450e9, 0.6e-6, base_latency=6.6e-6)
    assert t == pytest.approx(1.75e9 / 450e9 + 15e-6)
    assert collectives.allreduce_s(0, 8, 450e9, 0.6e-6) == pytest.approx(8.4e-6)


def test_one_device_communicates_nothing():
    assert collectives.allreduce_s(1e9, 1, 450e9, 1e-6, base_latency=1e-5) == 0.0
    assert collectives.allreduce_bytes_sent(1e9, 1) == 0.0


def test_allreduce_is_vectorised_over_sizes():
    np.testing.assert_allclose(collectives.allreduce_s(np.array([0.0, 1e6]), 2, 1e9),
                               [0.0, 1e-3])


def test_interconnect_allreduce_takes_nccls_fastest_protocol():
    # NCCL's ring on NVLink (tuning.cc): LL base 6.6 us + 0.6 us a step at half the link's
    # bandwidth as NCCL's topology counts it (topo.h: 18 SM90 links x 20.6 GB/s = 370.8 GB/s,
    # not the datasheet's 450), but at most llMaxBw (141 GB/s on Hopper, one node); LL128
    # 14 us + 1.9 us a step at 0.92; Simple 8.4 us + 3.4 us at the full 370.8 GB/s.
    # 16 KB on 4 GPUs: 6 steps, 2 x 3/4 x 16384 B sent.
    ll = 6.6e-6 + 6 * 0.6e-6 + 1.5 * 16384 / 141e9
    ll128 = 14e-6 + 6 * 1.9e-6 + 1.5 * 16384 / (0.92 * 370.8e9)
    simple = 8.4e-6 + 6 * 3.4e-6 + 1.5 * 16384 / 370.8e9
    table = collectives.allreduce_protocols(16384, 4, "NVLink 4")
    assert list(table.index.get_level_values("algorithm").unique()) == ["ring"]  # one node
    assert table.loc[("ring", "LL"), "seconds"] == pytest.approx(ll)
    assert table.loc[("ring", "LL128"), "seconds"] == pytest.approx(ll128)
    assert table.loc[("ring", "Simple"), "seconds"] == pytest.approx(simple)
    assert table.loc[("ring", "LL"), "fastest"] and table["fastest"].sum() == 1
    ic = device_links.get_interconnect("NVLink 4")
    assert collectives.interconnect_allreduce_s(16384, 4, ic) == pytest.approx(ll)
    assert collectives.interconnect_allreduce_s(16384, 4, "nvlink4", protocol="Simple") \
        == pytest.approx(simple)
    # 1 GB: the bandwidth term wins and Simple's full bandwidth pays.
    big = collectives.allreduce_protocols(1e9, 4, "NVLink 4")
    assert big.loc[("ring", "Simple"), "fastest"]
    # A100s (NVLink 3): LL capped at Ampere's 87.7 GB/s.
    a100 = collectives.allreduce_protocols(1e6, 8, "NVLink 3")
    assert a100.loc[("ring", "LL"), "bandwidth_bytes_per_s"] == 87.7e9


def test_past_the_nvlink_domain_the_ring_crosses_the_network():
    # 16 H100s are two HGX boards, joined by InfiniBand NDR: 8 x 400 Gb/s = 400 GB/s a node.
    # NCCL (tuning.cc): its channels each take their own NIC, so a collective moves at up
    # to the node's 400 GB/s; LL at most llMaxBw across 2 nodes (39 GB/s, Intel hosts).
    # Ring LL: 6.6 us + 28 NVLink steps at NCCL's 1 us net-overhead floor + 2 network
    # steps of 2.7 us; 2 x 15/16 x 16384 B at 39 GB/s.
    ring_ll = 6.6e-6 + 28 * 1.0e-6 + 2 * 2.7e-6 + 2 * 15 / 16 * 16384 / 39e9
    # Tree LL (no net-overhead floor for a tree): 6.8 us + 2 x (7 NVLink steps of 0.6 us +
    # log2(2) network steps of 5.0 us); its bandwidth min(370.8 x 0.92/3.8, 400 x 0.92/3.8,
    # 39) GB/s = 39 GB/s, halved (up and down the tree), then x NCCL's treeCorrectionFactor
    # for LL at log2i(16384 >> 6) = log2(256) = 8: 0.7 (tuning.cc), so 27.3 GB/s.
    tree_ll = 6.8e-6 + 2 * (7 * 0.6e-6 + 1 * 5.0e-6) + 2 * 16384 / (39e9 * 0.7)
    table = collectives.allreduce_protocols(16384, 16, "NVLink 4")
    assert table.attrs["nodes"] == 2 and table.attrs["network"] == "InfiniBand NDR x8"
    assert table.loc[("ring", "LL"), "seconds"] == pytest.approx(ring_ll)
    assert table.loc[("tree", "LL"), "seconds"] == pytest.approx(tree_ll)
    assert table.loc[("tree", "LL"), "fastest"]
    # Simple's ring: 8.4 us + 28 x max(3.4, 3 x 1.0) us + 2 x 14 us, at min(370.8, 400) GB/s;
    # its latency x1.4 across nodes on Hopper (ncclTopoGetAlgoTime's "plateau effect of
    # ring"), since 16384 B / (16 channels x 16 ranks) = 64 B reaches the 64 B threshold.
    simple = 1.4 * (8.4e-6 + 28 * 3.4e-6 + 2 * 14e-6) + 2 * 15 / 16 * 16384 / 370.8e9
    assert table.loc[("ring", "Simple"), "seconds"] == pytest.approx(simple)
    inside = collectives.interconnect_allreduce_s(16384, 8, "NVLink 4")
    assert collectives.interconnect_allreduce_s(16384, 16, "NVLink 4") == pytest.approx(tree_ll)
    assert tree_ll > 1.5 * inside


def test_crossover_bytes_balances_the_two_terms():
    # 15 us of latency x 450 GB/s x 8/14 = 3.857 MB.
    n_star = collectives.allreduce_crossover_bytes(8, 450e9, 0.6e-6, base_latency=6.6e-6)
    assert n_star == pytest.approx(15e-6 * 450e9 * 8 / 14)
    bandwidth_term = collectives.allreduce_s(n_star, 8, 450e9)
    assert bandwidth_term == pytest.approx(15e-6)
    assert collectives.allreduce_crossover_bytes(8, 450e9) == 0.0
    assert collectives.allreduce_crossover_bytes(1, 450e9, 1e-6) == math.inf


def test_bus_bandwidth_recovers_the_link():
    t = collectives.allreduce_s(1e9, 8, 450e9)
    assert collectives.allreduce_bus_bandwidth(1e9, 8, t) == pytest.approx(450e9)
    with pytest.raises(ValueError, match="n_devices >= 2"):
        collectives.allreduce_bus_bandwidth(1e9, 1, 1.0)


def test_fit_recovers_bandwidth_and_latency():
    sizes = np.geomspace(1e3, 1e8, 8)
    times = collectives.allreduce_s(sizes, 4, 2e9, base_latency=50e-6)
    fit = collectives.fit_allreduce(sizes, times, 4)
    assert fit["bandwidth_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert fit["latency_s"] == pytest.approx(50e-6, rel=1e-4)
    with pytest.raises(ValueError, match="two different sizes"):
        collectives.fit_allreduce([1e3], [1e-3], 2)
    with pytest.raises(ValueError, match="do not grow"):
        collectives.fit_allreduce([1e3, 1e6], [2e-3, 1e-3], 2)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (2.5, ValueError),
                                        (10**12, ValueError), ("8", TypeError),
                                        (True, TypeError), (None, TypeError)])
def test_device_count_must_be_a_whole_number_at_least_one(bad, error):
    with pytest.raises(error, match="n_devices"):
        collectives.allreduce_s(1e6, bad, 1e9)


def test_searches_over_degrees_are_bounded():
    # Only divisors of the query heads can be degrees: 10**6 devices walks 64 numbers.
    assert parallel.valid_tp_degrees("llama-2-70b", max_devices=10**6) == [1, 2, 4, 8, 16, 32, 64]
    assert parallel.crossover_devices("llama-2-7b", "H100 SXM", max_devices=10**6) <= 32


def test_other_bad_collective_input():
    with pytest.raises(ValueError, match="bandwidth"):
        collectives.allreduce_s(1e6, 2, 0)
    with pytest.raises(ValueError, match="n_bytes"):
        collectives.allreduce_s(-1, 2, 1e9)
    with pytest.raises(ValueError, match="latency"):
        collectives.allreduce_s(1e6, 2, 1e9, latency=-1e-6)


# --- sharding a decoder ---------------------------------------------------------------

def test_valid_degrees_of_llama2_70b():
    # 64 query heads, 8 KV heads, d_ff 28672 = 2^12 x 7.
    assert parallel.valid_tp_degrees("llama-2-70b") == [1, 2, 4, 8, 16, 32, 64]


def test_bad_degrees_name_what_does_not_divide():
    with pytest.raises(ValueError, match="query heads"):
        parallel.check_tp_degree("llama-2-70b", 3)
    odd_mlp = dataclasses.replace(architectures.get("llama-2-70b"), name="odd-mlp", d_ff=1000)
    with pytest.raises(ValueError, match="MLP hidden size"):
        parallel.check_tp_degree(odd_mlp, 16)
    odd_kv = dataclasses.replace(architectures.get("llama-2-70b"), name="odd-kv", n_heads=24,
                                 n_kv_heads=8, d_ff=1200)
    with pytest.raises(ValueError, match="KV heads"):
        parallel.check_tp_degree(odd_kv, 12)
    with pytest.raises(ValueError, match="n_devices"):
        parallel.tp_step_s("llama-2-70b", "H100 SXM", 0, achievable=False)
    with pytest.raises(KeyError, match="model"):
        parallel.tp_step_s("llama-9", "H100 SXM", 2, achievable=False)


def test_kv_heads_are_split_then_replicated():
    assert [parallel.kv_heads_per_device("llama-2-70b", n) for n in (1, 2, 8, 16, 64)] \
        == [8, 4, 1, 1, 1]
    full = 2 * 80 * 8 * 128 * 2  # 327,680 B per token
    assert parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 1) == full
    assert parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 8) == full / 8
    # Beyond 8 devices the head is replicated: no further saving...
    assert parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 16) == full / 8
    # ...unless the cache is split by sequence instead (Pope et al.'s multi-query layout).
    assert parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 16, kv_sharding="batch") \
        == full / 16
    with pytest.raises(ValueError, match="kv_sharding"):
        parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 2, kv_sharding="layers")


def test_a_shard_is_a_model_llm_can_time():
    # Llama-2-70B on 8 devices: 8 of 64 query heads, 1 of 8 KV heads, 3584 of 28672 MLP
    # columns, 4000 of 32000 vocabulary rows; d_model stays 8192.
    part = parallel.shard("llama-2-70b", 8)
    assert (part.n_heads, part.n_kv_heads, part.d_ff, part.vocab_size, part.d_model) \
        == (8, 1, 3584, 4000, 8192)
    # 8192 x (1024 + 2 x 128) + 1024 x 8192 + 3 x 8192 x 3584 = 106,954,752 a layer:
    # exactly an eighth of the full layer's 855,638,016.
    assert part.linear_params_per_layer == 106_954_752 == 855_638_016 // 8
    # Past 8 devices a KV head is replicated, and with it its K and V projections.
    p16 = parallel.shard("llama-2-70b", 16)
    assert p16.n_kv_heads == 1
    assert p16.linear_params_per_layer > 855_638_016 / 16


def test_max_batch_one_device_matches_llm_and_is_zero_for_70b():
    assert parallel.tp_max_batch("llama-2-70b", "H100 SXM", 1, 4096) == 0
    assert llm.max_batch("llama-2-70b", "H100 SXM", 4096) == 0
    assert parallel.tp_max_batch("llama-2-7b", "A100 80GB", 1, 2048) \
        == llm.max_batch("llama-2-7b", "A100 80GB", 2048)


def test_max_batch_on_eight_h100():
    # Free per device: the card's bytes - the reserve - the shard's weights; each
    # sequence: 4096 x 327,680 / 8 bytes of KV cache (one KV head a device).
    mem = hardware.get("H100 SXM").memory_bytes
    free = mem - llm.DEFAULT_RESERVE_BYTES - step_model.weight_bytes(parallel.shard("llama-2-70b", 8))
    expected = int(free // (4096 * 327_680 / 8))
    assert parallel.tp_max_batch("llama-2-70b", "H100 SXM", 8, 4096) == expected
    assert 350 < expected < 450


def test_batch_sharded_max_batch_is_a_multiple_of_the_devices():
    b = parallel.tp_max_batch("llama-2-70b", "H100 SXM", 16, 4096, kv_sharding="batch")
    assert b % 16 == 0
    assert b > parallel.tp_max_batch("llama-2-70b", "H100 SXM", 16, 4096)


def test_fewest_devices_that_hold_the_model():
    # Two H100s: ~69 GB of weights a device, the rest for the KV cache.
    assert parallel.min_tp_degree("llama-2-70b", "H100 SXM", 4096, batch=1) == 2
    two = parallel.tp_max_batch("llama-2-70b", "H100 SXM", 2, 4096)
    assert 10 < two < 40
    assert parallel.min_tp_degree("llama-2-70b", "H100 SXM", 4096, batch=two + 1) == 4
    assert parallel.min_tp_degree("llama-2-70b", "T4", 4096, batch=1, max_devices=4) \
        == math.inf


# Llama-2-70B's 1/8 shard, by hand: 80 layers of 106,954,752 matmul weights =
# 8,556,380,160; activations 4 x 8192 + 2 x 1024 + 2 x 128 + 3 x 3584 = 45,824 elements a
# token and layer; LM head 4000 x 8192 = 32,768,000; KV 2 x 80 x 128 x 2 = 40,960 B a token.
SHARD_W, SHARD_ACT, SHARD_HEAD, SHARD_KV = 8_556_380_160, 45_824, 32_768_000, 40_960


def test_tp_step_by_hand():
    # Batch 1, no context, 8 x H100 SXM on NVLink 4 (3.35e12 B/s, 989e12 FLOP/s).
    parts = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=False, parts=True)
    ops = parts["ops"]
    linear = (2 * SHARD_W + 80 * SHARD_ACT * 2) / 3.35e12          # 5.110 ms
    head = (2 * SHARD_HEAD + (8192 + 4000) * 2) / 3.35e12
    attention = (SHARD_KV + 80 * (2 * 1024 + 2 * 128) * 2) / 3.35e12
    embedding = 8192 * 4 / 3.35e12
    assert ops.loc["linear", "seconds"] == pytest.approx(linear)
    assert ops.loc["lm_head", "seconds"] == pytest.approx(head)
    assert ops.loc["attention", "seconds"] == pytest.approx(attention)
    assert parts["shard_s"] == pytest.approx(linear + head + attention + embedding)
    # The ceiling: 2 x 80 + 1 = 161 all-reduces of 8192 x 2 B, each at its floor: the
    # message once over NVLink 4's NCCL bus bandwidth, 370.8e9 B/s, no latency (44.2 ns).
    floor = 16384 / 370.8e9
    assert parts["n_allreduces"] == 161 and parts["allreduce_bytes"] == 16384
    assert parts["algorithm"] is None and parts["protocol"] is None
    assert parts["comm_s"] == pytest.approx(161 * floor)
    ceiling = linear + head + attention + embedding + 161 * floor
    assert parts["total_s"] == pytest.approx(ceiling) and parts["ceiling_s"] == parts["total_s"]
    assert parts["interconnect"] == "NVLink 4" and parts["nodes"] == 1
    assert parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=False) \
        == pytest.approx(ceiling)
    # The achievable model: each all-reduce NCCL's LL ring (one node: LL at most
    # Hopper's 141 GB/s): 6.6 us + 14 x 0.6 us + 2 x 7/8 x 16384 / 141e9.
    ach = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, parts=True)
    one = 6.6e-6 + 14 * 0.6e-6 + 2 * 7 / 8 * 16384 / 141e9
    assert ach["protocol"] == "LL" and ach["algorithm"] == "ring"
    assert ach["comm_s"] == pytest.approx(161 * one)
    assert ach["total_s"] == pytest.approx(ach["shard_s"] + 161 * one)
    assert ach["ceiling_s"] == pytest.approx(ceiling)


def test_tp_on_one_device_is_the_single_device_roofline():
    for batch, context in ((1, 0), (64, 2048)):
        assert parallel.tp_step_s("llama-2-7b", "A100 80GB", 1, batch, context, achievable=False) \
            == pytest.approx(llm.decode_step_s("llama-2-7b", "A100 80GB", batch, context))


def test_tp_counts_the_sharded_kv_read():
    parts = parallel.tp_step_s("llama-2-70b", "H100 SXM", 4, batch=8, context=1024,
                               achievable=False, parts=True)
    kv = 8 * 1024 * 327_680 / 4
    assert parts["kv_bytes_per_device"] == pytest.approx(kv)
    assert parts["ops"].loc["attention", "bytes"] > kv


def test_pcie_links_cost_more_and_gpus_without_nvlink_need_one_named():
    for ach in (False, True):
        nvlink = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=ach)
        pcie = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, interconnect="PCIe Gen5 x16",
                                  achievable=ach)
        assert pcie > nvlink
    with pytest.raises(KeyError, match="PCIe"):
        parallel.tp_step_s("llama-2-7b", "T4", 2)
    assert parallel.tp_step_s("llama-2-7b", "T4", 2, interconnect="PCIe Gen4 x16") > 0


def test_past_one_server_tp_buys_little_latency_for_twice_the_gpus():
    # Batch 1, Llama-2-70B on H100s, the achievable model: 16 GPUs on two servers shave
    # little off the step (NCCL's tree across the servers), for about half the tokens/s
    # a GPU; at batch 128 the bandwidth of the network makes 16 slower than 8.
    t = {n: parallel.tp_step_s("llama-2-70b", "H100 SXM", n) for n in (4, 8, 16, 32)}
    assert t[8] < t[4] and 0.8 * t[8] < t[16] < t[8]
    per_gpu = {n: 1 / t[n] / n for n in t}
    assert per_gpu[16] < 0.6 * per_gpu[8]
    big = {n: parallel.tp_step_s("llama-2-70b", "H100 SXM", n, 128) for n in (8, 16)}
    assert big[16] > big[8]
    # The crossover is one model's: the achievable shard against the achievable
    # all-reduces. At 16 the shard reads 137.95e9 / 16 B at 0.85 x 3.35e12 B/s (3.03 ms)
    # plus its overheads, 80 x 13 kernels x 0.5 us + 1.6 ms (2.12 ms): 5.15 ms, longer
    # than 161 all-reduces of ~26 us (4.2 ms). At 32: 1.51 + 2.12 = 3.63 ms against
    # 161 x ~37 us (6.0 ms) of all-reduces that now cross servers.
    fit = achievable.FITTED
    overhead_s = 80 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    for n, longer in ((16, "shard_s"), (32, "comm_s")):
        p = parallel.tp_step_s("llama-2-70b", "H100 SXM", n, parts=True)
        assert p["shard_s"] == pytest.approx(137.95e9 / n / (fit.bandwidth * 3.35e12)
                                             + overhead_s, rel=0.05)
        assert max(("shard_s", "comm_s"), key=p.get) == longer
    assert parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=1) == 32


def test_at_large_batch_the_link_bandwidth_decides():
    def share(batch, link="NVLink 4"):
        p = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, batch, 0, interconnect=link,
                               parts=True)
        return p["comm_s"] / p["total_s"]
    assert share(256, "PCIe Gen5 x16") > share(256)
    nvlink = parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=256)
    pcie = parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=256,
                                      interconnect="PCIe Gen5 x16")
    assert pcie <= nvlink


def test_tradeoff_table_compares_tp_with_replicas():
    table = parallel.tp_tradeoff("llama-2-70b", "H100 SXM", batch=16, context=2048)
    base = table.index[0]
    assert base == parallel.min_tp_degree("llama-2-70b", "H100 SXM", 2048, batch=16)
    row = table.loc[8]
    assert row["tokens_per_s"] == pytest.approx(16 / parallel.tp_step_s(
        "llama-2-70b", "H100 SXM", 8, 16, 2048))
    assert row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s"] / 8)
    # Replicas of the smallest degree keep its latency and its throughput per GPU.
    assert (table["replicas_tokens_per_s_per_gpu"] == table.loc[base, "tokens_per_s_per_gpu"]).all()
    assert table.loc[8, "ms_per_token"] < table.loc[base, "ms_per_token"]


def test_launch_floor():
    # 80 layers x 13 kernels x 4 us = 4.16 ms: as long as an 8-way shard's weight read.
    per_kernel_s = 4e-6   # a stated host time a kernel (the chapter's range: 3 to 10 us)
    assert parallel.launch_floor_s("llama-2-70b", per_kernel_s) == pytest.approx(
        80 * parallel.KERNELS_PER_LAYER * per_kernel_s)
    assert parallel.KERNELS_PER_LAYER == achievable.FITTED.kernels_per_layer == 13


def test_pipeline_latency_is_the_whole_model_and_throughput_scales():
    whole = llm.decode_step_s("llama-2-70b", "H100 SXM", 1, 0)
    pp = parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 4, achievable=False)
    send = 8.4e-6 + 3.4e-6 + 16384 / 370.8e9   # NCCL's Simple protocol on NVLink 4 (topology bandwidth)
    assert pp["stage_s"] == pytest.approx(whole / 4)
    assert pp["send_s"] == pytest.approx(send)
    assert pp["latency_s"] == pytest.approx(whole + 3 * send)
    assert pp["tokens_per_s"] == pytest.approx(1 / (whole / 4 + send))
    # 16 stages on two servers: 14 hand-offs over NVLink, one over InfiniBand NDR
    # (Simple: 8.4 us + 14 us + 16384 B / 50 GB/s).
    pp16 = parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 16, achievable=False)
    across = 8.4e-6 + 14e-6 + 16384 / 50e9
    assert pp16["sends_s"] == pytest.approx(14 * send + across)
    assert pp16["send_s"] == pytest.approx(across)
    with pytest.raises(ValueError, match="layers"):
        parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 3, achievable=False)


def test_tp_step_on_the_achievable_model_and_its_ceiling_by_hand():

    # A batch-1 decode step of llama-2-70b on 8 x H100 is bandwidth-bound in every row
    # (about 1 FLOP a byte, far below the ridge), so at half the bandwidth (and half the
    # matmul peak, which it never reaches) each row takes twice its roofline time; the
    # step adds its fixed 1 ms: shard = 2 x roofline shard + 1 ms. No kernel gaps.
    eff = achievable.Efficiency(matmul=0.5, bandwidth=0.5, attention=1.0, step_s=1e-3,
                                kernel_gap_s=0.0, attention_dtype=None)
    roof = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=False, parts=True)
    ach = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=eff, parts=True)
    assert ach["shard_s"] == pytest.approx(2 * roof["shard_s"] + 1e-3)
    # The all-reduces: 161 of NCCL's LL ring (the test above), as on the fitted model.
    assert ach["comm_s"] == parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, parts=True)["comm_s"]
    assert ach["total_s"] == pytest.approx(2 * roof["shard_s"] + 1e-3 + ach["comm_s"])
    assert parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, achievable=eff) \
        == pytest.approx(ach["total_s"])
    # The ceiling, a lower bound on time, is the same in both: the roofline shard plus
    # 161 all-reduces of 16,384 B at NVLink 4's NCCL bus bandwidth, 370.8 GB/s, no
    # latency: 161 x 44.2 ns = 7.11 us (NCCL's LL ring: 161 x 15.2 us = 2.45 ms).
    floor = 161 * 16384 / 370.8e9
    assert roof["total_s"] == roof["ceiling_s"] == pytest.approx(roof["shard_s"] + floor)
    assert ach["ceiling_s"] == pytest.approx(roof["ceiling_s"])
    assert roof["total_s"] < ach["total_s"]


def test_fp8_all_reduces_in_16_bits_on_the_achievable_model_as_in_the_simulator():
    # W8A8 fp8 llama-3-70b (d_model 8,192) at TP2 on H100s, batch 1: the matmuls' output,
    # and so the all-reduced activations, are bf16 in the engines: 1 x 8,192 x 2 B =
    # 16,384 B a message on the achievable model; the ceiling keeps the compute format's
    # 1 x 8,192 x 1 B = 8,192 B (the smallest message: a bound stays a bound).
    assert parallel.tp_message_bytes_per_value("fp8", achievable=False) == 1
    assert parallel.tp_message_bytes_per_value("fp8", True) == 2
    assert parallel.tp_message_bytes_per_value("fp32", True) == 4
    kw = dict(dtype="fp8", compute_dtype="fp8")
    ach = parallel.tp_step_s("llama-3-70b", "H100 SXM", 2, 1, 0, achievable=True, parts=True,
                             **kw)
    roof = parallel.tp_step_s("llama-3-70b", "H100 SXM", 2, 1, 0, achievable=False, parts=True,
                              **kw)
    assert ach["allreduce_bytes"] == 16_384 and roof["allreduce_bytes"] == 8_192
    # 2 x 80 + 1 = 161 all-reduces, each at NCCL's model for its message.
    assert ach["comm_s"] == pytest.approx(
        161 * collectives.interconnect_allreduce_s(16_384, 2, "NVLink 4"), rel=1e-12)
    # The bound is the same in both: 161 x 8,192 B over NVLink 4's 370.8 GB/s bus
    # bandwidth (2 GPUs: each sends the message once) = 3.557 us, beside the roofline.
    floor = 161 * 8_192 / 370.8e9
    assert roof["ceiling_s"] == pytest.approx(roof["ops"]["seconds"].sum() + floor)
    assert roof["comm_s"] == pytest.approx(floor) and roof["total_s"] == roof["ceiling_s"]
    assert ach["ceiling_s"] == pytest.approx(roof["ceiling_s"])
    # The serving simulator's timer prices the same messages: its achievable all-reduces
    # are tp_step_s's, its ceiling's the floor.

    for eff, want in ((achievable.FITTED, ach["comm_s"]), (achievable.CEILING, floor)):
        timer = engine_step.EngineStep("llama-3-70b", "H100 SXM", n_devices=2, achievable=eff, **kw)
        assert timer.comm_s([1])[0] == pytest.approx(want, rel=1e-12)


def test_allreduce_floor_by_hand():
    # Inside an NVLink 4 domain: 1 MB / 370.8e9 B/s = 2.697 us, whatever N (2..8).
    for n in (2, 8):
        assert collectives.allreduce_floor_s(1e6, n, "NVLink 4") == pytest.approx(1e6 / 370.8e9)
    assert collectives.allreduce_floor_s(1e6, 1, "NVLink 4") == 0.0
    # 16 GPUs, 2 nodes on InfiniBand NDR x8 (400e9 B/s a node): each node moves at least
    # 2 x 1/2 x 1 MB = 1 MB over 400e9 B/s = 2.5 us, less than NVLink's 2.697 us; 64
    # GPUs (8 nodes): 2 x 7/8 x 1e6 / 400e9 = 4.375 us, the network's.
    assert collectives.allreduce_floor_s(1e6, 16, "NVLink 4") == pytest.approx(1e6 / 370.8e9)
    assert collectives.allreduce_floor_s(1e6, 64, "NVLink 4") == pytest.approx(4.375e-6)
    # Never above NCCL's modelled all-reduce.
    for n in (2, 8, 16, 64):
        for size in (16384, 1e6, 1e9):
            assert collectives.allreduce_floor_s(size, n, "NVLink 4") < \
                collectives.interconnect_allreduce_s(size, n, "NVLink 4")
    with pytest.raises(ValueError, match="n_bytes"):
        collectives.allreduce_floor_s(-1, 2, "NVLink 4")


def test_pp_stage_is_its_share_of_the_achievable_step():

    # 4 stages of llama-2-70b (80 layers): a stage is 1/4 of the whole decode step, on
    # the roofline by default, on the achievable model (overheads included) with it.
    whole = llm.decode_step_s("llama-2-70b", "H100 SXM", 8, 1024)
    ach = achievable.decode_step_s("llama-2-70b", "H100 SXM", 8, 1024)
    roof = parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 4, 8, 1024, achievable=False)
    fit = parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 4, 8, 1024, achievable=True)
    assert roof["stage_s"] == pytest.approx(whole / 4)
    assert fit["stage_s"] == pytest.approx(ach / 4)
    assert fit["send_s"] == roof["send_s"]
    assert fit["latency_s"] == pytest.approx(ach + fit["sends_s"])


def test_tree_ll128_across_nodes_takes_120_128_and_the_size_correction():
    # 2 MB (batch 128 of Llama-2-70B, 128 x 8192 x 2 B) on 16 H100s, two nodes. NCCL's tree
    # LL128 (tuning.cc): busBw x .92 x 120/128 across nodes (7/9 is for one node) =
    # min(370.8, 400) x 0.8625 = 319.815 GB/s, x treeCorrectionFactor[LL128][log2(2^21 >> 6)
    # = 15] = 0.6: 191.889 GB/s; halved into algorithm bandwidth: 2 x 2097152 B / 191.889e9
    # = 21.858 us. Latency 14 us + 2 x (7 x 1.25 + 1 x 8.5) us = 48.5 us. Total 70.36 us.
    s = 2 ** 21
    table = collectives.allreduce_protocols(s, 16, "NVLink 4")
    bw = 370.8e9 * 0.92 * 120 / 128 * 0.6
    expected = 14e-6 + 2 * (7 * 1.25e-6 + 8.5e-6) + 2 * s / bw
    assert table.loc[("tree", "LL128"), "bandwidth_bytes_per_s"] == pytest.approx(bw)
    assert table.loc[("tree", "LL128"), "seconds"] == pytest.approx(expected)
    assert expected == pytest.approx(70.36e-6, abs=0.01e-6)
    assert table.seconds.idxmin() == ("tree", "LL128")


# --- collectives: NCCL's fastest all-reduce ---------------------------------------------

def test_fastest_allreduce_is_the_fastest_row_of_the_protocol_table():
    from gpuinfer.predict import collectives

    # One node (8 H100s): the ring's fastest protocol; two nodes (16): ring or tree.
    for s, n in [(16_384, 8), (2**20, 8), (2**21, 16), (2**28, 16)]:
        table = collectives.allreduce_protocols(s, n, "NVLink 4")
        (alg, proto), row = table.seconds.idxmin(), table.loc[table.seconds.idxmin()]
        got = collectives.fastest_allreduce(s, n, "NVLink 4")
        assert got["seconds"] == pytest.approx(row.seconds, rel=1e-12)
        assert (got["algorithm"], got["protocol"]) == (alg, proto)
        assert got["nodes"] == (1 if n == 8 else 2)
    # 16,384 B on 8 GPUs, LL: 6.6 us + 14 x 0.6 us + 1.75 x 16,384 / 141e9 = 15.203 us.
    assert collectives.fastest_allreduce(16_384, 8, "NVLink 4")["seconds"] == pytest.approx(
        6.6e-6 + 14 * 0.6e-6 + 1.75 * 16_384 / 141e9, rel=1e-9)
    one = collectives.fastest_allreduce(1e6, 1, "NVLink 4")
    assert one["seconds"] == 0.0 and one["protocol"] is None
    # parallel keeps the collectives' names
    assert collectives.fastest_allreduce is collectives.fastest_allreduce
    assert collectives.allreduce_protocols is collectives.allreduce_protocols
    with pytest.raises(ValueError, match="n_bytes"):
        collectives.fastest_allreduce(-1, 8, "NVLink 4")


# --- what a tensor-parallel group serves within an objective ----------------------------

def test_tp_step_s_is_the_shard_plus_allreduces_plus_overheads_and_above_its_ceiling():

    # Built another way, from the lower-level parts: the shard's rows on the achievable
    # model, 2 x 80 + 1 = 161 of NCCL's all-reduces of [b, 8192] x 2 B
    # (collectives.engine_allreduce), then the achievable overheads (80 x 13 kernel gaps +
    # the step). The ceiling: the shard's roofline rows plus 161 x the message at NVLink
    # 4's 370.8e9 B/s bus bandwidth. The ceiling is below the achievable, always.
    eff = achievable.FITTED
    for n, b in [(1, 1), (2, 8), (8, 64)]:
        part = parallel.shard("llama-2-70b", n)
        rows = achievable.step_breakdown(part, "H200", np.ones(b, dtype=int),
                                         np.full(b, 4096), "fp16", achievable=eff)
        one = (collectives.engine_allreduce(b * 8192 * 2, n, "NVLink 4")["seconds"]
               if n > 1 else 0.0)
        want = rows["seconds"].sum() + 161 * one + 80 * eff.kernels_per_layer * eff.kernel_gap_s + eff.step_s
        got = parallel.tp_step_s("llama-2-70b", "H200", n, b, 4096)
        assert got == pytest.approx(want, rel=1e-12)
        floor = 161 * b * 8192 * 2 / 370.8e9 if n > 1 else 0.0
        ceiling = parallel.tp_step_s("llama-2-70b", "H200", n, b, 4096, achievable=False)
        assert ceiling == pytest.approx(rows["ceiling_s"].sum() + floor, rel=1e-12)
        assert ceiling < got


def _linear_scan(model, gpu, n, context, tpot_s, achievable=True):
    """The largest batch that fits and meets tpot_s, asking every batch from 1 in turn
    with tp_step_s's parts (no bisection, no cache)."""
    top = parallel.tp_max_batch(model, gpu, n, context)
    best = 0
    for b in range(1, top + 1):
        step = parallel.tp_step_s(model, gpu, n, b, context, achievable=achievable,
                                  parts=True)["total_s"]
        if step > tpot_s:
            break
        best = b
    return best


@pytest.mark.parametrize("gpu, n, tpot_s, achievable", [
    ("H200", 2, 0.025, True),       # the objective binds: 25 of the 119 that fit
    ("H100 SXM", 2, 0.025, True),   # batch 1 already misses 25 ms: 0
    ("H100 SXM", 2, 0.025, False),  # on the ceiling it does not
    ("H100 SXM", 1, 1.0, True),     # the weights alone do not fit one H100: 0
])
def test_tp_max_batch_within_matches_a_linear_scan(gpu, n, tpot_s, achievable):
    want = _linear_scan("llama-2-70b", gpu, n, 4096, tpot_s, achievable)
    assert parallel.tp_max_batch_within("llama-2-70b", gpu, n, 4096, tpot_s,
                                        achievable=achievable) == want


def test_tp_max_batch_within_is_memory_when_the_objective_is_loose():
    # H200 TP2 at 4,096 tokens: memory holds 119 sequences; at 119 a step takes well
    # under a second, so a 1 s objective leaves memory to decide.
    top = parallel.tp_max_batch("llama-2-70b", "H200", 2, 4096)
    assert parallel.tp_step_s("llama-2-70b", "H200", 2, top, 4096) < 1.0
    assert parallel.tp_max_batch_within("llama-2-70b", "H200", 2, 4096, 1.0) == top


def test_tp_options_cost_by_the_formula_and_sort_cheapest_first():
    # H200 at 43.26 / 8 = 5.4075 USD a GPU-hour, TP4, 25 ms: batch 113 at 24.93 ms (the
    # by-hand step in test_exercises_ch06_08), 4 x 5.4075 / (3600 x 113 / 0.02493) x 1e6
    # = 1.326 USD a million tokens.
    price = 43.26 / 8
    t = parallel.tp_options("llama-2-70b", options=(2, 4),
                            prices={"H200": price, "H100 SXM": 39.33 / 8}, context=4096,
                            tpot_s=0.025)
    assert list(t.columns) == ["GPU", "N", "batch", "step_ms", "usd_per_million",
                               "memory_batch", "memory_usd_per_million"]
    best = t.iloc[0]
    assert (best.GPU, best.N, best.batch) == ("H200", 4, 113)
    step = parallel.tp_step_s("llama-2-70b", "H200", 4, 113, 4096)
    assert best.step_ms == pytest.approx(24.93, abs=0.01)
    assert best.usd_per_million == pytest.approx(4 * price / (3600 * 113 / step) * 1e6,
                                                 rel=1e-12)
    assert best.usd_per_million == pytest.approx(1.326, abs=0.002)
    mem = parallel.tp_max_batch("llama-2-70b", "H200", 4, 4096)
    mem_step = parallel.tp_step_s("llama-2-70b", "H200", 4, mem, 4096)
    assert best.memory_batch == mem
    assert best.memory_usd_per_million == pytest.approx(
        4 * price / (3600 * mem / mem_step) * 1e6, rel=1e-12)
    # H100 TP2 misses 25 ms at batch 1: no batch, no cost, sorted last.
    last = t.iloc[-1]
    assert (last.GPU, last.N, last.batch) == ("H100 SXM", 2, 0)
    assert np.isnan(last.usd_per_million) and np.isnan(last.step_ms)
    assert list(t.usd_per_million.dropna()) == sorted(t.usd_per_million.dropna())


@pytest.mark.parametrize("call, err, words", [
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, 0, 4096), ValueError, "batch"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 3), ValueError, "3 devices"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, achievable="yes"), TypeError,
     "achievable"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, new_tokens=0), ValueError,
     "new_tokens"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, 2, new_tokens=[1, 2, 3]),
     ValueError, "new_tokens"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, 2, [1, 2, 3]), ValueError,
     "context"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, context=-1), ValueError,
     "context"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, new_tokens=4, logits=5),
     ValueError, "logits"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, allreduce="ring"), ValueError,
     "allreduce"),
    (lambda: parallel.tp_step_s("llama-2-70b", "H200", 4, parts="yes"), TypeError, "parts"),
    (lambda: parallel.tp_max_batch_within("llama-2-70b", "H200", 4, 4096, 0), ValueError,
     "tpot_s"),
    (lambda: parallel.tp_max_batch_within("llama-2-70b", "H200", 4, -5, 0.02), ValueError,
     "context"),
    (lambda: parallel.tp_options("llama-2-70b", prices={}, context=4096, tpot_s=0.025), TypeError, "prices"),
    (lambda: parallel.tp_options("llama-2-70b", prices="H200", context=4096, tpot_s=0.025), TypeError, "prices"),
    (lambda: parallel.tp_options("llama-2-70b", prices={"H200": -1.0}, context=4096,
                                 tpot_s=0.025), ValueError,
     "prices"),
    (lambda: parallel.tp_options("llama-2-70b", prices={"Z9000": 1.0}, context=4096,
                                 tpot_s=0.025), ValueError,
     "Z9000"),
    (lambda: parallel.tp_options("llama-2-70b", options=(3,), prices={"H200": 1.0},
                                 context=4096, tpot_s=0.025),
     ValueError, "3 devices"),
    (lambda: parallel.tp_options("llama-2-70b", options=(), prices={"H200": 1.0},
                                 context=4096, tpot_s=0.025),
     ValueError, "options"),
])
def test_tp_decision_bad_inputs(call, err, words):
    with pytest.raises(err, match=words):
        call()


# --- the engines' one-shot/two-shot all-reduce (collectives.custom_allreduce_parts) -------

def test_custom_allreduce_by_hand_on_eight_h100s():
    # vLLM's kernels on NVLink 4 with NCCL's constants: a barrier is one LL step on NVLink,
    # 0.6 us; bytes move at NCCL's 370.8 GB/s (18 links x 20.6 GB/s); a call pays a fixed
    # cost, calibrated on SGLang's 5.7 us for one-shot at 16,384 B on 8 H100s (4,096 fp32
    # values): 5.7 - 2 x 0.6 - 7 x 16,384 / 370.8e9 x 1e6 (0.3093) = 4.1907 us.
    fixed = 5.7e-6 - 2 * 0.6e-6 - 7 * 16_384 / 370.8e9
    assert collectives.custom_allreduce_fixed_s() == pytest.approx(fixed, rel=1e-12)
    # Batch 1 of Llama-2-70B: 16,384 B < 256 KiB, one stage: 2 barriers + 7 x 16,384 B read,
    # which is the calibration point: SGLang's 5.7 us again.
    one = collectives.custom_allreduce_parts(16_384, 8, "NVLink 4")
    assert one["kind"] == "one-shot" and one["fixed_s"] == pytest.approx(fixed, rel=1e-12)
    assert one["seconds"] == pytest.approx(5.7e-6, rel=1e-12)
    assert one["latency_s"] == pytest.approx(fixed + 1.2e-6, rel=1e-12)
    assert collectives.custom_allreduce_s(16_384, 8, "NVLink 4") == one["seconds"]
    # SGLang's other one-shot sizes, not fitted: 2,048 B, 4.1907 + 1.2 + 7 x 2,048 / 370.8e9
    # = 5.43 us against 5.9 measured (8% low); 131,072 B, 4.1907 + 1.2 + 2.4744 = 7.87 us
    # against 7.8 (1% high).
    assert collectives.custom_allreduce_s(2_048, 8, "NVLink 4") == pytest.approx(5.43e-6, rel=1e-3)
    assert collectives.custom_allreduce_s(131_072, 8, "NVLink 4") == pytest.approx(7.865e-6,
                                                                                 rel=1e-3)
    for size, measured in collectives.CUSTOM_ALLREDUCE_MEASURED["seconds_by_bytes"].items():
        assert collectives.custom_allreduce_s(size, 8, "NVLink 4") == pytest.approx(measured,
                                                                                rel=0.10)
    # 2 MiB: two stages, the fixed cost + 3 barriers + 2 x 7/8 x 2 MiB read.
    two = collectives.custom_allreduce_parts(2 * 2**20, 8, "NVLink 4")
    assert two["kind"] == "two-shot"
    assert two["seconds"] == pytest.approx(fixed + 3 * 0.6e-6 + 1.75 * 2**21 / 370.8e9,
                                           rel=1e-12)
    # On 4 GPUs one stage runs up to 512 KiB; on 2 always.
    assert collectives.custom_allreduce_parts(400 * 1024, 4, "NVLink 4")["kind"] == "one-shot"
    assert collectives.custom_allreduce_parts(400 * 1024, 8, "NVLink 4")["kind"] == "two-shot"
    assert collectives.custom_allreduce_parts(2**26, 2, "NVLink 4")["kind"] == "one-shot"
    # Against NCCL's ring at batch 1: LL's 6.6 us base + 14 x 0.6 us + 2 x 7/8 x 16,384 B at
    # NCCL's LL cap, about 15.2 us: 2.7 times the one-shot's 5.7, as NVIDIA's "up to three
    # times faster" for its MultiShot.
    ratio = collectives.fastest_allreduce(16_384, 8, "NVLink 4")["seconds"] / one["seconds"]
    assert 2.5 < ratio < 3


def test_custom_allreduce_refuses_where_vllm_does_not_run_it():
    with pytest.raises(ValueError, match="groups of"):
        collectives.custom_allreduce_parts(16_384, 3, "NVLink 4")
    with pytest.raises(ValueError, match="NVLink domain"):
        collectives.custom_allreduce_parts(16_384, 8, "PCIe Gen5 x16")
    # engine_allreduce falls back to NCCL past the domain, as vLLM does across nodes.
    nccl16 = collectives.fastest_allreduce(16_384, 16, "NVLink 4")
    assert collectives.engine_allreduce(16_384, 16, "NVLink 4", allreduce="custom") == nccl16
    with pytest.raises(ValueError, match="allreduce"):
        collectives.engine_allreduce(16_384, 8, "NVLink 4", allreduce="ring")


def test_tp8_step_with_custom_allreduce_saves_the_difference_161_times():
    nccl = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096, parts=True)
    custom = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096, allreduce="custom",
                                parts=True)
    assert custom["shard_s"] == nccl["shard_s"] and custom["algorithm"] == "one-shot"
    # Each of the 161 all-reduces of 16,384 B is the calibrated one-shot: 5.7 us.
    assert custom["total_s"] == pytest.approx(nccl["shard_s"] + 161 * 5.7e-6, rel=1e-12)
    assert custom["ceiling_s"] == nccl["ceiling_s"]    # the bound does not move
    assert parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096,
                              allreduce="custom") < parallel.tp_step_s(
        "llama-2-70b", "H100 SXM", 8, 1, 4096)
    # The ceiling's floor is below any kernel: allreduce does not move it.
    assert parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 1, 4096, achievable=False,
                              allreduce="custom") == nccl["ceiling_s"]


def test_tp_prefill_is_the_shards_forward_step_plus_prompt_sized_allreduces():
    # A 4,096-token prompt on TP8 (new_tokens=4096, one sequence): the shard's forward
    # step over [4096] new tokens, and 161 all-reduces of 4,096 x 8,192 x 2 B = 64 MiB
    # each. The ceiling: each at 2**26 / 370.8e9 B/s. The achievable model: NCCL's
    # fastest for that size (bandwidth-bound: the Simple protocol).

    ceil = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, new_tokens=4096, achievable=False,
                              parts=True)
    part = parallel.shard(architectures.get("llama-2-70b"), 8)
    shard = llm.forward_step_breakdown(part, "H100 SXM", [4096], [0])["seconds"].sum()
    assert ceil["shard_s"] == pytest.approx(shard, rel=1e-12)
    assert ceil["allreduce_bytes"] == 4096 * 8192 * 2 == 2**26
    assert ceil["total_s"] == pytest.approx(shard + 161 * 2**26 / 370.8e9, rel=1e-12)
    pre = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, new_tokens=4096, parts=True)
    rows = achievable.step_breakdown(part, "H100 SXM", [4096], [0])["seconds"].sum()
    eff = achievable.FITTED
    one = collectives.fastest_allreduce(2**26, 8, "NVLink 4")["seconds"]
    assert pre["total_s"] == pytest.approx(
        rows + 80 * eff.kernels_per_layer * eff.kernel_gap_s + eff.step_s + 161 * one, rel=1e-12)
    assert pre["protocol"] == "Simple"


def test_fp8_w8a8_needs_compute_dtype_and_reaches_the_decision():
    # dtype fp8 alone is weight-only (W8A16): at a compute-bound batch its matmuls run at
    # the 16-bit peak; compute_dtype fp8 doubles the peak, so the step is shorter.
    kw = dict(achievable=True)
    wo = parallel.tp_step_s("llama-2-70b", "H200", 8, 195, 4096, dtype="fp8_e4m3", **kw)
    w8a8 = parallel.tp_step_s("llama-2-70b", "H200", 8, 195, 4096, dtype="fp8_e4m3",
                              compute_dtype="fp8_e4m3", **kw)
    assert w8a8 < wo
    t = parallel.tp_options("llama-2-70b", options=(8,), prices={"H200": 4.0}, context=4096,
                            tpot_s=0.025, dtype="fp8_e4m3", compute_dtype="fp8_e4m3")
    assert t.loc[0, "batch"] == parallel.tp_max_batch_within(
        "llama-2-70b", "H200", 8, 4096, 0.025, dtype="fp8_e4m3", compute_dtype="fp8_e4m3")


def test_one_function_prices_a_tensor_parallel_step():
    # Issue 32: one name per thing. No public function named like *tp*step* in the
    # package but parallel.tp_step_s (read from the source, so an alias counts too), and
    # tp_step, a lab's verdict on measured steps, which prices nothing.
    import ast
    import pathlib

    import gpuinfer

    root = pathlib.Path(gpuinfer.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            found += [f"{path.relative_to(root)}:{name}" for name in names
                      if not name.startswith("_") and "tp" in name.lower()
                      and "step" in name.lower().split("tp", 1)[1]]
    # The verdict may move between modules (measure/, course/).
    verdicts = [f for f in found if f.endswith(":tp_step")]
    assert [f for f in found if f not in verdicts] == ["predict/parallel.py:tp_step_s"]

"""Sharding: the ring all-reduce, tensor- and pipeline-parallel decode against values
worked by hand, and bad input."""

import dataclasses
import math

import numpy as np
import pytest

from gpuinfer import hardware, llm, parallel

P70 = 68_976_648_192  # Llama-2-70B parameters (computed from its config; test_llm checks it)


# --- the ring all-reduce ---------------------------------------------------------------

def test_ring_allreduce_bandwidth_term():
    # 1 GB on 8 devices: each sends 2 x 7/8 GB = 1.75 GB; at 450 GB/s each way, 3.889 ms.
    assert parallel.allreduce_bytes_sent(1e9, 8) == pytest.approx(1.75e9)
    assert parallel.allreduce_time(1e9, 8, 450e9) == pytest.approx(1.75e9 / 450e9)
    # Two devices: each sends exactly the message once (half, then the other half).
    assert parallel.allreduce_time(1e6, 2, 1e9) == pytest.approx(1e-3)


def test_ring_allreduce_latency_terms():
    # 2(N-1) = 14 steps of 0.6 us, plus 6.6 us a call: 15 us on top of the bandwidth term.
    t = parallel.allreduce_time(1e9, 8, 450e9, 0.6e-6, base_latency=6.6e-6)
    assert t == pytest.approx(1.75e9 / 450e9 + 15e-6)
    assert parallel.allreduce_time(0, 8, 450e9, 0.6e-6) == pytest.approx(8.4e-6)


def test_one_device_communicates_nothing():
    assert parallel.allreduce_time(1e9, 1, 450e9, 1e-6, base_latency=1e-5) == 0.0
    assert parallel.allreduce_bytes_sent(1e9, 1) == 0.0


def test_allreduce_is_vectorised_over_sizes():
    np.testing.assert_allclose(parallel.allreduce_time(np.array([0.0, 1e6]), 2, 1e9),
                               [0.0, 1e-3])


def test_interconnect_allreduce_uses_the_catalogue_link():
    ic = hardware.get_interconnect("NVLink 4")
    expected = 2 * 3 / 4 * 16384 / 450e9 + 6 * 0.6e-6 + 6.6e-6
    assert parallel.interconnect_allreduce_time(16384, 4, ic) == pytest.approx(expected)
    assert parallel.interconnect_allreduce_time(16384, 4, "nvlink4") == pytest.approx(expected)


def test_crossover_bytes_balances_the_two_terms():
    # 15 us of latency x 450 GB/s x 8/14 = 3.857 MB.
    n_star = parallel.allreduce_crossover_bytes(8, 450e9, 0.6e-6, base_latency=6.6e-6)
    assert n_star == pytest.approx(15e-6 * 450e9 * 8 / 14)
    bandwidth_term = parallel.allreduce_time(n_star, 8, 450e9)
    assert bandwidth_term == pytest.approx(15e-6)
    assert parallel.allreduce_crossover_bytes(8, 450e9) == 0.0
    assert parallel.allreduce_crossover_bytes(1, 450e9, 1e-6) == math.inf


def test_bus_bandwidth_recovers_the_link():
    t = parallel.allreduce_time(1e9, 8, 450e9)
    assert parallel.allreduce_bus_bandwidth(1e9, 8, t) == pytest.approx(450e9)
    with pytest.raises(ValueError, match="n_devices >= 2"):
        parallel.allreduce_bus_bandwidth(1e9, 1, 1.0)


def test_fit_recovers_bandwidth_and_latency():
    sizes = np.geomspace(1e3, 1e8, 8)
    times = parallel.allreduce_time(sizes, 4, 2e9, base_latency=50e-6)
    fit = parallel.fit_allreduce(sizes, times, 4)
    assert fit["bandwidth_bytes_per_s"] == pytest.approx(2e9, rel=1e-6)
    assert fit["latency_s"] == pytest.approx(50e-6, rel=1e-4)
    with pytest.raises(ValueError, match="two different sizes"):
        parallel.fit_allreduce([1e3], [1e-3], 2)
    with pytest.raises(ValueError, match="do not grow"):
        parallel.fit_allreduce([1e3, 1e6], [2e-3, 1e-3], 2)


@pytest.mark.parametrize("bad", [0, -2, 2.5, "8", True, None])
def test_device_count_must_be_a_whole_number_at_least_one(bad):
    with pytest.raises(ValueError, match="n_devices"):
        parallel.allreduce_time(1e6, bad, 1e9)


def test_other_bad_collective_input():
    with pytest.raises(ValueError, match="bandwidth"):
        parallel.allreduce_time(1e6, 2, 0)
    with pytest.raises(ValueError, match="n_bytes"):
        parallel.allreduce_time(-1, 2, 1e9)
    with pytest.raises(ValueError, match="latency"):
        parallel.allreduce_time(1e6, 2, 1e9, latency=-1e-6)


# --- sharding a decoder ---------------------------------------------------------------

def test_valid_degrees_of_llama2_70b():
    # 64 query heads, 8 KV heads, d_ff 28672 = 2^12 x 7.
    assert parallel.valid_tp_degrees("llama-2-70b") == [1, 2, 4, 8, 16, 32, 64]


def test_bad_degrees_name_what_does_not_divide():
    with pytest.raises(ValueError, match="query heads"):
        parallel.check_tp_degree("llama-2-70b", 3)
    odd_mlp = dataclasses.replace(llm.get("llama-2-70b"), name="odd-mlp", d_ff=1000)
    with pytest.raises(ValueError, match="MLP hidden size"):
        parallel.check_tp_degree(odd_mlp, 16)
    odd_kv = dataclasses.replace(llm.get("llama-2-70b"), name="odd-kv", n_heads=24,
                                 n_kv_heads=8, d_ff=1200)
    with pytest.raises(ValueError, match="KV heads"):
        parallel.check_tp_degree(odd_kv, 12)
    with pytest.raises(ValueError, match="n_devices"):
        parallel.tp_decode_step_time("llama-2-70b", "H100 SXM", 0)
    with pytest.raises(KeyError, match="unknown model"):
        parallel.tp_decode_step_time("llama-9", "H100 SXM", 2)


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


def test_max_batch_one_device_matches_llm_and_is_zero_for_70b():
    assert parallel.tp_max_batch("llama-2-70b", "H100 SXM", 1, 4096) == 0
    assert llm.max_batch("llama-2-70b", "H100 SXM", 4096) == 0
    assert parallel.tp_max_batch("llama-2-7b", "A100 80GB", 1, 2048) \
        == llm.max_batch("llama-2-7b", "A100 80GB", 2048)


def test_max_batch_on_eight_h100():
    # Free per device: 80e9 - 2 x P70 / 8; each sequence: 4096 x 327,680 / 8 bytes.
    free = 80e9 - 2 * P70 / 8
    expected = int(free // (4096 * 327_680 / 8))
    assert parallel.tp_max_batch("llama-2-70b", "H100 SXM", 8, 4096) == expected == 374


def test_batch_sharded_max_batch_is_a_multiple_of_the_devices():
    b = parallel.tp_max_batch("llama-2-70b", "H100 SXM", 16, 4096, kv_sharding="batch")
    assert b % 16 == 0
    assert b > parallel.tp_max_batch("llama-2-70b", "H100 SXM", 16, 4096)


def test_fewest_devices_that_hold_the_model():
    # N = 2: 68.98 GB of weights a device leaves 11.0 GB, 16 sequences of 4096 tokens.
    assert parallel.min_tp_degree("llama-2-70b", "H100 SXM", 4096, batch=1) == 2
    assert parallel.tp_max_batch("llama-2-70b", "H100 SXM", 2, 4096) == 16
    assert parallel.min_tp_degree("llama-2-70b", "H100 SXM", 4096, batch=64) == 4
    assert parallel.min_tp_degree("llama-2-70b", "T4", 4096, batch=1, max_devices=4) \
        == math.inf


def test_tp_decode_step_by_hand():
    # Llama-2-70B, 8 x H100 SXM on NVLink 4, batch 1, no context.
    parts = parallel.tp_decode_breakdown("llama-2-70b", "H100 SXM", 8)
    memory_s = 2 * P70 / 8 / 3.35e12  # 5.147 ms: an eighth of the weights
    compute_s = 2 * P70 / 8 / 989e12
    per_allreduce = 2 * 7 / 8 * (8192 * 2) / 450e9 + 14 * 0.6e-6 + 6.6e-6
    assert parts["memory_s"] == pytest.approx(memory_s)
    assert parts["compute_s"] == pytest.approx(compute_s)
    assert parts["n_allreduces"] == 160 and parts["allreduce_bytes"] == 16384
    assert parts["comm_s"] == pytest.approx(160 * per_allreduce)
    assert parts["total_s"] == pytest.approx(memory_s + 160 * per_allreduce)
    assert parts["interconnect"] == "NVLink 4"
    assert parallel.tp_decode_step_time("llama-2-70b", "H100 SXM", 8) \
        == pytest.approx(parts["total_s"])


def test_tp_on_one_device_is_the_single_device_roofline():
    for batch, context in ((1, 0), (64, 2048)):
        assert parallel.tp_decode_step_time("llama-2-7b", "A100 80GB", 1, batch, context) \
            == pytest.approx(llm.decode_step_time("llama-2-7b", "A100 80GB", batch, context))


def test_tp_counts_the_sharded_kv_read():
    parts = parallel.tp_decode_breakdown("llama-2-70b", "H100 SXM", 4, batch=8, context=1024)
    kv = 8 * 1024 * 327_680 / 4
    assert parts["kv_bytes_per_device"] == pytest.approx(kv)
    assert parts["memory_s"] == pytest.approx((2 * P70 / 4 + kv) / 3.35e12)


def test_pcie_links_cost_more_and_gpus_without_nvlink_need_one_named():
    nvlink = parallel.tp_decode_step_time("llama-2-70b", "H100 SXM", 8)
    pcie = parallel.tp_decode_step_time("llama-2-70b", "H100 SXM", 8,
                                        interconnect="PCIe Gen5 x16")
    assert pcie > nvlink
    with pytest.raises(KeyError, match="PCIe"):
        parallel.tp_decode_step_time("llama-2-7b", "T4", 2)
    assert parallel.tp_decode_step_time("llama-2-7b", "T4", 2, interconnect="PCIe Gen4 x16") > 0


def test_crossover_at_batch_one_is_set_by_latency():
    # Weight read 2 x P70 / N / 3.35 TB/s against 160 all-reduces of 16 KB:
    # N = 8: 5.15 ms > 2.41 ms; N = 16: 2.57 ms < 160 x (30 x 0.6 + 6.6) us = 3.94 ms.
    def comm(n):
        return 160 * (2 * (n - 1) / n * 16384 / 450e9 + 2 * (n - 1) * 0.6e-6 + 6.6e-6)
    assert 2 * P70 / 8 / 3.35e12 > comm(8)
    assert 2 * P70 / 16 / 3.35e12 < comm(16)
    assert parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=1) == 16


def test_at_large_batch_the_link_bandwidth_decides():
    # Batch 256: each all-reduce moves 256 x 8192 x 2 B = 4.2 MB, above the 3.9 MB ridge
    # of an 8-way NVLink 4 ring, so communication is bandwidth-bound: it takes a larger
    # share of the step than at batch 1, and a slower link crosses over much sooner.
    def share(batch, link="NVLink 4"):
        p = parallel.tp_decode_breakdown("llama-2-70b", "H100 SXM", 8, batch, 0, "fp16", link)
        return p["comm_s"] / p["total_s"]
    assert share(256) > share(1)
    nvlink = parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=256)
    pcie = parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=256,
                                      interconnect="PCIe Gen5 x16")
    assert pcie < nvlink
    assert parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=1,
                                      interconnect="Ethernet 100GbE") <= 16


def test_pipeline_latency_is_the_whole_model_and_throughput_scales():
    whole = llm.decode_step_time("llama-2-70b", "H100 SXM", 1, 0)
    pp = parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 4)
    send = 6.6e-6 + 0.6e-6 + 16384 / 450e9
    assert pp["stage_s"] == pytest.approx(whole / 4)
    assert pp["send_s"] == pytest.approx(send)
    assert pp["latency_s"] == pytest.approx(whole + 3 * send)
    assert pp["tokens_per_s"] == pytest.approx(1 / (whole / 4 + send))
    with pytest.raises(ValueError, match="layers"):
        parallel.pp_decode_breakdown("llama-2-70b", "H100 SXM", 3)

"""gpuinfer.predict.multinode: NCCL's NVLS_TREE (best case) and TP inside a server x PP across,
against values worked out by hand from NCCL's tuning.cc/topo.h and the package's TP step."""

import pytest

from gpuinfer.predict import multinode, parallel
from gpuinfer.predict import collectives


def test_nvls_tree_on_two_h100_servers():
    # tuning.cc: 25 us (NVLink NVLS_TREE) + 2 x log2(2) x 20.9 us (network, 8 GPUs a node)
    # = 66.8 us. Bus bandwidth, best case: min(2 x 0.85 x 370.8, 2 x 400) = 630.36 GB/s;
    # algorithm bandwidth x 16 / (2 x 15) = 336.192 GB/s.
    r = multinode.nvls_tree_allreduce(16384, 16, "NVLink 4")
    assert r["latency_s"] == pytest.approx(66.8e-6)
    assert r["bus_bandwidth_bytes_per_s"] == pytest.approx(630.36e9)
    assert r["bandwidth_bytes_per_s"] == pytest.approx(336.192e9)
    assert r["seconds"] == pytest.approx(66.8e-6 + 16384 / 336.192e9)
    assert r["nodes"] == 2 and r["network"] == "InfiniBand NDR x8"


def test_nvls_tree_on_four_servers_is_bound_by_the_network():
    # 25 + 2 x log2(4) x 20.9 = 108.6 us; bus min(630.36, 400) = 400 GB/s (no doubling
    # beyond two nodes); x 32 / 62 = 206.45 GB/s.
    r = multinode.nvls_tree_allreduce(1e6, 32, "NVLink 4")
    assert r["latency_s"] == pytest.approx(108.6e-6)
    assert r["bandwidth_bytes_per_s"] == pytest.approx(400e9 * 32 / 62)


def test_nvls_tree_loses_to_ncclss_tree_at_decode_sizes_and_wins_large():
    for batch in (1, 128):          # 16 kB and 2 MB
        s = batch * 8192 * 2
        tree = collectives.allreduce_protocols(s, 16, "NVLink 4").seconds.min()
        assert multinode.nvls_tree_allreduce(s, 16)["seconds"] > tree
    big = 256e6
    assert multinode.nvls_tree_allreduce(big, 16)["seconds"] < \
        collectives.allreduce_protocols(big, 16, "NVLink 4").seconds.min()


@pytest.mark.parametrize("call, error, words", [
    (lambda: multinode.nvls_tree_allreduce(1e6, 8), ValueError, "only across nodes"),
    (lambda: multinode.nvls_tree_allreduce(1e6, 16, "NVLink 3"), ValueError, "NVSwitch"),
    (lambda: multinode.nvls_tree_allreduce(-1, 16), ValueError, "n_bytes"),
    (lambda: multinode.nvls_tree_allreduce(1e6, 0), ValueError, "n_devices"),
    (lambda: multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 3, achievable=False), ValueError, "divide"),
    (lambda: multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 16, 2, achievable=False), ValueError, "domain"),
    (lambda: multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 2, batch=0, achievable=False), ValueError,
     "batch"),
])
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_tp8_pp2_is_tp8s_step_split_in_two_plus_one_send():
    # tp_pp_decode's default (achievable=False): a stage is half TP8's ceiling.
    tp8 = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 8, 4096, achievable=False,
                             parts=True)
    r = multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 2, batch=8, context=4096, achievable=False)
    # One hand-off over InfiniBand NDR, NCCL's Simple protocol through one NIC:
    # 8.4 us + 14 us + [8, 8192] fp16 = 131,072 B at 400 GB/s / 8 = 50 GB/s (2.62 us).
    send = 8.4e-6 + 14e-6 + 131072 / 50e9
    assert r["stage_s"] == pytest.approx(tp8["total_s"] / 2)
    assert r["send_s"] == pytest.approx(send)
    assert r["latency_s"] == pytest.approx(tp8["total_s"] + send)
    # Two micro-batches of 8: each stage serves one per (stage + send), and a token's
    # round trip is the latency: 16 / max(latency, 2 x (stage + send)).
    assert r["tokens_per_s"] == pytest.approx(16 / (tp8["total_s"] + 2 * send))
    # One micro-batch: the stages take turns, tokens/s = batch / latency.
    one = multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 2, batch=8, context=4096,
                                 micro_batches=1, achievable=False)
    assert one["tokens_per_s"] == pytest.approx(8 / one["latency_s"])


def test_tp_pp_on_the_achievable_model():
    # The stage is 1/pp of the TP group's achievable step; the send is priced as before.
    tp8 = parallel.tp_step_s("llama-2-70b", "H100 SXM", 8, 8, 4096, achievable=True, parts=True)
    roof = multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 2, batch=8, context=4096, achievable=False)
    r = multinode.tp_pp_decode("llama-2-70b", "H100 SXM", 8, 2, batch=8, context=4096,
                               achievable=True)
    assert r["stage_s"] == pytest.approx(tp8["total_s"] / 2)
    assert r["send_s"] == roof["send_s"]
    assert r["latency_s"] == pytest.approx(tp8["total_s"] + r["send_s"])
    assert r["tokens_per_s"] < roof["tokens_per_s"]

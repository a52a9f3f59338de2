"""MoE at rack scale (chapter *Mixtures of experts*): node-limited routing's expected nodes,
DeepSeek's EPLB placement, and the matmul format of an expert-parallel step, each against
values counted by hand."""

import pytest

from gpuinfer.predict import expert_parallel as ep


def test_nodes_touched_on_a_small_case_counted_by_hand():
    # 4 experts on 2 nodes (2 a node), top-2: the 6 pairs of experts, 2 of them on one
    # node ({0,1}, {2,3}), 4 across both: 2 x 2/6 x 1 node + 4/6 x 2 nodes = 10/6.
    assert ep.nodes_touched(4, 2, 2) == pytest.approx(10 / 6)
    # Limited to 1 node, both experts lie on it.
    assert ep.nodes_touched(4, 2, 2, max_nodes=1) == pytest.approx(1.0)
    # max_nodes = n_nodes is the unlimited case.
    assert ep.nodes_touched(4, 2, 2, max_nodes=2) == ep.nodes_touched(4, 2, 2)


def test_nodes_touched_for_deepseek_v3_on_8_nodes():
    # 256 experts, 32 a node, top-8. A node is missed with probability C(224,8)/C(256,8)
    # = prod_{i<8} (224 - i)/(256 - i) = 0.33817; 8 x (1 - 0.33817) = 5.2947 nodes.
    miss = 1.0
    for i in range(8):
        miss *= (224 - i) / (256 - i)
    assert ep.nodes_touched(256, 8, 8) == pytest.approx(8 * (1 - miss), rel=1e-12)
    assert ep.nodes_touched(256, 8, 8) == pytest.approx(5.2947, abs=1e-4)
    # At most 4 nodes: 8 of 128 experts, a node missed with prod (96 - i)/(128 - i)
    # = 0.09275; 4 x 0.90725 = 3.6290: fewer than the 4 allowed.
    miss4 = 1.0
    for i in range(8):
        miss4 *= (96 - i) / (128 - i)
    assert ep.nodes_touched(256, 8, 8, 4) == pytest.approx(4 * (1 - miss4), rel=1e-12)
    assert ep.nodes_touched(256, 8, 8, 4) == pytest.approx(3.6290, abs=1e-4)


@pytest.mark.parametrize("args, word", [
    ((256, 8, 3), "n_nodes"),               # 3 does not divide 256
    ((256, 8, 8, 9), "max_nodes"),          # more than the nodes there are
    ((16, 8, 8, 1), "max_nodes"),           # 1 node of 2 experts cannot hold 8
    ((256, 0, 8), "experts_per_token"),
    ((256, 300, 8), "experts_per_token"),
])
def test_nodes_touched_refuses_bad_input(args, word):
    with pytest.raises(ValueError, match=word):
        ep.nodes_touched(*args)


def test_eplb_packs_the_heaviest_first_on_the_least_loaded_device():
    # Loads 8, 4, 2, 2 on 2 devices, 2 slots each: 8 -> A, 4 -> B, 2 -> B (6 < 8), and
    # B is full, so 2 -> A: A = 10, B = 6, mean 8: 10/8 = 1.25.
    assert ep.eplb_imbalance([8, 4, 2, 2], 2) == pytest.approx(1.25)


def test_eplb_replicates_the_expert_with_the_most_load_a_replica():
    # 2 redundant: expert 0 (8) gets a replica (4 + 4); then experts 0 (4 a replica) and 1
    # (4) tie and the first, expert 0, gets the second (8/3 each). 3 slots a device:
    # 4 -> A; 8/3 -> B; 8/3 -> B (2.67 < 4); 8/3 -> A (4 < 5.33); 2 -> B (5.33 < 6.67),
    # B full; 2 -> A. A = 4 + 8/3 + 2 = 8.67, B = 16/3 + 2 = 7.33; mean 8: 8.67/8 = 1.0833.
    assert ep.eplb_imbalance([8, 4, 2, 2], 2, 2) == pytest.approx((4 + 8 / 3 + 2) / 8)


def test_eplb_is_perfect_when_the_loads_allow_it():
    # Equal loads, equal slots: every device gets the same.
    assert ep.eplb_imbalance([3.0] * 8, 4) == 1.0
    # One device, nothing to balance.
    assert ep.eplb_imbalance([5, 1, 1], 1) == 1.0


@pytest.mark.parametrize("loads, n, r, word", [
    ([1, 1, 1], 2, 0, "n_devices"),          # 3 slots on 2 devices
    ([[1, 1], [1, 1]], 2, 0, "1-D"),
    ([1, -1], 2, 0, "non-negative"),
    ([0, 0], 2, 0, "not all zero"),
    ([1, float("nan")], 2, 0, "finite"),
])
def test_eplb_refuses_bad_input(loads, n, r, word):
    with pytest.raises(ValueError, match=word):
        ep.eplb_imbalance(loads, n, r)


def test_a_compute_format_changes_only_the_matmuls_peak():
    # DeepSeek-V3's fp8 weights on 8 H200s compute at the 16-bit peak unless told
    # (dtypes.formats: a quantised weight format is weight-only), so compute_dtype="fp16"
    # changes nothing; fp8 matmuls (W8A8) double the peak (1,979 against 989 TFLOP/s),
    # with activations in fp8, and leave the weights and the all-to-alls (fp8 dispatch,
    # bf16 combine) as they were.
    kw = dict(batch=512, context=1024, dtype="fp8")
    base = ep.ep_decode_breakdown("deepseek-v3", "H200", 8, **kw, achievable=False)
    same = ep.ep_decode_breakdown("deepseek-v3", "H200", 8, compute_dtype="fp16", **kw, achievable=False)
    w8a8 = ep.ep_decode_breakdown("deepseek-v3", "H200", 8, compute_dtype="fp8", **kw, achievable=False)
    assert same["total_s"] == base["total_s"]
    assert w8a8["weight_bytes_per_device"] == base["weight_bytes_per_device"]
    assert w8a8["comm_s"] == base["comm_s"]
    for op in ("experts", "lm_head"):
        assert base["ops"].loc[op, "compute_s"] / w8a8["ops"].loc[op, "compute_s"] == \
            pytest.approx(1979e12 / 989e12, rel=1e-9)

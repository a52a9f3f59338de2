"""Fusion byte counts, auto-tuning and memory plans, against values worked by hand."""


import math

import pytest
import torch

from gpuinfer import hardware
from gpuinfer.predict import llm
from gpuinfer.predict import architectures
from gpuinfer.measure import fusion
from gpuinfer.measure import tuning
from gpuinfer.predict import colocation
from gpuinfer.predict import mig_sizing

# --- layer fusion -----------------------------------------------------------------------

def test_unfused_chain_bytes_by_hand():
    # Four unary ops over 1e6 fp32 elements: each reads 4 MB and writes 4 MB -> 32 MB.
    assert fusion.elementwise_chain_bytes(1_000_000, [1, 1, 1, 1], "fp32") == 32e6
    # Fused: read the input once, write the output once -> 8 MB.
    assert fusion.elementwise_chain_bytes(1_000_000, [1, 1, 1, 1], "fp32", fused=True) == 8e6
    # A residual add in the chain reads a second tensor: unfused 2+3 = 5, fused 3 (x n x 2 B).
    assert fusion.elementwise_chain_bytes(10, [1, 2], "fp16") == 100
    assert fusion.elementwise_chain_bytes(10, [1, 2], "fp16", fused=True,
                                           external_inputs=2) == 60


def test_gelu_chain_moves_nine_times_the_bytes_of_the_fused_kernel():
    # sum(inputs + 1) = 2+2+3+2+2+2+3+2 = 18 tensors of n; fused: 2.
    n = 1 << 20
    unfused = fusion.elementwise_chain_bytes(n, fusion.GELU_TANH_OP_INPUTS, "fp32")
    fused = fusion.elementwise_chain_bytes(n, fusion.GELU_TANH_OP_INPUTS, "fp32", fused=True)
    assert unfused == 18 * n * 4 and fused == 2 * n * 4


def test_gelu_op_table_matches_the_traced_graph():
    # Trace the unfused function: one graph node per elementwise op, and the count of
    # tensor arguments of each node is the table the byte count uses.
    import torch.fx

    graph = torch.fx.symbolic_trace(fusion.gelu_tanh_unfused).graph
    ops = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
    inputs = tuple(sum(isinstance(a, torch.fx.Node) for a in n.args) for n in ops)
    assert inputs == fusion.GELU_TANH_OP_INPUTS


def test_unfused_and_fused_gelu_agree():
    # The same function: compared in float64 on a seeded input (in float32 the two round
    # differently where 1 + tanh cancels; a CI run once saw 7.7e-5 between them there).
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    x = torch.cat([x, torch.linspace(-10.0, 10.0, 2001, dtype=torch.float64)])
    torch.testing.assert_close(fusion.gelu_tanh_unfused(x), fusion.gelu_tanh_fused(x),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("args, match", [
    ((0, [1]), "n_elements"), ((10, []), "op_inputs"), ((10, [1.5]), "input count"),
    ((2.5, [1]), "n_elements"),
])
def test_chain_bytes_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        fusion.elementwise_chain_bytes(*args)


# --- auto-tuning ------------------------------------------------------------------------

def test_autotune_ranks_equivalent_candidates_fastest_first():
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)
    df = tuning.autotune({"matmul": lambda: x @ w, "linear": lambda: torch.nn.functional.linear(x, w.t())},
                          min_run_s=0.01)
    assert set(df["candidate"]) == {"matmul", "linear"}
    assert df["seconds"].is_monotonic_increasing and (df["seconds"] > 0).all()
    assert df["speedup_vs_slowest"].iloc[-1] == 1.0


def test_autotune_refuses_a_candidate_that_computes_something_else():
    x = torch.randn(16)
    with pytest.raises(ValueError, match="'wrong' does not compute"):
        tuning.autotune({"right": lambda: x * 2, "wrong": lambda: x * 3}, min_run_s=0.01)
    with pytest.raises(ValueError, match="empty"):
        tuning.autotune({})


# --- memory plans -----------------------------------------------------------------------

def test_deployment_of_a_catalogue_model_by_hand():
    # Llama-2-7B fp16, 2 instances, 8 sequences x 1024 tokens each: KV per token is
    # 2 x 32 layers x 32 heads x 128 x 2 B = 524,288 B (the hardware reference).
    d = colocation.deployment("chat", "llama-2-7b", instances=2, batch=8, context=1024,
                           workspace_bytes=1e9)
    assert d.weight_bytes == architectures.get("llama-2-7b").n_params * 2
    assert d.kv_cache_bytes == 8 * 1024 * 524_288
    assert d.total_bytes == 2 * (d.weight_bytes + 8 * 1024 * 524_288 + 1e9)


def test_each_instance_holds_its_own_weights():
    one = colocation.deployment("m", n_params=1e9, dtype="fp16")
    three = colocation.deployment("m", n_params=1e9, dtype="fp16", instances=3)
    assert one.total_bytes == 2e9 and three.total_bytes == 6e9


def test_tensorrt_instances_share_one_engine():
    # Three instances on one GPU: PyTorch loads three copies of 2e9 B, TensorRT one,
    # each instance adding its own 0.5 GB of workspace.
    torch_ = colocation.deployment("m", n_params=1e9, instances=3, workspace_bytes=0.5e9)
    trt = colocation.deployment("m", n_params=1e9, instances=3, workspace_bytes=0.5e9,
                             backend="tensorrt")
    assert torch_.total_bytes == 3 * (2e9 + 0.5e9)
    assert trt.total_bytes == 2e9 + 3 * 0.5e9
    # T4 (its real bytes) less the default reserve: how many instances fit.
    room = hardware.get("T4").memory_bytes - llm.DEFAULT_RESERVE_BYTES
    assert colocation.max_instances(torch_, "T4") == int(room // 2.5e9)
    assert colocation.max_instances(trt, "T4") == int((room - 2e9) // 0.5e9)


def test_memory_plan_against_a_t4_by_hand():
    # Two 7B-class fp16 instances (2 x 13.5 GB) do not fit a T4; one does.
    t4 = hardware.get("T4").memory_bytes
    chat = colocation.deployment("chat", "llama-2-7b")
    plan = colocation.memory_plan([chat], "T4", reserve_bytes=0)
    assert plan.fits and plan.free_bytes == pytest.approx(t4 - chat.weight_bytes)
    two = colocation.memory_plan([colocation.deployment("chat", "llama-2-7b", instances=2)], "T4")
    assert not two.fits and "NOT fit" in repr(two)
    table = plan.table()
    assert table.loc[0, "fraction_of_memory"] == pytest.approx(chat.weight_bytes / t4)
    default = colocation.memory_plan([chat], "T4")
    assert default.free_bytes == pytest.approx(plan.free_bytes - llm.DEFAULT_RESERVE_BYTES)


def test_max_instances_by_hand():
    # A 1e9-parameter fp16 model with 1 GB of workspace: 3 GB an instance; beside a
    # 70e9-byte deployment on an H200 (its real bytes, nothing reserved).
    h200 = hardware.get("H200").memory_bytes
    small = colocation.deployment("small", n_params=1e9, workspace_bytes=1e9)
    big = colocation.Deployment("big", weight_bytes=70e9)
    assert colocation.max_instances(small, "H200", others=[big], reserve_bytes=0) \
        == int((h200 - 70e9) // 3e9)
    assert colocation.max_instances(small, "H200", reserve_bytes=0) == int(h200 // 3e9)
    assert colocation.max_instances(colocation.Deployment("huge", 200e9), "H200") == 0


@pytest.mark.parametrize("call, error, words", [
    (lambda: colocation.deployment("x"), ValueError, "exactly one"),
    (lambda: colocation.Deployment("x", 1e9, instances=0), ValueError, "instances"),
    (lambda: colocation.Deployment("x", 1e9, instances=2.5), ValueError, "instances"),
    (lambda: colocation.deployment("x", n_params=1e9, instances=2.5), ValueError, "instances"),
    (lambda: colocation.Deployment("x", -1.0), ValueError, "weight_bytes"),
    (lambda: colocation.Deployment("x", float("nan")), ValueError, "weight_bytes"),
    (lambda: colocation.Deployment(None, 1.0), TypeError, "name"),
    (lambda: colocation.memory_plan([], "T4"), ValueError, "empty"),
    (lambda: colocation.memory_plan(colocation.Deployment("x", 1.0), "T4"), TypeError, "list"),
    (lambda: colocation.memory_plan(["x"], "T4"), TypeError, "Deployment"),
    (lambda: colocation.memory_plan([colocation.Deployment("x", 1.0)], "T5000"), KeyError, "device"),
    (lambda: colocation.memory_plan([colocation.Deployment("x", 1.0)], "T4", reserve_bytes=2e10),
     ValueError, "reserve_bytes"),
    (lambda: colocation.deployment("x", "llama-9"), KeyError, "model"),
    (lambda: colocation.deployment("x", n_params=1e9, backend="onnx"), KeyError, "backend"),
    (lambda: fusion.elementwise_chain_bytes(10, 3), TypeError, "op_inputs"),
    (lambda: tuning.autotune([lambda: 1]), TypeError, "mapping"),
    (lambda: tuning.autotune({"a": 3}), TypeError, "callable"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_mig_options_and_the_smallest_profile():
    # Llama-3-8B fp16, 8 sequences of 4,096 tokens on an H100: weights 16.06 GB + 8 x
    # 4096 x 131,072 B of KV = 4.3 GB do not fit a 1g.10gb or 1g.20gb slice.
    table = mig_sizing.mig_options("llama-3-8b", accelerator="H100 SXM", batch=8,
                                   context=4096)
    assert list(table.index[:2]) == ["1g.10gb", "1g.20gb"]
    assert (table["max_batch"].diff().dropna() >= -1e9).all()
    small = mig_sizing.smallest_mig_profile("llama-3-8b", "H100 SXM", 8, 4096, tpot_s=1.0)
    assert table.loc[small, "max_batch"] >= 8
    assert all(table.loc[p, "max_batch"] < 8 for p in table.index[:list(table.index).index(small)])
    assert mig_sizing.smallest_mig_profile("llama-3-8b", "H100 SXM", 8, 4096, tpot_s=1e-6) is None


def test_mig_options_decide_on_the_achievable_step_with_the_ceiling_beside():
    # Llama-3-8B fp16, 8 sequences of 4,096 tokens on a 3g.40gb slice of an H100 SXM: half
    # the memory slices, so half of 3.35e12 B/s = 1.675e12. Bytes a step: matmul weights
    # 2 x 7,504,658,432 = 15,009,316,864 (the embedding is gathered, not read) + KV
    # 8 x 4096 x 131,072 = 4,294,967,296: 19,304,284,160 B.
    #   ceiling: 19.304e9 / 1.675e12 = 11.525 ms (activations add ~0.2%);
    #   achievable (achievable.FITTED: 0.85 of the bandwidth, 32 layers x 13 kernels x
    #   0.5 us of gaps, 1.6 ms a step): 19.304e9 / (0.85 x 1.675e12) = 13.559 ms
    #   + 0.208 + 1.6 = 15.367 ms.
    from gpuinfer.predict import achievable, mig_sizing

    step_bytes = 2 * 7_504_658_432 + 8 * 4096 * 131_072
    table = mig_sizing.mig_options("llama-3-8b", accelerator="H100 SXM", batch=8,
                                   context=4096)
    row = table.loc["3g.40gb"]
    assert row["tpot_ceiling_s"] == pytest.approx(step_bytes / 1.675e12, rel=0.005)
    fit = achievable.FITTED      # bandwidth 0.85, 13 kernels x 0.5 us a layer, 1.6 ms
    assert row["tpot_s"] == pytest.approx(
        step_bytes / (fit.bandwidth * 1.675e12)
        + 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s, rel=0.005)
    ceiling = mig_sizing.mig_options("llama-3-8b", accelerator="H100 SXM", batch=8,
                                     context=4096, achievable=False)
    assert ceiling.loc["3g.40gb", "tpot_s"] == row["tpot_ceiling_s"]
    # A 12 ms TPOT: 3g.40gb meets it on the ceiling (11.5 ms), not on the achievable model
    # (15.4 ms); the whole GPU does (8.6 ms achievable).
    assert mig_sizing.smallest_mig_profile("llama-3-8b", "H100 SXM", 8, 4096, 0.012,
                                           achievable=False) == "3g.40gb"
    assert mig_sizing.smallest_mig_profile("llama-3-8b", "H100 SXM", 8, 4096, 0.012) == "7g.80gb"
    with pytest.raises(TypeError, match="achievable"):
        mig_sizing.mig_options("llama-3-8b", accelerator="H100 SXM", batch=8, context=4096,
                               achievable="yes")


def test_memory_plan_refuses_a_bad_reserve():
    from gpuinfer.predict import colocation
    from gpuinfer import hardware

    t4 = hardware.get("T4")
    # NaN made every verdict NaN, inf a capacity of -inf, a negative reserve more memory
    # than the card has: each is refused, naming the parameter.
    # A reserve of all the card's memory or more (1e30, 15,843,721,216 B) left a capacity
    # of zero or below.
    for bad in (math.nan, math.inf, -1e12, 1e30, 15_843_721_216):
        with pytest.raises(ValueError, match="reserve_bytes"):
            colocation.MemoryPlan((), t4, bad)
    # A valid reserve: capacity = memory - reserve: a T4's 15,843,721,216 B (what torch
    # reports, the catalogue's memory_bytes) - 1e9 = 14,843,721,216 B.
    plan = colocation.MemoryPlan((), t4, 1e9)
    assert plan.capacity_bytes == 14_843_721_216

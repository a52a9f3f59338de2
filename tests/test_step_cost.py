"""The closed-form step cost (`gpuinfer.predict.step_cost`): a step's time from its aggregates,
checked against the step model's table row by row (`llm.forward_step_breakdown`) and
against arithmetic by hand."""

import numpy as np
import pytest

from gpuinfer import hardware
from gpuinfer.predict import llm, step_cost
from gpuinfer.predict import step_model


def test_step_timer_is_the_sum_of_the_breakdowns_rows_on_random_mixed_steps():
    # step_timer builds the table in closed form (StepCost); forward_step_breakdown builds
    # it row by row (StepModel.step_terms) and times it with roofline.evaluate. The two
    # must agree on any mix of prefill chunks and decodes, dense or MoE, with or without
    # FlashAttention (flash=False adds the score matrix's bytes).
    rng = np.random.default_rng(11)
    for model, gpu, dtype, flash in [("llama-3-8b", "H100 SXM", "fp16", True),
                                     ("llama-2-7b", "A100 80GB", "int4", False),
                                     ("mixtral-8x7b", "H100 SXM", "fp16", True),
                                     ("deepseek-v3", "H200", "fp8", False),
                                     ("qwen3-30b-a3b", "L4", "fp8", True)]:
        timer = step_cost.step_timer(model, gpu, dtype, flash=flash)
        for _ in range(25):
            b = int(rng.integers(1, 40))
            q = np.where(rng.random(b) < 0.3, rng.integers(1, 900, b), 1)
            c = rng.integers(0, 4000, b)
            lg = (rng.random(b) < 0.7).astype(int)
            rows = llm.forward_step_breakdown(model, gpu, q, c, dtype, logits=lg, flash=flash)
            assert timer(q, c, lg) == pytest.approx(rows["seconds"].sum(), rel=1e-12)
            assert llm.forward_step_s(model, gpu, q, c, dtype, logits=lg,
                                         flash=flash) == timer(q, c, lg)


def test_step_aggregates_by_hand():
    # Two sequences: a decode (q = 1 on c = 10 cached) and a chunk (q = 3 on c = 4) that
    # does not end its prompt. New tokens 1 + 3 = 4; logits rows 1; pairs: 1 x 10 + 1 = 11
    # for the decode, 3 x 4 + (1 + 2 + 3) = 18 for the chunk, 29 in all; cached 14; score
    # entries q (c + q): 1 x 11 + 3 x 7 = 32.
    z = step_cost.step_aggregates([1, 3], [10, 4], [1, 0])
    assert list(z) == [1.0, 4.0, 1.0, 29.0, 14.0, 32.0]
    assert len(z) == len(step_cost.STEP_AGGREGATES)
    assert step_cost.step_aggregates([1, 3], [10, 4])[2] == 2.0   # default: every sequence


def test_step_cost_takes_other_rates():
    # Each row at half the datasheet bandwidth and peak takes exactly twice as long.
    gpu = hardware.get("H100 SXM")
    full = step_cost.StepCost("llama-3-8b", gpu)
    half = step_cost.StepCost("llama-3-8b", gpu, rates=lambda rows: tuple(
        x / 2 for x in step_cost.datasheet_rates(rows, gpu)))
    assert half([1, 512], [300, 0]) == pytest.approx(2 * full([1, 512], [300, 0]), rel=1e-12)
    # The rows it is given: (name, does arithmetic, compute dtype: "fp8" is OCP FP8 E4M3);
    # the embedding is a gather.
    seen = []
    step_cost.StepCost("llama-3-8b", gpu, "int4", compute_dtype="fp8",
                 rates=lambda rows: seen.extend(rows) or step_cost.datasheet_rates(rows, gpu))
    assert [(n, bool(f), d) for n, f, d in seen] == [
        ("embedding", False, "fp8_e4m3"), ("linear", True, "fp8_e4m3"),
        ("attention", True, "fp8_e4m3"), ("lm_head", True, "fp8_e4m3")]


def test_the_closed_form_rows_are_the_step_models_rows():
    # Each row's FLOPs, bytes and seconds, dense and MoE (DeepSeek-V3's MLA and shared
    # expert, gpt-oss's MXFP4 experts), on random mixed steps, as forward_step_breakdown
    # gives them.
    rng = np.random.default_rng(7)
    for model, gpu, dtype in [("llama-3-8b", "H100 SXM", "fp16"), ("llama-2-7b", "A100 80GB", "int4"),
                              ("mixtral-8x7b", "H100 SXM", "fp16"), ("deepseek-v3", "H200", "fp8"),
                              ("gpt-oss-20b", "H100 SXM", "bf16"), ("qwen3-30b-a3b", "L4", "fp8")]:
        t = step_cost.StepCost(model, gpu, dtype)
        for _ in range(20):
            b = int(rng.integers(1, 40))
            q = np.where(rng.random(b) < 0.2, rng.integers(1, 900, b), 1)
            c = rng.integers(0, 4000, b)
            lg = (rng.random(b) < 0.7).astype(float)
            ref = llm.forward_step_breakdown(model, gpu, q, c, dtype, logits=lg)
            z = step_cost.step_aggregates(q, c, lg)[:, None]
            f, by = t.flops_bytes(z)
            assert t.names == list(ref.index)
            np.testing.assert_allclose(f[:, 0], ref["flops"], rtol=1e-9)
            np.testing.assert_allclose(by[:, 0], ref["bytes"], rtol=1e-9)
            np.testing.assert_allclose(t.rows(z)[:, 0], ref["seconds"], rtol=1e-9)


def test_an_moe_steps_bytes_grow_with_the_batch_as_experts_touched():
    # Mixtral-8x7B fp16, decode at context 0: the experts row reads touched experts x 32
    # layers x 3 x 4,096 x 14,336 x 2 B (352,321,536 B an expert a layer), touched = 8 (1 -
    # (3/4)^b): 2 at batch 1, 8 (1 - 0.75^4) = 5.47 at 4, 7.9999 at 64; a dense model's
    # weight bytes do not move.
    m = "mixtral-8x7b"
    t = step_cost.StepCost(m, "H100 SXM", "fp16")
    row = t.names.index("experts")
    act = 2 * 32 * (2 * 4096 + 3 * 14336) * 2    # a token's k expert MLPs' activations
    for b, touched in ((1, 2.0), (4, 8 * (1 - 0.75 ** 4)), (64, 8 * (1 - 0.75 ** 64))):
        z = np.array([1.0, b, b, b, 0.0, b])[:, None]
        experts = t.flops_bytes(z)[1][row, 0] - b * act
        assert experts == pytest.approx(touched * 32 * 352_321_536, rel=1e-12)
        assert experts == pytest.approx(32 * 352_321_536 * step_model.experts_touched(m, b))
    dense = step_cost.StepCost("llama-3-8b", "H100 SXM", "fp16")
    lin = dense.names.index("linear")
    w = [dense.flops_bytes(np.array([1.0, b, b, b, 0.0, b])[:, None])[1][lin, 0]
         - b * dense.cb[lin, 1] for b in (1, 64)]
    # Llama-3-8B's matmul weights per layer: Q, K, V, O: 4096 x (4096 + 2 x 1024) + 4096 x
    # 4096 = 41,943,040; gate, up, down: 3 x 4096 x 14,336 = 176,160,768; together
    # 218,103,808; x 32 layers = 6,979,321,856 weights, 2 B each in fp16.
    assert w[0] == w[1] == 2 * 6_979_321_856

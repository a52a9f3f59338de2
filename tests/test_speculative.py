"""Speculative decoding against Leviathan et al. (2023) and arithmetic written out by hand."""

import math

import numpy as np
import pytest

from gpuinfer import hardware, llm, speculative as spec
from gpuinfer import speculative

TARGET, GPU = "llama-3-8b", "H100 SXM"
DRAFT = spec.LLAMA_3_2_1B


# --- Leviathan et al.'s closed forms -----------------------------------------------------

def test_no_acceptance_gives_one_token_per_step():
    # alpha = 0: every draft is rejected; the target still adds its own token.
    for k in (0, 1, 4, 10):
        assert spec.expected_tokens(0.0, k) == 1.0


def test_full_acceptance_gives_k_plus_one():
    # alpha = 1: all k drafts pass and the target adds one more: k + 1.
    for k in (0, 1, 4, 10):
        assert spec.expected_tokens(1.0, k) == k + 1


def test_expected_tokens_by_hand():
    # alpha = 0.8, k = 4: (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616
    assert spec.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    # The same as the series 1 + a + a^2 + ... + a^k.
    assert spec.expected_tokens(0.6, 3) == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    np.testing.assert_allclose(spec.expected_tokens([0.0, 0.5, 1.0], 2), [1.0, 1.75, 3.0])


def test_speedup_by_hand():
    # Leviathan et al.: E / (k c + 1). alpha 0.8, k 4, c 0.05: 3.3616 / 1.2 = 2.8013
    assert spec.speedup(0.8, 4, 0.05) == pytest.approx(3.3616 / 1.2)
    # A free draft (c = 0) gives the expected tokens; alpha = 0 with a costly draft loses.
    assert spec.speedup(0.7, 3, 0.0) == pytest.approx(spec.expected_tokens(0.7, 3))
    assert spec.speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)


def test_draft_config_matches_the_published_parameter_count():
    # Llama-3.2-1B: 1,235,814,400 parameters (its safetensors metadata), tied embeddings.
    assert DRAFT.n_params == 1_235_814_400


# --- on the per-operation roofline -------------------------------------------------------

def test_round_breakdown_adds_up_the_package_tables():
    b, c, k = 4, 512, 3
    r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.7, k=k, batch=b, context=c)
    # Plain step: one target decode step.
    assert r["plain_step_s"] == pytest.approx(llm.decode_step_time(TARGET, GPU, b, c))
    # Verify: matmuls, embedding and LM head over b (k + 1) = 16 tokens, attention of
    # 4 new tokens per sequence on 512 cached.
    wide = llm.decode_step_breakdown(TARGET, GPU, 16, c)["seconds"]
    attn = llm.forward_step_breakdown(TARGET, GPU, [4] * 4, [c] * 4).loc["attention", "seconds"]
    assert r["verify_s"] == pytest.approx(wide["embedding"] + wide["linear"]
                                          + wide["lm_head"] + attn)
    # Draft: 3 decode steps of the draft at contexts 512, 513, 514.
    assert r["draft_s"] == pytest.approx(sum(llm.decode_step_time(DRAFT, GPU, b, c + j)
                                             for j in range(3)))
    e = 1 + 0.7 + 0.49 + 0.343
    assert r["speedup"] == pytest.approx(e * r["plain_step_s"] / (r["verify_s"] + r["draft_s"]))


def test_at_batch_1_verifying_k_plus_1_tokens_costs_about_one_step():
    # Memory-bound: 5 tokens read the same 16 GB of weights as 1 token.
    r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=1, context=256)
    assert r["verify_s"] == pytest.approx(r["plain_step_s"], rel=0.02)
    # Then the roofline agrees with Leviathan et al.'s formula at the measured c.
    assert r["speedup"] == pytest.approx(spec.speedup(0.8, 4, r["cost_ratio"]), rel=0.02)


def test_the_gain_shrinks_with_the_batch_and_vanishes_when_compute_bound():
    gains = [spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=b,
                                 context=256) for b in (1, 16, 64, 256, 1024)]
    assert all(x > y for x, y in zip(gains, gains[1:]))
    assert gains[0] > 2
    # Past the compute-bound batch (about 326 on an H100 for fp16 Llama-3-8B), verifying
    # 5 tokens a sequence costs about 5 plain steps: 3.36 tokens for 5+ steps' work.
    assert llm.compute_bound_batch(TARGET, GPU) < 1024
    assert gains[-1] < 1


def test_no_acceptance_never_pays():
    for b in (1, 64):
        assert spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.0, k=3, batch=b) < 1


def test_best_k_is_zero_when_speculation_cannot_pay():
    assert spec.best_k(TARGET, DRAFT, GPU, acceptance=0.0, max_k=4) == 0
    assert spec.best_k(TARGET, DRAFT, GPU, acceptance=0.9, max_k=8) > 1


# --- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, words", [
    (lambda: spec.expected_tokens(1.2, 3), ValueError, "acceptance"),
    (lambda: spec.expected_tokens(80, 3), ValueError, "percentage"),
    (lambda: spec.expected_tokens(math.nan, 3), ValueError, "acceptance"),
    (lambda: spec.expected_tokens(-0.1, 3), ValueError, "acceptance"),
    (lambda: spec.expected_tokens("0.5", 3), TypeError, "acceptance"),
    (lambda: spec.expected_tokens(0.5, 2.5), ValueError, "k must"),
    (lambda: spec.expected_tokens(0.5, -1), ValueError, "k must"),
    (lambda: spec.expected_tokens(0.5, 10**6), ValueError, "k must"),
    (lambda: spec.expected_tokens(0.5, None), TypeError, "k must"),
    (lambda: spec.speedup(0.5, 3, -0.1), ValueError, "cost_ratio"),
    (lambda: spec.speedup(0.5, 3, math.inf), ValueError, "cost_ratio"),
    (lambda: spec.speedup(0.5, 3, None), TypeError, "cost_ratio"),
    (lambda: spec.decode_speedup("llama-9", DRAFT, GPU, acceptance=0.5, k=2), KeyError,
     "llama-9"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, "H900", acceptance=0.5, k=2), KeyError, "H900"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, batch=0),
     ValueError, "batch"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, batch=1.5),
     ValueError, "batch"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, context=-1),
     ValueError, "context"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=[0.5, 0.6], k=2),
     TypeError, "acceptance"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, dtype="fp7"),
     KeyError, "fp7"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, "T4", acceptance=0.5, k=2, dtype="bf16"),
     ValueError, "peak"),
    (lambda: spec.best_k(TARGET, DRAFT, GPU, acceptance=0.5, max_k=-1), ValueError, "max_k"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_speedup_at_a_measured_verify_cost():
    # alpha 0.8, k 4: E = (1 - 0.8^5) / 0.2 = 3.3616 tokens; c = 0.1; a verify step that
    # cost 1.5 plain steps: 3.3616 / (4 x 0.1 + 1.5).
    e = (1 - 0.8**5) / 0.2
    assert speculative.speedup(0.8, 4, 0.1, verify_cost=1.5) == pytest.approx(e / 1.9)
    assert speculative.speedup(0.8, 4, 0.1) == pytest.approx(e / 1.4)
    with pytest.raises(ValueError, match="verify_cost"):
        speculative.speedup(0.8, 4, 0.1, verify_cost=0)


def test_round_breakdown_says_whether_both_models_and_caches_fit():
    # Llama-3-8B (8,030,261,248 parameters) and Llama-3.2-1B (1,235,814,400) in fp16, the
    # 1 GiB reserve, and per token 2 x 32 layers x 1024 x 2 B = 131,072 B of target cache
    # plus 2 x 16 x 512 x 2 B = 32,768 B of draft cache, at context + k + 1 tokens each.
    fixed = 2 * 8_030_261_248 + 2 * 1_235_814_400 + 2**30
    per_seq = (8192 + 4 + 1) * (131_072 + 32_768)
    fits = (hardware.get(GPU).memory_bytes - fixed) // per_seq
    assert fits == 48
    for batch, want in [(int(fits), True), (int(fits) + 1, False)]:
        r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=batch, context=8192)
        assert r["memory_bytes"] == pytest.approx(fixed + batch * per_seq)
        assert r["fits"] is want

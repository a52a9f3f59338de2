"""Speculative decoding against Leviathan et al. (2023) and arithmetic written out by hand."""

import functools
import math

import numpy as np
import pytest

from gpuinfer import hardware
from gpuinfer.predict import llm, speculative as spec
from gpuinfer.predict import speculative

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
    r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.7, k=k, batch=b, context=c, achievable=False)
    # Plain step: one target decode step.
    assert r["plain_step_s"] == pytest.approx(llm.decode_step_s(TARGET, GPU, b, c))
    # Verify: matmuls, embedding and LM head over b (k + 1) = 16 tokens, attention of
    # 4 new tokens per sequence on 512 cached.
    wide = llm.decode_step_breakdown(TARGET, GPU, 16, c)["seconds"]
    attn = llm.forward_step_breakdown(TARGET, GPU, [4] * 4, [c] * 4).loc["attention", "seconds"]
    assert r["verify_s"] == pytest.approx(wide["embedding"] + wide["linear"]
                                          + wide["lm_head"] + attn)
    # Draft: 3 decode steps of the draft at contexts 512, 513, 514.
    assert r["draft_s"] == pytest.approx(sum(llm.decode_step_s(DRAFT, GPU, b, c + j)
                                             for j in range(3)))
    e = 1 + 0.7 + 0.49 + 0.343
    assert r["speedup"] == pytest.approx(e * r["plain_step_s"] / (r["verify_s"] + r["draft_s"]))


def test_at_batch_1_verifying_k_plus_1_tokens_costs_about_one_step():
    # Memory-bound: 5 tokens read the same 16 GB of weights as 1 token.
    r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=1, context=256, achievable=False)
    assert r["verify_s"] == pytest.approx(r["plain_step_s"], rel=0.02)
    # Then the roofline agrees with Leviathan et al.'s formula at the measured c.
    assert r["speedup"] == pytest.approx(spec.speedup(0.8, 4, r["cost_ratio"]), rel=0.02)


def test_the_gain_shrinks_with_the_batch_and_vanishes_when_compute_bound():
    gains = [spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=b,
                                 context=256, achievable=False) for b in (1, 16, 64, 256, 1024)]
    assert all(x > y for x, y in zip(gains, gains[1:]))
    assert gains[0] > 2
    # Past the compute-bound batch (about 326 on an H100 for fp16 Llama-3-8B), verifying
    # 5 tokens a sequence costs about 5 plain steps: 3.36 tokens for 5+ steps' work.
    assert llm.compute_bound_batch(TARGET, GPU) < 1024
    assert gains[-1] < 1


def test_no_acceptance_never_pays():
    for b in (1, 64):
        assert spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.0, k=3, batch=b, achievable=False) < 1


def test_best_k_is_zero_when_speculation_cannot_pay():
    assert spec.best_k(TARGET, DRAFT, GPU, acceptance=0.0, max_k=4, achievable=False) == 0
    assert spec.best_k(TARGET, DRAFT, GPU, acceptance=0.9, max_k=8, achievable=False) > 1


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
    (lambda: spec.decode_speedup("llama-9", DRAFT, GPU, acceptance=0.5, k=2, achievable=False), KeyError,
     "llama-9"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, "H900", acceptance=0.5, k=2, achievable=False), KeyError, "H900"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, batch=0, achievable=False),
     ValueError, "batch"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, batch=1.5, achievable=False),
     ValueError, "batch"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, context=-1, achievable=False),
     ValueError, "context"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=[0.5, 0.6], k=2, achievable=False),
     TypeError, "acceptance"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, GPU, acceptance=0.5, k=2, dtype="fp7", achievable=False),
     KeyError, "fp7"),
    (lambda: spec.decode_speedup(TARGET, DRAFT, "T4", acceptance=0.5, k=2, dtype="bf16", achievable=False),
     ValueError, "peak"),
    (lambda: spec.best_k(TARGET, DRAFT, GPU, acceptance=0.5, max_k=-1, achievable=False), ValueError, "max_k"),
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
        r = spec.round_breakdown(TARGET, DRAFT, GPU, acceptance=0.8, k=4, batch=batch, context=8192, achievable=False)
        assert r["memory_bytes"] == pytest.approx(fixed + batch * per_seq)
        assert r["fits"] is want


# --- priced on the achievable model; the variants engines ship (issue 22) -----------------

def test_the_achievable_round_reduces_to_the_ceiling_and_is_slower_otherwise():
    from gpuinfer.predict import achievable as A

    ones = A.Efficiency(matmul=1.0, bandwidth=1.0, attention=1.0, step_s=0.0,
                        kernel_gap_s=0.0, attention_dtype=None)
    kw = dict(acceptance=0.8, k=4, batch=8, context=512)
    ceiling = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "H100 SXM", **kw, achievable=False)
    same = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                       achievable=ones, **kw)
    for key in ("plain_step_s", "verify_s", "draft_s", "speedup"):
        assert same[key] == pytest.approx(ceiling[key], rel=1e-12)
    real = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                       achievable=True, **kw)
    assert real["plain_step_s"] > ceiling["plain_step_s"]
    assert real["draft_s"] > ceiling["draft_s"]


def test_a_draft_step_pays_its_kernel_gaps_and_without_graphs_its_launches():
    from gpuinfer.predict import achievable as A

    # Llama-3.2-1B: 16 layers x 13 kernels = 208. With every rate at its peak and a 0.5 us
    # gap a kernel, each draft step is its roofline time + 208 x 0.5 us = 104 us; no step
    # cost in a draft step (charged once a round, with the verify). The 13: the Efficiency's
    # default kernels_per_layer, A.KERNELS_PER_LAYER; the gap and launch times are given.
    kernels = 16 * A.KERNELS_PER_LAYER                                       # 208
    eff = A.Efficiency(matmul=1.0, bandwidth=1.0, attention=1.0, step_s=1e-3,
                       kernel_gap_s=0.5e-6, attention_dtype=None)
    r = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "B200", acceptance=0.8,
                                    k=3, achievable=eff)
    roof = sum(llm.decode_step_s("llama-3.2-1b", "B200", 1, j) for j in range(3))
    assert r["draft_s"] == pytest.approx(roof + 3 * kernels * 0.5e-6)
    # Eager: the host launches 208 kernels at 3.8 us = 790.4 us a step, more than the
    # B200 needs to read the 1B model (~0.32 ms at the datasheet rate): launch-bound.
    eager = A.Efficiency(matmul=1.0, bandwidth=1.0, attention=1.0, step_s=0.0,
                         kernel_gap_s=0.0, cuda_graphs=False, launch_s=3.8e-6,
                         attention_dtype=None)
    r = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "B200", acceptance=0.8,
                                    k=3, achievable=eager)
    assert roof / 3 < kernels * 3.8e-6
    assert r["draft_s"] == pytest.approx(3 * kernels * 3.8e-6)


def test_cutoff_batch_is_where_speculation_stops_paying():
    kw = dict(acceptance=0.8, k=4, context=512)
    b = speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM", **kw, achievable=False)
    assert 1 < b < 4096
    gain = functools.partial(speculative.decode_speedup, "llama-3-8b", "llama-3.2-1b",
                             "H100 SXM", achievable=False, **kw)
    assert gain(batch=b - 1) > 1 >= gain(batch=b)
    assert speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                    acceptance=0.0, k=4, achievable=False) == 1
    # A bound it still pays at: math.inf; the bound itself, where it stops: that batch.
    assert speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM", max_batch=b - 1,
                                    **kw, achievable=False) == math.inf
    assert speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM", max_batch=b,
                                    **kw, achievable=False) == b
    with pytest.raises(ValueError, match="max_batch"):
        speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM", max_batch=0, **kw, achievable=False)


def test_variants_cite_their_sources():
    df = speculative.variants()
    assert {"draft model", "Medusa", "EAGLE", "EAGLE-3", "MTP (DeepSeek-V3)",
            "n-gram / prompt lookup"} <= set(df.index)
    bib = open("references.bib", encoding="utf-8").read()
    for key in df["source"]:
        assert "{" + key + "," in bib
    assert df["vllm_v1"].str.contains("v0.19.0").all()

"""check()'s slip rule: a slip's hint fires only near that slip's value (within
Exercise.slip_tolerance of right x factor); other wrong answers get a neutral "not yet"
with the exercise's own hint. And the chapter *Serving LLMs*' answers, derived by hand."""

import math

from gpuinfer import exercises
from gpuinfer.exercises import COMMON_SLIPS


def test_a_slip_hint_fires_only_within_its_tolerance_of_its_value():
    for name in exercises.names():
        ex = exercises.get(name)
        right = float(ex.answer())
        if right == 0:
            continue
        for factor, hint in [*ex.slips.items(), *COMMON_SLIPS]:
            tol = ex.slip_tolerance(factor)
            assert tol <= abs(factor - 1) / 4 + 1e-15, (name, factor)
            # Just outside the slip's window, on both sides: never that slip's hint
            # (another slip's window, or the right answer's, may hold the value).
            for side in (1 - 1.5 * tol, 1 + 1.5 * tol):
                value = right * factor * side
                if ex.is_correct(value):
                    continue
                assert ex.slip(value) != hint or any(
                    math.isclose(value, right * f, rel_tol=ex.slip_tolerance(f))
                    for f, h in [*ex.slips.items(), *COMMON_SLIPS] if h == hint
                    and f != factor), (name, factor, value)


def test_an_answer_merely_off_gets_a_neutral_not_yet():
    # Lab 3, exercise 2: the answer is 221 sequences (llm.compute_bound_batch, H200);
    # 200 is 9.5% low, 2.8% from the GiB slip's value 221 x 0.931 = 205.8: no GiB hint.
    name = "lab-decode-compute-bound-batch-h200"
    assert exercises.get(name).answer() == 221
    result = repr(exercises.check(name, 200))
    assert "not yet. Hint:" in result and "GiB" not in result
    # The ridge point itself, 989e12 / 4.8e12 = 206.0 FLOP/byte: its own hint, which is
    # tried before the common slips (GiB's value, 205.8, lies within 0.1% of it).
    result = repr(exercises.check(name, 206))
    assert "ridge point itself" in result and "GiB" not in result
    # A GiB slip on an exercise in bytes is still caught, at its value.
    name = "lab-decode-kv-bytes-per-sequence"
    right = exercises.get(name).answer()          # 4,096 x 131,072 = 536,870,912 B
    assert right == 4096 * 2 * 32 * 8 * 128 * 2
    assert "GiB" in repr(exercises.check(name, right * 1e9 / 2**30))
    assert "GiB" not in repr(exercises.check(name, right * 0.96))


def test_serving_llms_answers_by_another_route():
    # DeepSeek-V2: 60 layers x (512 latent + 64 RoPE) x 2 bytes = 60 x 1,152 = 69,120 B.
    assert exercises.get("llm-mla-kv").answer() == 69_120
    assert "61 layers" in repr(exercises.check("llm-mla-kv", 61 * 576 * 2))
    # Two vLLM instances at 0.45 on an H100 SXM (85,045,477,376 B = 80 GiB), Llama-3-8B
    # fp16 weights 16,060,522,496 B, 1 GiB reserve:
    # 0.45 x 85,045,477,376 - 16,060,522,496 - 1,073,741,824 = 21,136,200,499 B each;
    # blocks of 16 x 131,072 = 2,097,152 B -> 10,078 blocks; 8,192 tokens = 512 blocks
    # -> 19 sequences each, 38 in all.
    assert exercises.get("llm-two-instances").answer() == 38
    assert "4,096-token" in repr(exercises.check("llm-two-instances", 78))


def test_the_matmuls_alone_are_not_called_a_gib_slip():
    # Chapter 9, exercise 1: a 3,000-token prefill of Llama-3-8B on an H100 SXM. Its
    # matmuls alone: 2 x 6.98e9 x 3,000 / 989e12 = 42.3 ms, 0.940 of the 45.1 ms answer,
    # within 1% of the GiB slip's 0.931: the exercise's own slip names it instead.
    from gpuinfer import llm

    m = llm.get("llama-3-8b")
    matmuls = 2 * m.linear_params_per_layer * m.n_layers * 3000 / 989e12
    result = repr(exercises.check("llm-ttft-lone", matmuls))
    assert "matmuls alone" in result and "GiB" not in result


def test_a_quantised_embedding_is_named_among_the_slips():
    # Lab 4, exercise 4, with the embedding table in int8 too: Mistral-7B's 7.24e9
    # parameters at 1 byte; (15.84e9 - 1.07e9 - 7.24e9) / 536.9e6 = 14.0 -> 14.
    assert "embedding table" in repr(exercises.check("lab-quant-t4-format-batch", 14))


def test_chunk_budget_on_the_achievable_model_by_hand():
    # Chapter 9's chunk-budget decision, now on the achievable model (achievable.FITTED:
    # matmuls at 0.70 x the MAMF fraction, bytes at 0.85 x 3.35 TB/s, attention at 0.75 x
    # 989 TFLOP/s, 32 layers x 13 kernels x 0.5 us of gaps, 1.6 ms a step). Budget 320 =
    # 32 decodes + a 288-token chunk; from llm.forward_step_breakdown's rows:
    #   linear   4.467e12 FLOP / (989e12 x 0.803 x 0.70 = 556e12) = 8.03 ms
    #            (its 15.38 GB / 2.85 TB/s = 5.40 ms is hidden under it)
    #   attention 9.34 GB / 2.8475 TB/s = 3.28 ms (its 0.63 TFLOP take 0.85 ms)
    #   lm_head  1.06 GB / 2.8475 TB/s = 0.37 ms; embedding 5.2 MB: 0.002 ms
    #   + 32 x 13 x 0.5 us = 0.21 ms + 1.6 ms  ->  13.49 ms <= 15 ms.
    # Budget 384 (a 352-token chunk) adds 64 tokens of matmul FLOPs: > 15 ms.
    from gpuinfer import achievable, hardware, llm

    h100 = hardware.get("H100 SXM")
    mm = 989e12 * achievable.matmul_fraction(h100, "fp16") * 0.70
    bw, att = 3.35e12 * 0.85, 989e12 * 0.75

    def step_s(budget):
        chunk = budget - 32
        t = llm.forward_step_breakdown("llama-3-8b", h100, [1] * 32 + [chunk],
                                       [2048] * 32 + [4096 - chunk])
        rows = sum(max(r.bytes / bw, r.flops / (att if name == "attention" else mm))
                   for name, r in t.iterrows())
        return rows + 32 * 13 * 0.5e-6 + 1.6e-3

    assert math.isclose(step_s(320), 13.49e-3, rel_tol=0.005)
    assert step_s(320) <= 0.015 < step_s(384)
    assert exercises.get("llm-chunk-budget").answer() == 320
    # On the ceiling (llm.forward_step_time) the budget would be 832: its own slip.
    assert "ceiling" in repr(exercises.check("llm-chunk-budget", 832))


def test_speculation_cutoff_on_the_achievable_model_by_another_route():
    # Chapter 9's speculation decision (Llama-3.2-1B drafting 4 tokens for Llama-3-8B,
    # acceptance 0.6, 256 tokens of context, H100 SXM) on the achievable model: a round
    # yields (1 - 0.6^5) / (1 - 0.6) = 0.92224 / 0.4 = 2.3056 tokens; speculation pays
    # while 2.3056 x plain step > verify + 4 draft steps. speculative.cutoff_batch (its
    # own bisection over 1..4096) and the plain step from achievable.decode_step_s.
    from gpuinfer import achievable, speculative

    e = (1 - 0.6 ** 5) / (1 - 0.6)
    assert math.isclose(e, 2.3056)
    kw = dict(acceptance=0.6, k=4, context=256)
    cut = speculative.cutoff_batch("llama-3-8b", speculative.LLAMA_3_2_1B, "H100 SXM",
                                   achievable=True, **kw)
    assert cut == exercises.get("llm-spec-batch").answer() == 82
    for b, pays in [(cut - 1, True), (cut, False)]:
        r = speculative.round_breakdown("llama-3-8b", speculative.LLAMA_3_2_1B, "H100 SXM",
                                        batch=b, achievable=True, **kw)
        plain = achievable.decode_step_s("llama-3-8b", "H100 SXM", b, 256)
        assert math.isclose(r["plain_step_s"], plain, rel_tol=1e-9)
        assert (e * plain > r["verify_s"] + r["draft_s"]) is pays
    # On the ceiling the cut-off is batch 103: its own slip.
    assert speculative.cutoff_batch("llama-3-8b", speculative.LLAMA_3_2_1B, "H100 SXM",
                                    **kw) == 103
    assert "ceiling" in repr(exercises.check("llm-spec-batch", 103))


def test_the_answer_key_prints_small_tolerances_as_they_are():
    from gpuinfer import exercises
    key = exercises.answer_key().set_index("name")["tolerance"]
    ex = {name: exercises.get(name) for name in key.index}
    for name, tol in key.items():
        rel = ex[name].rel_tol
        if 1e-6 < rel < 0.01:        # e.g. 0.002 -> "±0.2%", never "±0%"
            assert tol.startswith(f"±{100 * rel:.1f}".rstrip("0").rstrip(".") + "%"), (name, tol)
        if rel <= 1e-6 and ex[name].abs_tol <= 1e-6:
            assert tol == "exact", (name, tol)
    assert not any(t.startswith("±0%") for t in key)

"""check()'s slip rule: a slip's hint fires only near that slip's value (within
Exercise.slip_tolerance of right x factor), and a generic slip only for the kinds of answer
it can happen to (each exercise's kind read from its unit or declared); other wrong answers
get a neutral "not yet" with the exercise's own hint. And the chapter *Serving LLMs*'
answers, derived by hand."""

import math

import pytest

from gpuinfer.course import exercises
from gpuinfer.course.exercises import COMMON_SLIPS, KINDS, ROUNDING_HINTS


def _candidates(ex):
    return [*ex.slips.items(), *((s.factor, s.hint) for s in ex.common_slips)]


def test_a_slip_hint_fires_only_within_its_tolerance_of_its_value():
    for name in exercises.names():
        ex = exercises.get(name)
        right = float(ex.answer())
        if right == 0:
            continue
        for factor, hint in _candidates(ex):
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
                    for f, h in _candidates(ex) if h == hint and f != factor), (name, factor, value)


# --- hints that fit the question: every generic slip against every exercise's kind ----------

def test_every_exercise_has_a_kind_its_unit_says_or_it_declares():
    for name in exercises.names():
        ex = exercises.get(name)
        assert ex.kind in KINDS and ex.kind != "other", \
            f"{name}: unit {ex.unit!r} says no kind; register it with kind= one of {list(KINDS)}"


def test_each_generic_slip_fires_exactly_on_the_kinds_it_names():
    # Make every generic slip on every registered exercise. On an exercise of a kind the
    # slip names, its hint fires (unless the exercise's own slip, or the right answer, is
    # at that value); on any other kind it never does, whatever the answer.
    fired, silenced = set(), set()
    for name in exercises.names():
        ex = exercises.get(name)
        right = float(ex.answer())
        if right == 0:
            continue
        for slip in COMMON_SLIPS:
            value = right * slip.factor
            said = ex.slip(value)
            if ex.kind in slip.kinds:
                own = any(math.isclose(value, right * f, rel_tol=ex.slip_tolerance(f))
                          for f in ex.slips)
                if not own and not ex.is_correct(value):
                    assert said == slip.hint, (name, ex.kind, slip.factor, said)
                    fired.add(slip.hint)
            else:
                assert said != slip.hint, (name, ex.kind, slip.factor, said)
                silenced.add(slip.hint)
    # Every generic slip that some registered kind allows was seen to fire at least once.
    kinds = {exercises.get(n).kind for n in exercises.names()}
    assert fired == {s.hint for s in COMMON_SLIPS if s.kinds & kinds}
    assert silenced == {s.hint for s in COMMON_SLIPS}


@pytest.mark.parametrize("name, factor, wrong_words", [
    # Issue 33's misfires, planted: none of them may come back.
    ("roofline-gemv-intensity", 0.5, ["dense peak", "sparse"]),       # a GEMV's intensity
    ("roofline-gemv-intensity", 2.0, ["sparse"]),
    ("roofline-13b-a100-ceiling", 2.0, ["sparse", "dense peak"]),     # a bandwidth ceiling
    ("lab-tp-bus-bandwidth", 2.0, ["sparse", "dense peak"]),
    ("bench-mean-of-spiky-calls", 0.5, ["dense peak", "sparse"]),     # the median, 2 ms
    ("lab-batching-merged-md1", 2.0, ["sparse", "dense peak"]),       # M/M/1 for M/D/1
    ("llm-chunk-budget", 2**30 / 1e9, ["GiB"]),                        # a token count
    ("llm-chunk-budget", 1e9 / 2**30, ["GiB"]),
    ("lab-moe-half-experts-tokens", 2**30 / 1e9, ["GiB"]),
])
def test_the_misfires_the_learners_met_do_not_fire(name, factor, wrong_words):
    said = repr(exercises.check(name, exercises.get(name).answer() * factor))
    assert "not yet" in said
    for words in wrong_words:
        assert words not in said, (name, factor, said)


def test_the_slips_still_fire_where_they_apply():
    # GEMV intensity at half: the multiply-add counted as one FLOP.
    said = repr(exercises.check("roofline-gemv-intensity",
                                exercises.get("roofline-gemv-intensity").answer() / 2))
    assert "multiply-add is 2 FLOPs" in said
    # A bus bandwidth reported in GiB/s: the GiB slip (bytes/s is a kind it applies to).
    name = "lab-tp-bus-bandwidth"
    assert "GiB" in repr(exercises.check(name, exercises.get(name).answer() * 1e9 / 2**30))
    # A time in ms where s was asked: the prefix slip names s and ms.
    name = "bench-mean-of-spiky-calls"
    assert "s against ms" in repr(exercises.check(name, exercises.get(name).answer() * 1e3))
    # The sparse peak on an answer in FLOP/s (a throwaway exercise, removed after).
    exercises.register("tmp-dense-peak", question="q?", unit="FLOP/s", hint="h", where="x")(
        lambda: 312e12)
    try:
        assert exercises.get("tmp-dense-peak").kind == "flop_rate"
        assert "sparse (2:4) peak" in repr(exercises.check("tmp-dense-peak", 624e12))
    finally:
        exercises._REGISTRY.pop("tmp-dense-peak")


def test_off_by_one_says_which_way_the_question_rounds():
    # Lab 10: from how many tokens do 128 experts, top-8, touch half? ln 2 / ln(16/15) =
    # 10.74 -> 11, rounded up: 10 is one short and gets "round up", never "round down".
    name = "lab-moe-half-experts-tokens"
    assert exercises.get(name).answer() == 11 and exercises.get(name).rounding == "up"
    said = repr(exercises.check(name, 10))
    assert ROUNDING_HINTS["up"] in said and "round down" not in said
    # Chapter 10: ridge x E/k on an A100, 612.06 -> 613 rounded up.
    said = repr(exercises.check("moe-rule-batch-mixtral-a100", 611))
    assert ROUNDING_HINTS["up"] in said
    # Chapter 1: the largest batch that fits rounds down.
    name = "roofline-max-batch-13b-a100-2k"
    assert exercises.get(name).rounding == "down"
    assert ROUNDING_HINTS["down"] in repr(exercises.check(name, exercises.get(name).answer() + 1))
    # Every exercise that accepts a whole number within a margin says which way it rounds.
    for n in exercises.names():
        if exercises.get(n).abs_tol >= 0.5:
            assert exercises.get(n).rounding in ("up", "down"), n


@pytest.mark.parametrize("unit, kind", [
    ("bytes (exact)", "bytes"), ("GB", "bytes"), ("bytes per weight (exact)", "bytes"),
    ("bytes/s", "bandwidth"), ("GB/s", "bandwidth"), ("FLOP/byte", "intensity"),
    ("FLOP/s", "flop_rate"), ("s", "time"), ("microseconds", "time"), ("ms", "time"),
    ("tokens/s per user (3 significant figures)", "rate"), ("requests/s", "rate"),
    ("requests per batch", "count"), ("sequences (a whole number, rounded down)", "count"),
    ("tokens", "count"), ("fraction (0-1)", "fraction"), ("percent", "percent"),
    ("USD per million tokens", "money"), ("ratio (2 significant figures)", "ratio"),
    ("dB (3 significant figures)", "decibel"), ("units of x per step", "value"),
    ("widgets", None),
])
def test_kind_of_reads_the_unit(unit, kind):
    assert exercises.kind_of(unit) == kind


def test_a_declared_kind_is_checked_and_wins():
    with pytest.raises(KeyError, match="kind"):
        exercises.register("tmp-x", question="q?", unit="widgets", hint="h", where="x",
                           kind="widget")
    exercises.register("tmp-y", question="q?", unit="widgets", hint="h", where="x",
                       kind="count")(lambda: 5.0)
    try:
        assert exercises.get("tmp-y").kind == "count"
    finally:
        exercises._REGISTRY.pop("tmp-y")


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
    # Two vLLM instances at 0.45 on an H100 SXM (85,045,477,376 B = 79.2 GiB), Llama-3-8B
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
    from gpuinfer.predict import architectures

    m = architectures.get("llama-3-8b")
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
    from gpuinfer.predict import achievable, llm
    from gpuinfer import hardware

    h100 = hardware.get("H100 SXM")
    fit = achievable.FITTED      # 0.70, 0.85, 0.75, 13 x 0.5 us, 1.6 ms: its constants
    mm = 989e12 * achievable.matmul_fraction(h100, "fp16") * fit.matmul_scale
    bw, att = 3.35e12 * fit.bandwidth, 989e12 * fit.attention

    def step_s(budget):
        chunk = budget - 32
        t = llm.forward_step_breakdown("llama-3-8b", h100, [1] * 32 + [chunk],
                                       [2048] * 32 + [4096 - chunk])
        rows = sum(max(r.bytes / bw, r.flops / (att if name == "attention" else mm))
                   for name, r in t.iterrows())
        return rows + 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s

    assert math.isclose(step_s(320), 13.49e-3, rel_tol=0.005)   # at FITTED's present values
    assert step_s(320) <= 0.015 < step_s(384)
    assert exercises.get("llm-chunk-budget").answer() == 320
    # On the ceiling (llm.forward_step_s) the budget would be 832: its own slip.
    assert "ceiling" in repr(exercises.check("llm-chunk-budget", 832))


def test_speculation_cutoff_on_the_achievable_model_by_another_route():
    # Chapter 9's speculation decision (Llama-3.2-1B drafting 4 tokens for Llama-3-8B,
    # acceptance 0.6, 256 tokens of context, H100 SXM) on the achievable model: a round
    # yields (1 - 0.6^5) / (1 - 0.6) = 0.92224 / 0.4 = 2.3056 tokens; speculation pays
    # while 2.3056 x plain step > verify + 4 draft steps. speculative.cutoff_batch (its
    # own bisection over 1..4096) and the plain step from achievable.decode_step_s.
    from gpuinfer.predict import achievable, speculative

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
                                    **kw, achievable=False) == 103
    assert "ceiling" in repr(exercises.check("llm-spec-batch", 103))


def test_the_answer_key_prints_small_tolerances_as_they_are():
    from gpuinfer.course import exercises
    key = exercises.answer_key().set_index("name")["tolerance"]
    ex = {name: exercises.get(name) for name in key.index}
    for name, tol in key.items():
        rel = ex[name].rel_tol
        if 1e-6 < rel < 0.01:        # e.g. 0.002 -> "±0.2%", never "±0%"
            assert tol.startswith(f"±{100 * rel:.1f}".rstrip("0").rstrip(".") + "%"), (name, tol)
        if rel <= 1e-6 and ex[name].abs_tol <= 1e-6:
            assert tol == "exact", (name, tol)
    assert not any(t.startswith("±0%") for t in key)

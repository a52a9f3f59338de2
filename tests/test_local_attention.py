"""Sliding-window and chunked attention (issue 31): the layers that attend locally read
and score only their window's or chunk's tokens; every other number stays the same."""

import dataclasses

import numpy as np
import pytest

from gpuinfer import llm, step_model


def test_catalogue_local_layers_follow_the_configs():
    # gpt-oss: "sliding_window": 128 on every other layer (36 and 24 layers: 18 and 12);
    # Llama 4: "attention_chunk_size": 8192 on 3 of 4 of 48 layers (36); Mistral-7B v0.1:
    # "sliding_window": 4096 on all 32.
    for name, window, chunk, local in [("gpt-oss-120b", 128, 0, 18), ("gpt-oss-20b", 128, 0, 12),
                                       ("llama-4-scout", 0, 8192, 36),
                                       ("llama-4-maverick", 0, 8192, 36),
                                       ("mistral-7b", 4096, 0, 32), ("llama-3-8b", 0, 0, 0)]:
        m = llm.get(name)
        assert (m.attention_window, m.attention_chunk, m.n_local_layers) == (window, chunk, local)


def test_gpt_oss_120b_decode_attention_by_hand():
    # gpt-oss-120b, batch 1, 4,096 cached tokens, bf16 cache: 8 KV heads x 64 = 512 values
    # of K and 512 of V a layer: 2 x 512 x 2 B = 2,048 B a token a layer.
    # Cache read: 18 global layers x 4,096 tokens + 18 sliding layers x 127 tokens (the
    # window of 128 includes the new token) = 73,728 + 2,286 = 76,014 token-layers
    #   x 2,048 B = 155,676,672 B.
    # New token's K, V written: 36 x 2,048 = 73,728 B.
    # Q, K, V in and O out: 36 x (2 x 4,096 + 2 x 512) x 2 B = 36 x 9,216 x 2 = 663,552 B.
    # FLOPs: 4 x 4,096 (query heads x head_dim) = 16,384 a pair a layer; pairs: 18 x 4,097
    # + 18 x 128 = 73,746 + 2,304 = 76,050 -> 1,246,003,200.
    row = llm.decode_step_breakdown("gpt-oss-120b", "H100 SXM", 1, 4096, "bf16").loc["attention"]
    assert row["bytes"] == 155_676_672 + 73_728 + 663_552
    assert row["flops"] == 1_246_003_200


def test_llama_4_chunks_restart_and_mistral_window_caps():
    # Llama 4 Scout at 8,192 cached tokens: the new token starts a chunk (8,192 mod 8,192
    # = 0), so the 36 chunked layers read nothing cached; the 12 global ones read 8,192.
    # KV a token a layer (bf16): 2 x 8 x 128 x 2 = 4,096 B.
    kv = 4096
    scout = llm.decode_step_breakdown("llama-4-scout", "H100 SXM", 1, 8192, "bf16")
    at_8191 = llm.decode_step_breakdown("llama-4-scout", "H100 SXM", 1, 8191, "bf16")
    new = 48 * kv + 48 * (2 * 5120 + 2 * 1024) * 2   # K,V written; Q,K,V in, O out
    assert scout.loc["attention", "bytes"] == 12 * 8192 * kv + new
    # at 8,191 the token is its chunk's last: every layer reads 8,191
    assert at_8191.loc["attention", "bytes"] == 48 * 8191 * kv + new
    # Mistral-7B: every layer a 4,096 window, so past 4,095 cached tokens the step stops growing
    t = [llm.decode_step_s("mistral-7b", "H100 SXM", 8, c) for c in (4095, 8000, 32000)]
    assert t[0] == t[1] == t[2]


def test_models_without_a_window_are_unchanged():
    # The same shapes without the window see every token: q c + q (q + 1) / 2 pairs.
    full = dataclasses.replace(llm.get("gpt-oss-120b"), name="gpt-oss full",
                               attention_window=0, global_layer_step=0)
    q, c = np.array([1.0, 7.0]), np.array([4096.0, 100.0])
    pairs, cached, scores = step_model.attended(full, q, c)
    assert list(pairs) == [4097.0, 7 * 100 + 28.0]
    assert list(cached) == [4096.0, 100.0]
    assert list(scores) == [4097.0, 7 * 107.0]


def test_mixed_step_agrees_with_the_closed_form():
    # A prompt chunk of 300 that crosses the 128 window and a chunk boundary at 8,192:
    # the breakdown (StepModel.step_terms) and the closed form (StepCost) agree.
    for name in ("gpt-oss-120b", "llama-4-scout", "mistral-7b"):
        q, c = [300, 1, 1], [8000, 50, 9000]
        table = llm.forward_step_breakdown(name, "H100 SXM", q, c)["seconds"].sum()
        assert llm.forward_step_s(name, "H100 SXM", q, c) == pytest.approx(table, rel=1e-12)


def test_chunked_pairs_by_hand():
    # Scout, 3 new tokens at positions 8,190, 8,191, 8,192: chunked layers see 8,191,
    # 8,192 and 1 keys (16,384); global layers 3 x 8,190 + 6 = 24,576; 36 of 48 chunked:
    # 0.25 x 24,576 + 0.75 x 16,384 = 6,144 + 12,288 = 18,432.
    pairs, cached, _ = step_model.attended("llama-4-scout", 3, 8190)
    assert pairs == 18_432
    assert cached == 8190


@pytest.mark.parametrize("kw, word", [
    (dict(attention_window=128, attention_chunk=8192), "at most one"),
    (dict(global_layer_step=2), "global_layer_step"),
    (dict(attention_window=-1), "attention_window"),
])
def test_bad_local_attention_raises(kw, word):
    with pytest.raises((ValueError, TypeError), match=word):
        dataclasses.replace(llm.get("llama-3-8b"), **kw)

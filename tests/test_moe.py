"""Mixtures of experts in gpuinfer.predict.llm and gpuinfer.predict.expert_parallel: parameters from the published
configs, the experts a batch touches, the bytes a step reads, the compute-bound batch,
expert parallelism. Expected values derived by hand in the comments."""


import numpy as np
import pytest

from gpuinfer.predict import expert_parallel, llm, parallel, roofline
from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model


def test_mixtral_total_and_active_parameters():
    # Mixtral-8x7B config.json: d 4096, 32 layers, 32 heads / 8 KV heads of 128, expert
    # width 14336, 8 experts, top-2, vocab 32000, untied.
    # attention a layer: 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040
    # one expert: 3 x 4096 x 14336 = 176,160,768; router 4096 x 8 = 32,768; norms 2 x 4096
    # total:  32 x (41,943,040 + 8 x 176,160,768 + 32,768 + 8,192) + 2 x 32000 x 4096 + 4096
    #       = 32 x 1,451,270,144 + 262,148,096 = 46,702,792,704   (Mistral: 46.7B)
    # active: 32 x (41,943,040 + 2 x 176,160,768 + 40,960) + 262,148,096
    #       = 12,879,925,248                                        (Mistral: 12.9B)
    m = architectures.get("mixtral-8x7b")
    assert m.n_params == 46_702_792_704
    assert m.n_active_params == 12_879_925_248
    assert m.n_params == pytest.approx(46.7e9, rel=0.01)
    assert m.n_active_params == pytest.approx(12.9e9, rel=0.01)


def test_deepseek_v3_total_and_active_parameters():
    # DeepSeek-V3 config.json: d 7168, 61 layers (first 3 dense, d_ff 18432), 128 heads,
    # MLA q_lora 1536, kv_lora 512, nope 128 + rope 64, v 128; 1 shared + 256 routed
    # experts of 2048, top-8; vocab 129280.
    # attention a layer: 7168x1536 + 1536x128x192 + 7168x(512+64) + 512x128x(128+128)
    #                    + 128x128x7168 = 187,105,280; norms 2 x 7168 + 1536 + 512
    # dense MLP: 3 x 7168 x 18432 = 396,361,728; expert: 3 x 7168 x 2048 = 44,040,192
    # router: 7168 x 256 = 1,835,008; embeddings 2 x 129280 x 7168 = 1,853,358,080
    # total = 61 x (187,105,280 + 16,384) + 3 x 396,361,728
    #       + 58 x (1,835,008 + 257 x 44,040,192) + 1,853,358,080 + 7168
    #       = 671,026,404,352   (the report's 671B: the 14B MTP module is not in it)
    m = architectures.get("deepseek-v3")
    assert m.n_moe_layers == 58 and m.moe_layers[0] == 3
    assert m.attention_params_per_layer == 187_105_280
    assert m.n_params == 671_026_404_352
    assert m.n_params == pytest.approx(671e9, rel=0.01)
    # active: 9 experts (1 shared + 8) instead of 257 in each of 58 layers:
    # 671,026,404,352 - 58 x 248 x 44,040,192 = 37,552,282,624 with both embedding tables;
    # without the input table (a gather: gpt-oss's convention) 36,625,603,584. The
    # report's "37B" does not say which it counts; the two bracket it, each within 1.5%.
    assert m.n_active_params == 37_552_282_624
    assert m.n_active_params - m.embedding_params == 36_625_603_584
    assert m.n_active_params - m.embedding_params < 37e9 < m.n_active_params
    assert m.n_active_params == pytest.approx(37e9, rel=0.015)


@pytest.mark.parametrize("name, total, active", [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),      # Qwen's model card
    ("qwen3-235b-a22b", 235e9, 22e9),
    ("llama-4-maverick", 400e9, 17e9),    # Meta; its total includes the vision encoder
])
def test_other_catalogue_rows_match_their_published_counts(name, total, active):
    m = architectures.get(name)
    assert m.n_params == pytest.approx(total, rel=0.02)
    assert m.n_active_params == pytest.approx(active, rel=0.02)


def test_gpt_oss_counts_as_its_model_card_and_ships_mxfp4_experts():
    # gpt-oss-120b: 36 layers, d 2880, 128 experts of width 2880, top-4. One expert:
    # 3 x 2880 x 2880 = 24,883,200; 36 x 128 of them = 114.67B (card: MLP 114.71B with
    # biases). Active without the input embedding (the card's 5.13B).
    m = architectures.get("gpt-oss-120b")
    assert m.expert_params == 24_883_200
    assert m.n_active_params - m.embedding_params == pytest.approx(5.13e9, rel=0.01)
    # Stored: experts in MXFP4 (0.53125 B a weight) even when bf16 is asked for.
    experts = 36 * 128 * 24_883_200 * 0.53125
    rest = (m.n_params - 36 * 128 * 24_883_200) * 2
    assert step_model.weight_bytes(m, "bf16") == pytest.approx(experts + rest, rel=1e-12)


def test_experts_touched_is_k_at_one_token_and_tends_to_e():
    # E(1 - (1 - k/E)^1) = k exactly.
    assert step_model.experts_touched("deepseek-v3", 1) == pytest.approx(8)
    assert step_model.experts_touched("mixtral-8x7b", 1) == pytest.approx(2)
    # Mixtral at 16 tokens: 8 x (1 - 0.75^16) = 8 x (1 - 0.010023) = 7.9198
    assert step_model.experts_touched("mixtral-8x7b", 16) == pytest.approx(7.9198, abs=1e-4)
    # DeepSeek-V3 at 64 tokens: 256 x (1 - (31/32)^64) = 256 x (1 - e^(64 ln 0.96875))
    # = 256 x (1 - e^-2.03196) = 256 x (1 - 0.13107) = 222.44
    assert step_model.experts_touched("deepseek-v3", 64) == pytest.approx(222.44, abs=0.01)
    many = step_model.experts_touched("deepseek-v3", np.array([1, 10, 100, 10_000]))
    assert np.all(np.diff(many) > 0) and many[-1] == pytest.approx(256)
    assert step_model.experts_touched("deepseek-v3", 0) == 0
    # A measured count passes through.
    assert step_model.experts_touched("deepseek-v3", 64, touched=150) == 150


def test_a_batch_1_moe_step_reads_the_active_experts_not_all():
    m = architectures.get("mixtral-8x7b")
    t = llm.decode_step_breakdown(m, "H100 SXM", batch=1, context=0, dtype="fp16")
    assert list(t.index) == list(step_model.operations(m)) == [
        "embedding", "linear", "attention", "router", "experts", "lm_head"]
    # experts row at one token: 2 touched experts x 32 layers x 176,160,768 x 2 bytes
    # = 22,548,578,304 bytes of weights, plus the token's activations:
    # 2 x 32 x (2 x 4096 + 3 x 14336) x 2 bytes = 6,553,600
    assert t.loc["experts", "bytes"] == pytest.approx(22_548_578_304 + 6_553_600)
    # FLOPs: 2 x k x tokens x expert params x layers = 2 x 2 x 1 x 176,160,768 x 32
    assert t.loc["experts", "flops"] == pytest.approx(22_548_578_304)
    # All experts: 4x the bytes (8 of 8, not 2 of 8): what memory holds, not what a step reads.
    all_experts = 32 * 8 * 176_160_768 * 2
    assert t.loc["experts", "bytes"] < 0.26 * all_experts
    assert step_model.weight_bytes(m, "fp16") > all_experts
    # The step's weight bytes = the active parameters' (less the input embedding table,
    # gathered) in fp16; the router is fp16 too here.
    assert step_model.step_weight_bytes(m, "fp16", 1) == pytest.approx(
        2 * (m.n_active_params - m.embedding_params - 32 * 2 * 4096 - 4096))
    # More tokens touch more experts: the step reads more.
    assert step_model.step_weight_bytes(m, "fp16", 64) > 3.9 * step_model.step_weight_bytes(m, "fp16", 1) / 1.5


def test_dense_models_keep_their_four_rows():
    t = llm.decode_step_breakdown("llama-2-7b", "H100 SXM", batch=8, context=100)
    assert list(t.index) == list(step_model.OPERATIONS)
    assert step_model.operations("llama-2-7b") == step_model.OPERATIONS


def test_compute_bound_batch_is_about_e_over_k_times_the_dense_one():
    acc = hardware.get("H100 SXM")
    ridge = roofline.peak_or_nan(acc, "bf16") / acc.bandwidth  # 989e12 / 3.35e12 = 295
    # Mixtral (E/k = 4): the experts' intensity at a large batch is 2 B k p / (E p 2 + ...)
    # = B k / E FLOP/byte on bf16 weights, so they turn compute-bound near 4 x 295 = 1,181;
    # the activations (about 9% of the bytes there) push it a little higher.
    b = llm.compute_bound_batch("mixtral-8x7b", acc, "bf16")
    assert 4 * ridge < b < 1.2 * 4 * ridge
    # DeepSeek-V3 (E/k = 32): near 32 x 295 = 9,447.
    b = llm.compute_bound_batch("deepseek-v3", acc, "bf16")
    assert 32 * ridge < b < 1.2 * 32 * ridge
    # fp8 weights halve it (each weight byte serves twice the FLOPs).
    assert llm.compute_bound_batch("deepseek-v3", acc, "fp8_e4m3") == pytest.approx(b / 2, rel=0.01)
    dense = llm.compute_bound_batch("llama-3-70b", acc, "bf16")
    assert llm.compute_bound_batch("mixtral-8x7b", acc, "bf16") / dense == pytest.approx(4, rel=0.1)


def test_mla_cache_is_the_latent_and_rope_key():
    # 61 x (512 + 64) x 2 bytes = 70,272
    assert step_model.kv_cache_bytes_per_token("deepseek-v3", "bf16") == 70_272
    assert step_model.mla_kv_cache_bytes_per_token(61, 512, 64, 2) == 70_272


def test_weight_read_ceiling_takes_a_model_and_a_device():
    # Llama-2-7B fp16 on an A100 80GB: 2.039e12 / 13.21e9 (layers + LM head) tokens/s.
    want = 2.039e12 / step_model.step_weight_bytes("llama-2-7b", "fp16")
    assert llm.weight_read_ceiling("llama-2-7b", "A100 80GB") == pytest.approx(want)
    assert llm.weight_read_ceiling("llama-2-7b", "A100 80GB", batch=4) == pytest.approx(4 * want)
    # The formula form keeps working: 7e9 x 2 bytes at 2 TB/s = 142.857 tokens/s.
    assert llm.weight_read_ceiling(7e9, 2, 2e12) == pytest.approx(142.857, rel=1e-4)
    assert llm.weight_read_ceiling_from(7e9, 2, 2e12, 16) == pytest.approx(2285.71, rel=1e-4)
    # An MoE model at batch 1 reads its active weights only.
    dsv3 = llm.weight_read_ceiling("deepseek-v3", "H200", 1, "fp8_e4m3")
    assert dsv3 == pytest.approx(4.8e12 / step_model.step_weight_bytes("deepseek-v3", "fp8_e4m3", 1))


@pytest.mark.parametrize("call, err, words", [
    (lambda: step_model.experts_touched("llama-2-7b", 4), ValueError, "dense"),
    (lambda: step_model.experts_touched("mixtral-8x7b", -1), ValueError, "tokens"),
    (lambda: step_model.experts_touched("mixtral-8x7b", 1, touched=3), ValueError, "touched"),
    (lambda: llm.weight_read_ceiling("llama-2-7b", 2e12), TypeError, "weight_read_ceiling_from"),
    (lambda: architectures.ModelSpec("x", 2, 8, 2, 2, 4, 8, 10, n_experts=4, experts_per_token=5,
                           expert_d_ff=8), ValueError, "experts_per_token"),
    (lambda: architectures.ModelSpec("x", 2, 8, 2, 2, 4, 8, 10, experts_per_token=2), ValueError,
     "n_experts"),
    (lambda: architectures.ModelSpec("x", 2, 8, 2, 2, 4, 8, 10, n_experts=4, experts_per_token=2),
     ValueError, "expert_d_ff"),
    (lambda: step_model.mla_kv_cache_bytes_per_token(61, 0, 64), ValueError, "kv_lora_rank"),
])
def test_bad_inputs_raise_clear_errors(call, err, words):
    with pytest.raises(err, match=words):
        call()


# --- expert parallelism ---------------------------------------------------------------------

def test_all_to_all_bytes_by_hand():
    # DeepSeek-V3, 128 tokens on a device (DeepEP's low-latency test), top-8, d 7168:
    # dispatch in fp8 = 128 x 8 x 7168 x 1 = 7,340,032 bytes; combine in bf16: 14,680,064.
    # EP 16 under uniform routing: 15/16 of them leave the device.
    a = expert_parallel.moe_all_to_all_bytes("deepseek-v3", 128, 16)
    assert a["dispatch_bytes"] == 7_340_032 and a["combine_bytes"] == 14_680_064
    assert a["dispatch_sent_bytes"] == pytest.approx(7_340_032 * 15 / 16)
    bf16 = expert_parallel.moe_all_to_all_bytes("deepseek-v3", 128, 16, dispatch_dtype="bf16")
    assert bf16["dispatch_bytes"] == 2 * a["dispatch_bytes"]


def test_all_to_all_time_inside_and_across_nodes():
    ic = device_links.get_interconnect("NVLink 4")
    lat = ic.nccl("LL").base_latency_s + ic.nccl("LL").step_latency_s
    # Inside one HGX board: bytes at the link's per-direction bandwidth.
    assert expert_parallel.all_to_all_s(1e6, 8, "NVLink 4") == pytest.approx(
        lat + 1e6 / ic.bandwidth_bytes_per_s)
    # 16 GPUs on 2 nodes: 8 of the 15 peers are across the network, whose 8 x 400 Gb/s
    # = 400 GB/s a node is 50 GB/s a GPU: 1e6 x 8/15 / 50e9 = 10.67 us beats NVLink's share.
    net = device_links.get_interconnect("InfiniBand NDR x8")
    t = expert_parallel.all_to_all_s(1e6, 16, "NVLink 4")
    assert t == pytest.approx(lat + net.nccl("LL").step_latency_s + 1e6 * 8 / 15 / 50e9)
    # DeepEP's low-latency dispatch measured 118 us at EP16 for these 128 tokens (H800,
    # CX7): the link model and the floor must sit below the measurement.
    sent = expert_parallel.moe_all_to_all_bytes("deepseek-v3", 128, 16)["dispatch_sent_bytes"]
    assert expert_parallel.all_to_all_s(sent, 16, "NVLink 4") < 118e-6
    # The floor is the same bytes without the latency: 7,340,032 x 15/16 x 8/15 =
    # 3,670,016 B at 50e9 B/s = 73.4 us (NVLink's 7/15 share, 3,211,264 B, takes 7.1 us).
    assert expert_parallel.all_to_all_floor_s(sent, 16, "NVLink 4") == pytest.approx(
        3_670_016 / 50e9)


def test_uniform_routing_imbalance():
    # 64 tokens x top-8 on 64 devices: mu = 8, 1 + sqrt(2 ln 64 / 8) = 1 + 1.0197 = 2.0197
    assert expert_parallel.uniform_routing_imbalance(64, 64, 8) == pytest.approx(2.0197, abs=1e-4)
    assert expert_parallel.uniform_routing_imbalance(10, 1, 8) == 1.0
    # One token, top-1, 2 devices: 1 + sqrt(2 ln 2 / 0.5) = 2.67, but the busiest device
    # can hold at most the whole token (mean 0.5): capped at 2.
    assert expert_parallel.uniform_routing_imbalance(1, 2, 1) == 2.0


def test_ep_with_dp_attention_pays_two_all_to_alls_per_moe_layer():
    r = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, batch=64, context=1024,
                                     dtype="fp8_e4m3", imbalance=1.0, achievable=False)
    assert r["local_batch"] == 8 and r["local_experts"] == 32
    assert r["n_all_to_alls"] == 2 * 58
    assert r["comm_s"] == pytest.approx(58 * (r["dispatch_s"] + r["combine_s"]))
    assert r["total_s"] == pytest.approx(r["attention_s"] + r["experts_s"] + r["comm_s"])
    # The busiest device runs 64 x 8 / 8 = 64 (token, expert) pairs: 2 x 64 x 58 x 44,040,192
    assert r["ops"].loc["experts", "flops"] == pytest.approx(2 * 64 * 58 * 44_040_192)
    # and reads its touched local experts: 32 x (1 - (31/32)^64) = 27.81 of 32, fp8.
    touched = 32 * (1 - (31 / 32) ** 64)
    assert r["ops"].loc["experts", "bytes"] == pytest.approx(
        touched * 58 * 44_040_192 + 64 * 58 * (2 * 7168 + 3 * 2048) * 2)
    # imbalance scales the busiest device's FLOPs
    r2 = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, 64, 1024, "fp8_e4m3",
                                      imbalance=2.0, achievable=False)
    assert r2["ops"].loc["experts", "flops"] == pytest.approx(2 * r["ops"].loc["experts", "flops"])
    over = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, 64, 1024, "fp8_e4m3",
                                        imbalance=1.0, overlap=True, achievable=False)
    assert over["total_s"] == pytest.approx(max(r["attention_s"] + r["experts_s"], r["comm_s"]))


def test_moe_layouts_dp_attention_wins_for_latent_attention_at_a_large_batch():
    # MLA's latent cache is whole on every TP device, so at batch 1,024 x 1,024 tokens
    # TP keeps 1,024 x 1,024 x 70,272 B = 73.7 GB of cache on each GPU; DP-attention 1/8.
    df = expert_parallel.moe_layouts("deepseek-v3", "H200", 8, batch=1024, context=1024,
                              dtype="fp8_e4m3", achievable=False)
    assert list(df.index) == ["TP", "EP + TP attention", "EP + DP attention"]
    assert df.loc["TP", "kv_GB_per_gpu"] == pytest.approx(1024 * 1024 * 70_272 / 1e9)
    assert df.loc["EP + DP attention", "kv_GB_per_gpu"] == pytest.approx(
        128 * 1024 * 70_272 / 1e9)
    assert df.loc["EP + DP attention", "tokens_per_s"] > df.loc["TP", "tokens_per_s"]
    assert not df.loc["TP", "fits"] and df.loc["EP + DP attention", "fits"]


@pytest.mark.parametrize("call, err, words", [
    (lambda: expert_parallel.ep_decode_breakdown("llama-2-7b", "H100 SXM", 8, achievable=False), ValueError, "dense"),
    (lambda: expert_parallel.ep_decode_breakdown("mixtral-8x7b", "H100 SXM", 3, achievable=False), ValueError,
     "n_devices"),
    (lambda: expert_parallel.ep_decode_breakdown("mixtral-8x7b", "H100 SXM", 8, attention="pp", achievable=False),
     ValueError, "attention"),
    (lambda: expert_parallel.ep_decode_breakdown("mixtral-8x7b", "H100 SXM", 8, imbalance=0.5, achievable=False),
     ValueError, "imbalance"),
    (lambda: expert_parallel.moe_all_to_all_bytes("mixtral-8x7b", -1, 8), ValueError, "tokens"),
])
def test_ep_bad_inputs(call, err, words):
    with pytest.raises(err, match=words):
        call()


def test_routed_expert_weight_bytes_is_the_non_affine_part_of_a_step():
    # Qwen3-30B-A3B, bf16, 1 token: 8 experts x 48 layers x 3 x 2048 x 768 x 2 bytes
    # = 8 x 48 x 4,718,592 x 2 = 3,623,878,656
    assert step_model.routed_expert_weight_bytes("qwen3-30b-a3b", 1, "bf16") == pytest.approx(3_623_878_656)
    assert step_model.routed_expert_weight_bytes("llama-2-7b", 5) == 0
    t = llm.decode_step_breakdown("qwen3-30b-a3b", "H100 SXM", 64, 0, "bf16")
    acts = 64 * 8 * 48 * (2 * 2048 + 3 * 768) * 2
    assert t.loc["experts", "bytes"] == pytest.approx(
        step_model.routed_expert_weight_bytes("qwen3-30b-a3b", 64, "bf16") + acts)


# --- what a layout serves within an objective -----------------------------------------------

# Qwen3-30B-A3B (config.json): 48 layers, d 2048, 32 query heads and 4 KV heads of 128,
# 128 experts of width 768, top-8, vocabulary 151,936, untied. On 8 H100 SXM at 32,768
# tokens of context, 10 ms a step.
Q3, H100, CTX, TPOT = "qwen3-30b-a3b", "H100 SXM", 32_768, 0.010


def _scan(ok, top):
    """The largest b in 1..top with ok(b), asking every b in turn (no bisection)."""
    best = 0
    for b in range(1, top + 1):
        if not ok(b):
            break
        best = b
    return best


def test_moe_max_batch_within_dp_attention_matches_a_linear_scan_of_ep_decode_breakdown():
    def ok(b):
        r = expert_parallel.ep_decode_breakdown(Q3, H100, 8, b, CTX, attention="dp", achievable=False)
        return r["fits"] and r["total_s"] <= TPOT
    want = _scan(ok, 200)
    assert 1 < want < 200
    assert expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, TPOT,
                                                layout="EP + DP attention", achievable=False) == want


def test_moe_max_batch_within_tp_layout_matches_a_linear_scan_of_the_tp_step():
    mem = hardware.get(H100).memory_bytes - llm.DEFAULT_RESERVE_BYTES

    def ok(b):
        # The ceiling's step (moe_max_batch_within's default, achievable=False).
        r = parallel.tp_step_s(Q3, H100, 8, b, CTX, achievable=False, parts=True)
        return (r["weight_bytes_per_device"] + r["kv_bytes_per_device"] <= mem
                and r["total_s"] <= TPOT)
    want = _scan(ok, 100)
    assert 1 < want < 100
    assert expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, TPOT, layout="TP", achievable=False) == want


def test_moe_max_batch_for_memory_alone_by_hand():
    # DP attention: each GPU holds everything but the experts, plus 16 of the 128 experts:
    # a layer's attention 2048 x 4096 (q) + 2 x 2048 x 512 (k, v) + 4096 x 2048 (o) =
    # 18,874,368, router 2048 x 128 = 262,144, 16 experts x 3 x 2048 x 768 = 75,497,472;
    # x 48 = 4,542,431,232; embedding and head 2 x 151,936 x 2048 = 622,329,856; norms
    # 48 x 2 x 2048 + 2048 = 198,656: 5,164,959,744 weights x 2 B = 10,329,919,488 B.
    weights = 2 * (48 * (18_874_368 + 262_144 + 75_497_472) + 622_329_856 + 198_656)
    assert weights == 10_329_919_488
    # KV a token: 2 x 48 layers x 4 heads x 128 x 2 B = 98,304 B; a sequence 32,768 of them.
    free = hardware.get(H100).memory_bytes - 2**30 - weights     # 73,641,816,064 B
    per_gpu = int(free // (CTX * 98_304))                         # 22.86 -> 22
    assert per_gpu == 22
    assert expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, None,
                                                layout="EP + DP attention", achievable=False) == 8 * per_gpu
    # TP: the memory check is the closed form of parallel.tp_max_batch.
    assert expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, None, layout="TP", achievable=False) \
        == parallel.tp_max_batch(Q3, H100, 8, CTX)


def test_moe_options_cost_each_layout_by_the_formula():
    # 8 GPUs at 4.916 USD a GPU-hour: USD per million = 8 x 4.916 / (3600 x tokens/s) x 1e6,
    # tokens/s = batch / step, the step priced directly by ep_decode_breakdown on the
    # achievable model (the decision's default), the ceiling's step beside it.
    price = 39.33 / 8
    t = expert_parallel.moe_options(Q3, options=("EP + DP attention", "EP + TP attention"),
                                    prices={H100: price}, context=CTX, tpot_s=TPOT,
                                    n_devices=8)
    assert len(t) == 2 and list(t.usd_per_million) == sorted(t.usd_per_million)
    for _, row in t.iterrows():
        mode = "dp" if row.layout == "EP + DP attention" else "tp"
        def step(achievable, b=int(row.batch), mode=mode):
            return expert_parallel.ep_decode_breakdown(Q3, H100, 8, b, CTX, attention=mode,
                                                       achievable=achievable)["total_s"]
        assert row.step_ms == pytest.approx(1e3 * step(True), rel=1e-12)
        assert row.ceiling_step_ms == pytest.approx(1e3 * step(False), rel=1e-12)
        assert row.ceiling_step_ms < row.step_ms <= 1e3 * TPOT
        assert row.usd_per_million == pytest.approx(
            8 * price / (3600 * row.batch / step(True)) * 1e6, rel=1e-9)
        assert row.batch <= row.memory_batch and row.GPU == "H100 SXM"
    # On the ceiling the same search allows at least as large a batch.
    c = expert_parallel.moe_options(Q3, options=("EP + DP attention", "EP + TP attention"),
                                    prices={H100: price}, context=CTX, tpot_s=TPOT,
                                    n_devices=8, achievable=False)
    assert (c.sort_values("layout").batch.to_numpy()
            >= t.sort_values("layout").batch.to_numpy()).all()


def test_ep_step_on_the_achievable_model_derates_each_row_and_adds_the_overheads():
    # The achievable step is achievable.table_s over the busiest GPU's rows, plus
    # achievable.overheads for Qwen3's 48 layers, plus the ceiling's all-to-alls (their floor)
    # with NCCL LL's latency on each: 2 x 48 MoE layers x (6.6 + 0.6) us.
    from gpuinfer.predict import achievable
    ceil = expert_parallel.ep_decode_breakdown(Q3, H100, 8, 64, CTX, achievable=False)
    ach = expert_parallel.ep_decode_breakdown(Q3, H100, 8, 64, CTX, achievable=True)
    rows = achievable.table_s(ceil["ops"], H100, achievable.FITTED, "fp16")
    device_s = float(achievable.overheads(rows.sum(), 48, achievable.FITTED))
    assert ach["total_s"] == pytest.approx(device_s + ceil["comm_s"] + 96 * 7.2e-6, rel=1e-12)
    assert ach["comm_s"] == pytest.approx(ceil["comm_s"] + 96 * 7.2e-6) and ach["total_s"] > ceil["total_s"]
    assert list(ach["ops"]["ceiling_s"]) == list(ceil["ops"]["seconds"])


def test_moe_options_leave_nan_where_no_batch_meets_the_objective():
    # 1 microsecond a step: no batch meets it, so no cost.
    t = expert_parallel.moe_options(Q3, options=("TP",), prices={H100: 1.0}, context=CTX,
                                    tpot_s=1e-6, n_devices=8)
    assert t.batch.iloc[0] == 0 and np.isnan(t.usd_per_million.iloc[0])
    assert t.memory_batch.iloc[0] == parallel.tp_max_batch(Q3, H100, 8, CTX)


@pytest.mark.parametrize("call, err, words", [
    (lambda: expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, 0.0, achievable=False), ValueError, "tpot_s"),
    (lambda: expert_parallel.moe_max_batch_within(Q3, H100, 8, CTX, 0.01, layout="DP", achievable=False),
     ValueError, "layout"),
    (lambda: expert_parallel.moe_max_batch_within("llama-2-7b", H100, 8, CTX, 0.01, achievable=False),
     ValueError, "dense"),
    (lambda: expert_parallel.moe_max_batch_within(Q3, H100, 8, -1, 0.01, achievable=False), ValueError,
     "context"),
    (lambda: expert_parallel.moe_options(Q3, prices={}, context=CTX, tpot_s=0.01,
                                         n_devices=8), TypeError, "prices"),
    (lambda: expert_parallel.moe_options(Q3, prices={H100: -2.0}, context=CTX, tpot_s=0.01,
                                         n_devices=8), ValueError,
     "prices"),
    (lambda: expert_parallel.moe_options(Q3, prices={H100: 1.0}, context=CTX, tpot_s=0.01,
                                         n_devices=8, formats="fp16"),
     TypeError, "formats must be a non-empty list"),   # a bare string is not a list of formats
    (lambda: expert_parallel.moe_options(Q3, options=(), prices={H100: 1.0}, context=CTX,
                                         tpot_s=0.01, n_devices=8),
     ValueError, "options"),
])
def test_moe_decision_bad_inputs(call, err, words):
    with pytest.raises(err, match=words):
        call()


def test_ep_tp_attention_ceiling_prices_all_reduces_at_their_floor():
    # DeepSeek-V3 (61 layers, d_model 7168) in fp8 on 8 H200s, batch 64, TP attention: on the
    # ceiling each of the 2 x 61 + 1 = 123 all-reduces moves 64 x 7168 values in the compute
    # format (fp8 weights compute at the 16-bit peak unless told: 2 bytes) = 917,504 B at
    # NVLink 4's NCCL bus bandwidth, 370.8 GB/s, no latency: 2.4744 us each, 0.30435 ms in all,
    # as parallel.tp_step_s(achievable=False) prices TP's.
    ceil = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, 64, 4096, "fp8",
                                               attention="tp", achievable=False)
    assert ceil["n_allreduces"] == 123
    assert ceil["allreduce_s"] == pytest.approx(917_504 / 370.8e9)
    assert ceil["comm_s"] == pytest.approx(123 * 917_504 / 370.8e9)
    tp = parallel.tp_step_s("deepseek-v3", "H200", 8, 64, 4096, dtype="fp8",
                            achievable=False, parts=True)
    assert ceil["comm_s"] == pytest.approx(tp["comm_s"])
    # The achievable model pays NCCL's latency on top: more than the floor, every time.
    ach = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, 64, 4096, "fp8",
                                              attention="tp", achievable=True)
    assert ach["allreduce_s"] > 2 * ceil["allreduce_s"]


def test_all_to_all_floor_is_the_bytes_at_the_links_bandwidth():
    # 1 MB over NVLink 4 (450 GB/s a direction, 8 GPUs a domain): 1e6 / 450e9 = 2.222 us; the
    # latency-inclusive price adds NCCL LL's base latency and one step, 6.6 + 0.6 = 7.2 us.
    link = device_links.get_interconnect("NVLink 4")
    assert expert_parallel.all_to_all_floor_s(1e6, 8, link) == pytest.approx(1e6 / 450e9)
    assert expert_parallel.all_to_all_s(1e6, 8, link) == pytest.approx(1e6 / 450e9 + 7.2e-6)
    assert expert_parallel.all_to_all_floor_s(1e6, 1, link) == 0.0
    # EP16 over two servers: 8 of the 15 other GPUs (8/15 of the bytes) are off the node, at
    # 400 Gb/s NDR = 50 GB/s a GPU (InfiniBand NDR x8 is 400 GB/s a node over 8 GPUs):
    # max(7/15 x 1e6 / 450e9, 8/15 x 1e6 / 50e9) = 10.667 us.
    assert expert_parallel.all_to_all_floor_s(1e6, 16, link) == pytest.approx(8 / 15 * 1e6 / 50e9)
    with pytest.raises(ValueError, match="sent_bytes"):
        expert_parallel.all_to_all_floor_s(-1, 8, link)
    # On the ceiling an EP + DP step pays the floor: 2 x 58 MoE layers of dispatch + combine.
    r = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, 64, 4096, "fp8",
                                            achievable=False)
    assert r["dispatch_s"] == pytest.approx(r["dispatch_sent_bytes"] / 450e9)
    assert r["comm_s"] == pytest.approx(58 * (r["dispatch_sent_bytes"]
                                              + r["combine_sent_bytes"]) / 450e9)

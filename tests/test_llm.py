import math

import numpy as np
import pytest

from gpuinfer import hardware, llm

# Published parameter totals (Hugging Face model cards / safetensors metadata).
PUBLISHED = {"llama-2-7b": 6_738_415_616, "llama-2-13b": 13_015_864_320,
             "llama-2-70b": 68_976_648_192, "llama-3-8b": 8_030_261_248,
             "llama-3-70b": 70_553_706_496, "mistral-7b": 7_241_732_096}


@pytest.mark.parametrize("name, n", PUBLISHED.items())
def test_parameter_count_from_config_matches_published(name, n):
    assert llm.get(name).n_params == n


def test_seed_example_7b_fp16():
    # 7e9 parameters x 2 bytes = 14 GB; at 2 TB/s: 142.86 tokens/s; batch 16: 2,285.7.
    assert llm.weight_read_ceiling(7e9, 2, 2e12) == pytest.approx(142.857, rel=1e-4)
    assert llm.weight_read_ceiling(7e9, 2, 2e12, batch=16) == pytest.approx(2285.71, rel=1e-4)
    np.testing.assert_allclose(llm.weight_read_ceiling(7e9, 2, 2e12, batch=np.array([1, 16])),
                               [142.857, 2285.71], rtol=1e-4)


def test_kv_cache_per_token_uses_kv_heads():
    # Llama-2-7B: 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 524,288 B.
    assert llm.kv_cache_bytes_per_token("llama-2-7b", "fp16") == 524_288
    # Llama-3-8B has 8 KV heads for 32 query heads: a quarter of that.
    assert llm.kv_cache_bytes_per_token("llama-3-8b", "fp16") == 131_072
    assert llm.get("llama-3-8b").attention == "grouped-query"
    assert llm.get("llama-2-7b").attention == "multi-head"


def test_weight_bytes():
    assert llm.weight_bytes("llama-2-7b", "fp16") == 2 * 6_738_415_616
    assert llm.weight_bytes("llama-2-7b", "int4") == 0.5 * 6_738_415_616


def test_decode_ceiling_batch1_is_the_weight_read():
    a100 = hardware.get("A100 80GB")
    expected = 2039e9 / (2 * 6_738_415_616)  # 151.3 tokens/s
    assert llm.decode_ceiling("llama-2-7b", "A100 80GB") == pytest.approx(expected)
    assert llm.decode_ceiling(llm.get("llama-2-7b"), a100) == pytest.approx(expected)
    # gpt-fast measured 104.9 tokens/s here: ~69% of the ceiling.
    assert 104.9 / expected == pytest.approx(0.693, abs=0.002)


def test_decode_ceiling_counts_kv_reads():
    w = 2 * 6_738_415_616
    kv = 4096 * 524_288
    expected = 2039e9 / (w + kv)
    assert llm.decode_ceiling("llama-2-7b", "A100 80GB", context=4096) == pytest.approx(expected)


def test_decode_ceiling_turns_compute_bound():
    # Huge batch at zero context: FLOP-bound at peak / (2 x params) per token.
    t = llm.decode_ceiling("llama-2-7b", "T4", batch=4096)
    assert t == pytest.approx(65e12 / (2 * 6_738_415_616))


def test_compute_bound_batch_is_the_ridge_for_fp16():
    # T4 ridge: 65e12 / 320e9 = 203.125 FLOP/byte -> first compute-bound batch 204.
    assert llm.compute_bound_batch("llama-2-7b", "T4") == 204
    # At long context the KV reads keep pace with the FLOPs: never compute-bound.
    assert llm.compute_bound_batch("llama-2-7b", "H100 SXM", context=32_768) == math.inf


def test_decode_intensity_doubles_with_int8():
    i16 = llm.decode_intensity("llama-2-7b", batch=8, dtype="fp16")
    i8 = llm.decode_intensity("llama-2-7b", batch=8, dtype="int8")
    assert i16 == pytest.approx(8, rel=1e-9)
    assert i8 == pytest.approx(16, rel=1e-9)


def test_max_batch_by_hand():
    # A100 80GB: (80e9 - 13.48e9) / (4096 x 524,288) = 30.97 -> 30 sequences.
    assert llm.max_batch("llama-2-7b", "A100 80GB", context=4096) == 30
    # 70B in fp16 is 138 GB: it does not fit on one 80 GB card.
    assert llm.max_batch("llama-2-70b", "A100 80GB", context=1) == 0


@pytest.mark.parametrize("call", [
    lambda: llm.weight_read_ceiling(0, 2, 2e12),
    lambda: llm.weight_read_ceiling(7e9, 2, -1),
    lambda: llm.weight_read_ceiling(7e9, 2, 2e12, batch=0),
    lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=-1),
    lambda: llm.decode_ceiling("llama-2-7b", "T4", context=-5),
    lambda: llm.decode_ceiling("llama-2-7b", "T4", batch=1.5),
    lambda: llm.max_batch("llama-2-7b", "T4", context=0),
    lambda: llm.weight_bytes("llama-2-7b", "fp7"),
])
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_unknown_names_raise_key_error():
    with pytest.raises(KeyError, match="llama-2-7b"):
        llm.get("llama-9-1b")
    with pytest.raises(KeyError, match="closest"):
        llm.decode_ceiling("llama-2-7b", "Z100")


def test_prefill_is_compute_bound():
    t = llm.prefill_time("llama-2-7b", "A100 80GB", prompt_tokens=2048)
    flops = 2048 * 2 * 6_738_415_616
    assert t >= flops / 312e12
    assert t < 1.2 * flops / 312e12  # attention adds a little


# --- decode_step_breakdown, mbu, mfu (chapter 02) ---------------------------------------

def test_breakdown_by_hand_llama2_7b_a100_batch16_context4096():
    # Weights 2 x 6,738,415,616 = 13,476,831,232 B; KV 16 x 4096 x 524,288 = 34,359,738,368 B.
    # FLOPs 16 x (2 x 6,738,415,616 + 4 x 32 x 32 x 128 x 4096) = 249,989,038,080.
    d = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=16, context=4096)
    assert d["weight_bytes"] == 13_476_831_232
    assert d["kv_bytes"] == 34_359_738_368
    assert d["bytes"] == 47_836_569_600
    assert d["flops"] == 249_989_038_080
    assert d["memory_s"] == pytest.approx(47_836_569_600 / 2039e9)   # 23.46 ms
    assert d["compute_s"] == pytest.approx(249_989_038_080 / 312e12)  # 0.80 ms
    assert d["memory_bound"]
    assert d["step_s"] == pytest.approx(llm.decode_step_time("llama-2-7b", "A100 80GB", 16, 4096))
    assert d["tokens_per_s"] == pytest.approx(16 / d["memory_s"])
    assert d["compute_ceiling_tokens_per_s"] == pytest.approx(16 * 312e12 / 249_989_038_080)


def test_breakdown_is_vectorised_and_agrees_with_decode_ceiling():
    batch = np.array([1, 8, 64, 512, 4096])
    d = llm.decode_step_breakdown("llama-2-7b", "T4", batch=batch, context=0)
    np.testing.assert_allclose(d["tokens_per_s"], llm.decode_ceiling("llama-2-7b", "T4", batch))
    np.testing.assert_allclose(d["weight_bytes"], 13_476_831_232)
    # The T4 turns compute-bound at batch 204 (its ridge point, 203.1 FLOP/byte).
    assert list(d["memory_bound"]) == [True, True, True, False, False]


def test_mbu_of_gpt_fast_is_69_percent():
    # gpt-fast, Llama-2-7B on an A100-80GB, batch 1: 104.9 tokens/s.
    # 104.9 x 13,476,831,232 B = 1.4137 TB/s of 2.039 TB/s = 0.6933.
    assert llm.mbu("llama-2-7b", "A100 80GB", 104.9) == pytest.approx(0.69334, abs=1e-5)
    # MFU of the same run: 104.9 x 2 x 6,738,415,616 FLOP / 312e12 FLOP/s = 0.453%.
    assert llm.mfu("llama-2-7b", "A100 80GB", 104.9) == pytest.approx(0.0045311, rel=1e-4)


def test_mbu_counts_kv_reads_and_batch():
    # Batch 8 at context 1000 on an H100 SXM, 800 tokens/s in total = 100 steps/s.
    step_bytes = 13_476_831_232 + 8 * 1000 * 524_288
    assert llm.mbu("llama-2-7b", "H100 SXM", 800, batch=8, context=1000) == pytest.approx(
        step_bytes * 100 / 3350e9)
    flops_per_token = 2 * 6_738_415_616 + 4 * 32 * 32 * 128 * 1000
    assert llm.mfu("llama-2-7b", "H100 SXM", 800, batch=8, context=1000) == pytest.approx(
        flops_per_token * 800 / 989e12)


def test_a_speed_at_the_ceiling_has_mbu_one():
    t = llm.decode_ceiling("llama-3-8b", "H200", batch=4, context=2048)
    assert llm.mbu("llama-3-8b", "H200", t, batch=4, context=2048) == pytest.approx(1.0)


@pytest.mark.parametrize("call", [
    lambda: llm.mbu("llama-2-7b", "A100 80GB", 0),
    lambda: llm.mbu("llama-2-7b", "A100 80GB", -3.0),
    lambda: llm.mfu("llama-2-7b", "A100 80GB", 100, batch=0),
    lambda: llm.decode_step_breakdown("llama-2-7b", "T4", batch=2.5),
])
def test_utilisation_rejects_bad_input(call):
    with pytest.raises(ValueError, match="tokens_per_s|batch"):
        call()


def test_compute_bound_context_limit_by_hand():
    # Llama-2-7B on an A100 80GB: 2N / peak = 13,476,831,232 / 312e12 = 43.195 us;
    # per cached token 524,288 B / 2039e9 B/s - 524,288 FLOP / 312e12 = 0.25545 us.
    expected = (13_476_831_232 / 312e12) / (524_288 / 2039e9 - 524_288 / 312e12)  # 169.1
    limit = llm.compute_bound_context_limit("llama-2-7b", "A100 80GB")
    assert limit == pytest.approx(expected) and 169 < limit < 170
    # It is where compute_bound_batch turns infinite.
    assert llm.compute_bound_batch("llama-2-7b", "A100 80GB", context=169) < math.inf
    assert llm.compute_bound_batch("llama-2-7b", "A100 80GB", context=170) == math.inf
    # Grouped-query attention caches 4x fewer bytes: the limit moves ~4x further out.
    gqa = llm.compute_bound_context_limit("llama-3-8b", "A100 80GB")
    assert llm.compute_bound_batch("llama-3-8b", "A100 80GB", context=int(gqa)) < math.inf
    assert llm.compute_bound_batch("llama-3-8b", "A100 80GB", context=int(gqa) + 1) == math.inf
    with pytest.raises(KeyError):
        llm.compute_bound_context_limit("llama-2-7b", "A200")

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

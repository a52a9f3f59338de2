"""The cold read's fixes to chapters 1-3 (fraction of the ceiling by model size, MLA under
tensor parallelism, Blackwell Ultra's 4-bit ridge), reached by hand."""

import pytest

from gpuinfer import achievable, hardware, llm

# achievable.FITTED: bytes at 0.85 of the datasheet bandwidth; 13 kernels a layer, each
# followed by a 0.5 us gap; a fixed 1.6 ms a step (tests/test_exercises_ch01_03.py).
BW_FRACTION, STEP_S, GAP_S, KERNELS = 0.85, 1.6e-3, 0.5e-6, 13


def _fraction_by_hand(model, gpu):
    # Batch 1, empty cache: every row memory-bound, so the ceiling's step is the step's bytes
    # over the datasheet bandwidth and the achievable step is the same bytes over 0.85 of
    # it plus the gaps (layers x 13 x 0.5 us) and 1.6 ms. The fraction is their ratio.
    ceiling_s = llm.decode_step_bytes(model, 1, 0, "fp16") / hardware.get(gpu).bandwidth
    fixed_s = STEP_S + llm.get(model).n_layers * KERNELS * GAP_S
    return ceiling_s / (ceiling_s / BW_FRACTION + fixed_s)


@pytest.mark.parametrize("model, gpu", [("llama-3-8b", "H100 SXM"), ("llama-2-7b", "A100 80GB"),
                                        ("llama-2-70b", "H200")])
def test_fraction_of_the_ceiling_by_hand(model, gpu):
    # Llama-2-70B on an H200: 137.9e9 B / 4.8e12 B/s = 28.7 ms of reads; / 0.85 = 33.8 ms;
    # + 80 x 13 x 0.5 us (0.52 ms) + 1.6 ms = 35.9 ms: 28.7 / 35.9 = 0.80.
    assert achievable.fraction_of_ceiling(model, gpu) == pytest.approx(
        _fraction_by_hand(model, gpu), rel=0.01)


def test_fraction_grows_with_the_weight_read():
    # The chapters' order: a short read (8B on an H100: 16.1e9 B / 3.35e12 B/s = 4.8 ms,
    # 5.6 ms at 0.85, so the 1.8 ms of fixed cost is a quarter of the step) below 7B on an
    # A100 (13.2e9 / 2.039e12 = 6.5 ms, 7.6 at 0.85) below 70B on an H200 (33.8 ms at 0.85).
    f = [_fraction_by_hand(m, g) for m, g in
         [("llama-3-8b", "H100 SXM"), ("llama-2-7b", "A100 80GB"), ("llama-2-70b", "H200")]]
    assert f[0] < f[1] < f[2] < BW_FRACTION


def test_mla_intensity_under_tp8_by_hand():
    # DeepSeek-V3: 128 query heads share a latent of kv_lora_rank 512 + rope 64 = 576 values
    # and read back 512. All heads on one GPU: 128 x (576 + 512) / 576 = 241.8 FLOP/byte.
    # TP8: 16 heads a GPU against the whole latent: 16 x 1088 / 576 = 30.2, an eighth.
    ds = llm.get("deepseek-v3")
    d_k, d_v = ds.kv_lora_rank + ds.qk_rope_head_dim, ds.kv_lora_rank
    assert (d_k, d_v, ds.n_heads) == (576, 512, 128)
    assert ds.n_heads / 8 * (d_k + d_v) / d_k == pytest.approx(30.22, abs=0.01)


def test_blackwell_ultra_4bit_ridge_is_three_times_its_fp8_one():
    # B300: 13.5 PFLOP/s NVFP4 dense against 4.5 fp8 (DGX B300 / 8); GB300 15 against 5.
    # The bandwidth is the same for both formats, so the ridges stand in the peaks' ratio.
    for name in ("B300", "GB300"):
        a = hardware.get(name)
        assert a.ridge_point("fp4") / a.ridge_point("fp8") == pytest.approx(3.0)
    b200 = hardware.get("B200")
    assert b200.ridge_point("fp4") / b200.ridge_point("fp8") == pytest.approx(2.0)

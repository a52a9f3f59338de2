"""What chapters 1-3 state about the achievable model and the hardware (the fraction of
the ceiling by model size, MLA under tensor parallelism, Blackwell Ultra's 4-bit ridge),
reached by hand."""

import pytest

from gpuinfer.predict import achievable, llm
from gpuinfer import hardware
from gpuinfer.predict import architectures

# achievable.FITTED: bytes at 0.85 of the datasheet bandwidth; 13 kernels a layer, each
# followed by a 0.5 us gap; a fixed 1.6 ms a step (read from the module; test_achievable
# pins the values the worked numbers below are at).
_FIT = achievable.FITTED
BW_FRACTION, STEP_S = _FIT.bandwidth, _FIT.step_s
GAP_S, KERNELS = _FIT.kernel_gap_s, _FIT.kernels_per_layer


def _fraction_by_hand(model, gpu):
    # Batch 1, empty cache: every row memory-bound, so the ceiling's step is the step's bytes
    # over the datasheet bandwidth and the achievable step is the same bytes over 0.85 of
    # it plus the gaps (layers x 13 x 0.5 us) and 1.6 ms. The fraction is their ratio.
    ceiling_s = llm.decode_step_bytes(model, 1, 0, "fp16") / hardware.get(gpu).bandwidth
    fixed_s = STEP_S + architectures.get(model).n_layers * KERNELS * GAP_S
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
    ds = architectures.get("deepseek-v3")
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


# --- second cold read: what the intervals rest on (chapter 1), the fixed cost (chapter 2) --

def _regime_rows(kind, moe=None):
    from gpuinfer.predict import validation

    e = validation.validation_errors()
    keep = e["kind"] == kind
    if moe is not None:
        keep &= e["moe"] == moe
    rows = e[keep]
    return rows.assign(ratio=rows["measured"] / rows["achievable"])


def test_dense_throughput_low_end_sits_among_the_mi300x_rows():
    # Chapter 1: 106 dense throughput rows, 100 of them TensorRT-LLM's, from 4 sources, each
    # weighing 1/4. The MI300X's 2 rows (Oracle's vLLM) are the lowest ratios, each weighing
    # 1/8: their cumulative midpoints are 1/16 and 3/16, so the 10% quantile is the first
    # row's ratio plus (0.10 - 1/16) / (1/8) = 0.3 of the way to the second's.
    from gpuinfer.predict import validation

    d = _regime_rows("throughput", moe=False)
    assert (len(d), (d["engine"] == "TensorRT-LLM").sum(), d["source"].nunique()) == (106, 100, 4)
    amd = d.loc[d["accelerator"] == "MI300X", "ratio"].sort_values().to_numpy()
    assert len(amd) == 2 and amd[1] < d.loc[d["accelerator"] != "MI300X", "ratio"].min()
    low = amd[0] + 0.3 * (amd[1] - amd[0])
    assert validation.interval(1.0, "dense throughput")[0] == pytest.approx(low, rel=1e-9)
    # The page's "sit at 0.43 of the model": the median of two rows is their mean.
    assert amd.mean() == pytest.approx(0.43, abs=0.005)


def test_batch1_low_end_is_the_one_mi300x_row():
    # Chapter 1's T4 decision: 21 batch-1 rows, gpt-fast's 20 (A100s, weight 1/40 each) and one
    # MI300X row (weight 1/2). That row has the lowest ratio, so its midpoint is at 1/4 and
    # every quantile below it (the 10% one) is the row itself: the range's low end is one
    # MI300X run, and no row is a T4.
    from gpuinfer.predict import validation

    b = _regime_rows("batch-1")
    assert set(b["accelerator"]) == {"A100 80GB", "MI300X"}
    assert (b["source"] == "gptfast2023").sum() == 20
    amd = b.loc[b["accelerator"] == "MI300X", "ratio"]
    assert len(amd) == 1 and amd.iloc[0] < b.loc[b["accelerator"] != "MI300X", "ratio"].min()
    assert validation.interval(1.0, "batch-1")[0] == pytest.approx(amd.iloc[0], rel=1e-12)


def test_fixed_cost_explains_most_of_the_quantised_mbu_drop():
    # Chapter 2: FITTED's fixed cost a step is 1.6 ms + 32 layers x 13 kernels x 0.5 us =
    # 1.808 ms. gpt-fast's bf16 step is 1 / 104.9 = 9.533 ms; its ceiling 13.22e9 B /
    # 2.039e12 B/s = 6.484 ms, so bf16 reads at 6.484 / (9.533 - 1.808) = 0.839 of the
    # datasheet. int4 (0.5625 B a weight): ceiling 1.826 ms; at 0.839 plus 1.808 ms the step
    # is 3.98 ms, MBU 1.826 / 3.98 = 45.8% (measured: 1.826 ms x 196.8 = 35.9%; bf16 68.0%):
    # 22 of 32 points. int8: 3.243 ms -> 5.67 ms, 57.2% against 50.5%: 11 of 18 points.
    from gpuinfer.measure import reference

    gf = reference.GPT_FAST_TOKENS_PER_S
    fixed_s = STEP_S + 32 * KERNELS * GAP_S
    assert float(achievable.overheads(0.0, 32, achievable.FITTED)) == pytest.approx(fixed_s)
    bw = hardware.get("A100 80GB").bandwidth
    ceil_s = {f: llm.decode_step_bytes("llama-2-7b", 1, 0, f) / bw for f in gf}
    eff = ceil_s["bf16"] / (1 / gf["bf16"] - fixed_s)
    assert eff == pytest.approx(0.839, abs=0.001)
    mbu = {f: ceil_s[f] * gf[f] for f in gf}
    for f, want_fixed, want_lost in (("int8", 0.108, 0.175), ("int4", 0.222, 0.321)):
        with_fixed = ceil_s[f] / (ceil_s[f] / eff + fixed_s)
        assert mbu["bf16"] - with_fixed == pytest.approx(want_fixed, abs=0.002)
        assert mbu["bf16"] - mbu[f] == pytest.approx(want_lost, abs=0.002)
        assert (mbu["bf16"] - with_fixed) / (mbu["bf16"] - mbu[f]) > 0.5   # "most of the drop"
        # The notebook's route (llm.mbu at the step's tokens/s) gives the same share.
        assert llm.mbu("llama-2-7b", "A100 80GB", 1 / (ceil_s[f] / eff + fixed_s),
                       dtype=f) == pytest.approx(with_fixed, rel=1e-9)

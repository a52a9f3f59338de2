"""gpuinfer.measure.quant against the theory of uniform quantisers, the OCP FP8/MX and NVFP4 rules,
SmoothQuant, and hand-worked values (the arithmetic is written beside each expected value)."""

import math

import numpy as np
import pytest
import torch

from gpuinfer import dtypes
from gpuinfer.measure import quant
from gpuinfer.measure import float_formats
from gpuinfer.measure import quant_examples

RNG = np.random.default_rng(0)


def _sine(n=200_000, amplitude=1.0):
    # A full-scale sine at a frequency incommensurate with the sampling: the error is
    # spread evenly over a step, as the textbook derivation assumes.
    t = np.arange(n)
    x = amplitude * np.sin(2 * np.pi * t * (1 / math.pi / 7))
    x[0], x[1] = amplitude, -amplitude  # hit both extremes exactly (full scale)
    return x



def test_the_fp8_e4m3_grid_tops_out_at_448():
    from gpuinfer.measure import float_formats
    assert float_formats.GRIDS["fp8_e4m3"].max_value == 448.0   # OCP OFP8: 1.75 x 2**8


def test_ideal_sqnr_textbook_values():
    # 6.02 b + 1.76 dB: 8 bits -> 49.93 dB; a uniform signal has no +1.76.
    assert quant.ideal_sqnr_db(8) == pytest.approx(6.0206 * 8 + 1.7609, abs=1e-3)
    assert quant.ideal_sqnr_db(8) == pytest.approx(49.93, abs=0.01)
    assert quant.ideal_sqnr_db(4, "uniform") == pytest.approx(24.08, abs=0.01)


@pytest.mark.parametrize("bits", [6, 8, 10])
def test_full_scale_sine_meets_6_02_bits_plus_1_76(bits):
    x = _sine()
    x_hat = quant.fake_quantize(x, bits=bits)
    measured = quant.sqnr_db(x, x_hat)
    # Textbook: signal A**2/2 over noise step**2/12 with 2**b steps over [-A, A]. The
    # restricted grid has 2**b - 2 steps (-0.07 dB at 8 bits) and a sine dwells near its
    # peaks, which sit on the grid (+0.1 dB): the two nearly cancel.
    assert measured == pytest.approx(quant.ideal_sqnr_db(bits), abs=0.1)


def test_uniform_signal_meets_6_02_bits():
    x = RNG.uniform(-1, 1, 200_000)
    x[:2] = [-1, 1]
    measured = quant.sqnr_db(x, quant.fake_quantize(x, bits=8))
    # Signal A**2/3 over noise step**2/12: 20 log10(2**b - 2) = 48.09 dB; textbook 48.16.
    assert measured == pytest.approx(20 * math.log10(2**8 - 2), abs=0.05)
    assert measured == pytest.approx(quant.ideal_sqnr_db(8, "uniform"), abs=0.1)


def test_each_bit_adds_six_db():
    x = _sine()
    s8 = quant.sqnr_db(x, quant.fake_quantize(x, bits=8))
    s9 = quant.sqnr_db(x, quant.fake_quantize(x, bits=9))
    assert s9 - s8 == pytest.approx(6.02, abs=0.1)


def test_asymmetric_gains_one_bit_on_one_sided_data():
    # ReLU-like data on [0, 1]: symmetric wastes the negative half (step 1/127), an
    # asymmetric grid uses all 256 levels (step 1/255): 20 log10(255/127) = 6.05 dB.
    x = RNG.uniform(0, 1, 200_000)
    x[:2] = [0, 1]
    sym = quant.sqnr_db(x, quant.fake_quantize(x, bits=8, symmetric=True))
    asym = quant.sqnr_db(x, quant.fake_quantize(x, bits=8, symmetric=False))
    assert asym - sym == pytest.approx(20 * math.log10(255 / 127), abs=0.3)
    _, _, zp = quant.quantize(x, bits=8, symmetric=False)
    assert zp == 0


# --- exactness and ranges ---------------------------------------------------------------------

def test_values_on_the_grid_round_trip_exactly_symmetric():
    k = np.arange(-127, 128)
    x = k * 0.01
    q, scale, zp = quant.quantize(x, bits=8)
    assert q.dtype == np.int8 and zp == 0
    np.testing.assert_array_equal(q, k)
    assert scale == pytest.approx(0.01, rel=1e-6)
    np.testing.assert_allclose(quant.dequantize(q, scale, zp), x, atol=1e-6)


def test_values_on_the_grid_round_trip_exactly_asymmetric():
    k = np.arange(0, 256)
    x = (k - 128) * 0.01  # -1.28 .. 1.27, zero on the grid at k = 128
    q, scale, zp = quant.quantize(x, bits=8, symmetric=False)
    assert q.dtype == np.uint8 and zp == 128
    np.testing.assert_array_equal(q, k)
    np.testing.assert_allclose(quant.dequantize(q, scale, zp), x, atol=1e-6)


@pytest.mark.parametrize("bits, symmetric", [(8, True), (8, False), (4, True), (4, False)])
def test_integer_ranges_respected_when_clipping(bits, symmetric):
    x = RNG.normal(size=(64, 32))
    x[0, 0] = 100.0  # an outlier the percentile range clips
    q, _, zp = quant.quantize(x, bits, symmetric=symmetric, method="percentile",
                              percentile=99.0)
    qmin, qmax = quant.qrange(bits, symmetric)
    assert q.min() == qmin if symmetric else q.min() >= qmin
    assert q.max() == qmax
    assert q.dtype == (np.int8 if symmetric else np.uint8)


def test_zero_tensor_stays_zero():
    x = np.zeros((3, 4))
    q, scale, zp = quant.quantize(x, axis=0)
    np.testing.assert_array_equal(quant.dequantize(q, scale, zp), x)


# --- granularity --------------------------------------------------------------------------------

def _rows_of_different_scales():
    # 64 output channels whose magnitudes span three decades, as real weight rows do.
    scales = np.logspace(-2, 1, 64)[:, None]
    return RNG.normal(size=(64, 256)) * scales


def test_per_channel_beats_per_tensor_on_channels_of_different_scales():
    w = _rows_of_different_scales()
    per_tensor = quant.sqnr_db(w, quant.fake_quantize(w, bits=8))
    per_channel = quant.sqnr_db(w, quant.fake_quantize(w, bits=8, axis=0))
    # Small rows share the big rows' step per tensor; per channel each gets its own.
    assert per_channel > per_tensor + 3
    _, scale, _ = quant.quantize(w, bits=8, axis=0)
    assert scale.shape == (64, 1)
    np.testing.assert_allclose(scale[:, 0], np.abs(w).max(axis=1) / 127, rtol=1e-6)


def test_group_wise_scales_and_error():
    w = _rows_of_different_scales()
    q, scale, zp = quant.quantize(w, bits=4, group_size=32)
    assert scale.shape == (64, 8) and q.shape == w.shape
    np.testing.assert_allclose(scale[3, 2], np.abs(w[3, 64:96]).max() / 7, rtol=1e-6)
    grouped = quant.sqnr_db(w, quant.dequantize(q, scale, zp))
    per_channel = quant.sqnr_db(w, quant.fake_quantize(w, bits=4, axis=0))
    assert grouped > per_channel


def test_per_channel_on_another_axis():
    x = RNG.normal(size=(4, 5, 6)) * np.arange(1, 6)[None, :, None]
    q, scale, zp = quant.quantize(x, axis=1)
    assert scale.shape == (1, 5, 1)
    np.testing.assert_allclose(scale.ravel(), np.abs(x).max(axis=(0, 2)) / 127, rtol=1e-6)


# --- calibration -------------------------------------------------------------------------------

def _calibration_with_outliers(n=100_000):
    cal = RNG.normal(size=n)
    cal[:5] = [40.0, -35.0, 30.0, 25.0, -50.0]  # rare large activations (0.005%)
    return cal


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_clipping_methods_beat_minmax_on_held_out_data_with_outliers(method):
    cal = _calibration_with_outliers()
    held_out = RNG.normal(size=50_000)
    minmax = quant.sqnr_db(held_out, quant.fake_quantize(held_out, calibration=cal))
    other = quant.sqnr_db(held_out, quant.fake_quantize(held_out, calibration=cal,
                                                        method=method))
    # minmax spends the grid on a range of 50; clipping keeps ~4 sigma: ~20 dB better.
    assert other > minmax + 15


def test_entropy_threshold_clips_a_long_tail_but_not_a_uniform_signal():
    cal = _calibration_with_outliers()
    lo, hi = quant.calibrate(cal, method="entropy")
    assert 2.0 < hi[0] < 20.0 and lo[0] == -hi[0]
    uniform = RNG.uniform(-1, 1, 50_000)
    _, hi_u = quant.calibrate(uniform, method="entropy")
    assert hi_u[0] > 0.95 * np.abs(uniform).max()


def test_percentile_range_is_the_percentile():
    x = RNG.normal(size=10_000)
    lo, hi = quant.calibrate(x, method="percentile", percentile=99.0)
    assert hi[0] == pytest.approx(np.percentile(np.abs(x), 99.0))
    lo, hi = quant.calibrate(x, symmetric=False, method="percentile", percentile=99.0)
    assert (lo[0], hi[0]) == pytest.approx((np.percentile(x, 1.0), np.percentile(x, 99.0)))


def test_calibration_set_of_batches_per_channel():
    # Activations [tokens, features]: per-feature ranges from two calibration batches.
    feats = np.array([1.0, 10.0, 100.0])
    batches = [RNG.normal(size=(100, 3)) * feats, RNG.normal(size=(50, 3)) * feats]
    lo, hi = quant.calibrate(np.zeros((7, 3)), axis=1, calibration=batches)
    both = np.concatenate(batches)
    np.testing.assert_allclose(hi, both.max(axis=0))
    np.testing.assert_allclose(lo, both.min(axis=0))


# --- numpy and torch ---------------------------------------------------------------------------

def test_torch_in_torch_out_matches_numpy():
    w = _rows_of_different_scales().astype(np.float32)
    for kwargs in ({}, {"axis": 0}, {"group_size": 32, "bits": 4},
                   {"symmetric": False, "axis": 0}, {"method": "percentile"}):
        qn, sn, zn = quant.quantize(w, **kwargs)
        qt, st, zt = quant.quantize(torch.from_numpy(w), **kwargs)
        assert isinstance(qt, torch.Tensor) and qt.dtype in (torch.int8, torch.uint8)
        assert tuple(st.shape) == sn.shape
        # Float32 (torch) and float64 (numpy) may round a value on a half step apart.
        assert (qt.numpy().astype(int) != qn.astype(int)).mean() < 1e-3
        np.testing.assert_allclose(quant.dequantize(qt, st, zt).numpy(),
                                   quant.dequantize(qn, sn, zn), atol=float(sn.max()) * 1.01)
    out = quant.dequantize(*quant.quantize(torch.from_numpy(w)), dtype=torch.float16)
    assert out.dtype == torch.float16


def test_pack_int4_halves_bytes_and_round_trips():
    q, _, _ = quant.quantize(RNG.normal(size=(8, 64)), bits=4)
    packed = quant.pack_int4(q)
    assert packed.shape == (8, 32) and packed.nbytes == q.nbytes // 2
    np.testing.assert_array_equal(quant.unpack_int4(packed), q)
    qa, _, _ = quant.quantize(RNG.normal(size=(8, 64)), bits=4, symmetric=False)
    np.testing.assert_array_equal(quant.unpack_int4(quant.pack_int4(qa), signed=False), qa)
    qt = torch.from_numpy(q)
    assert torch.equal(quant.unpack_int4(quant.pack_int4(qt)), qt)


def test_pack_int4_of_a_tensor_never_copies_it_to_the_host(monkeypatch):
    # Int4UnpackWeight.from_dense packs a GPU stack's int8 weights: a copy to the host
    # (.cpu()/.numpy()/.to('cpu')) to range-check them was ~3 GB of PCIe for a T4 stack.
    q = torch.tensor([[-8, 7, 0, -1], [3, -4, 5, 6]], dtype=torch.int8)
    expected = quant.pack_int4(q.numpy())  # the numpy route, before the traps are set

    def refuse(*args, **kwargs):
        raise AssertionError("pack_int4 copied the tensor to the host")

    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        if any(str(a) == "cpu" for a in (*args, kwargs.get("device"))):
            refuse()
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "cpu", refuse)
    monkeypatch.setattr(torch.Tensor, "numpy", refuse)
    monkeypatch.setattr(torch.Tensor, "tolist", refuse)
    monkeypatch.setattr(torch.Tensor, "to", to)
    packed = quant.pack_int4(q)
    # [-8, 7] -> low nibble 0x8, high 0x7 -> 0x78 = 120; [0, -1] -> 0xF0 = 240
    assert packed.dtype == torch.uint8 and packed.shape == (2, 2)
    monkeypatch.undo()
    assert packed.tolist() == [[120, 240], [0xC3, 0x65]] == expected.tolist()
    with pytest.raises(ValueError, match="got -9..7"):
        quant.pack_int4(torch.tensor([[-9, 7]], dtype=torch.int8))
    # on meta tensors nothing can be read: the shape and dtype still come out right
    meta = quant.pack_int4(torch.empty(4096, 11008, dtype=torch.int8, device="meta"))
    assert meta.shape == (4096, 5504) and meta.dtype == torch.uint8


# --- metrics -----------------------------------------------------------------------------------

def test_metrics_by_hand():
    x, x_hat = np.array([3.0, 4.0]), np.array([3.0, 3.0])
    assert quant.sqnr_db(x, x_hat) == pytest.approx(10 * math.log10(25 / 1))  # 13.98 dB
    assert quant.max_abs_error(x, x_hat) == 1.0
    assert quant.mse(x, x_hat) == 0.5
    assert quant.sqnr_db(x, x) == math.inf


def test_max_error_is_half_a_step_inside_the_range():
    x = RNG.uniform(-1, 1, 10_000)
    q, scale, zp = quant.quantize(x, bits=8)
    assert quant.max_abs_error(x, quant.dequantize(q, scale, zp)) <= scale / 2 * (1 + 1e-5)


def test_bytes_per_weight_counts_the_scales():
    # gpt-fast int4: groups of 32 with a bf16 scale and a bf16 zero: 0.5 + 4/32 = 0.625 B.
    assert quant.bytes_per_weight(4, 32, 2, 2) == 0.625
    assert 2 / quant.bytes_per_weight(4, 32, 2, 2) == pytest.approx(3.2)
    assert quant.bytes_per_weight(8) == 1.0
    assert quant.bytes_per_weight(8, 128, 2) == pytest.approx(1 + 2 / 128)
    with pytest.raises(ValueError, match="group_size"):
        quant.bytes_per_weight(4, 0)
    with pytest.raises(ValueError, match="scale_bytes"):
        quant.bytes_per_weight(4, 32, -1)


# --- number formats: one vocabulary with gpuinfer.dtypes -------------------------------------

def test_formats_are_the_dtypes_vocabulary():
    # Every format dtypes knows that stores values (tf32 is a compute mode), no other.
    assert set(float_formats.FORMATS) == set(dtypes.DTYPES) - {"tf32"}
    for name in float_formats.FORMATS:
        p = float_formats.format_properties(name)
        assert p["bytes"] == dtypes.bytes_per_element(name), name
        assert p["bits"] == dtypes.value_bits(name), name
    # Aliases resolve through dtypes.canonical, not by splitting the name.
    assert float_formats.format_properties("fp8")["format"] == "fp8_e4m3"
    assert float_formats.format_properties("fp4")["format"] == "fp4_e2m1"


@pytest.mark.parametrize("name, bits, nbytes, largest, eps", [
    ("fp32", 32, 4, 3.4028235e38, 2**-23),
    ("fp16", 16, 2, 65504.0, 2**-10),           # IEEE 754 binary16
    ("bf16", 16, 2, 3.3895314e38, 2**-7),       # 8 exponent bits, 7 mantissa bits
    ("fp8_e4m3", 8, 1, 448.0, 2**-3),           # OCP FP8: E4M3 max 1.75 x 2**8 = 448
    ("fp8_e5m2", 8, 1, 57344.0, 2**-2),         # OCP FP8: E5M2 max 1.75 x 2**15 = 57344
    ("fp4_e2m1", 4, 0.5, 6.0, 2**-1),           # OCP MX: E2M1 max 1.5 x 2**2 = 6
    ("mxfp4", 4, 0.5 + 1 / 32, 6.0, 2**-1),     # + an 8-bit E8M0 scale per 32: 4.25 bits
    ("nvfp4", 4, 0.5 + 1 / 16, 6.0, 2**-1),     # + an 8-bit E4M3 scale per 16: 4.5 bits
    ("int8", 8, 1, 127.0, 1 / 127),
    ("int4", 4, 0.5 + 2 / 32, 7.0, 1 / 7),      # + an fp16 scale per 32: 4.5 bits
])
def test_format_properties(name, bits, nbytes, largest, eps):
    p = float_formats.format_properties(name)
    assert p["bits"] == bits and p["bytes"] == nbytes
    assert p["max"] == pytest.approx(largest, rel=1e-6)
    assert p["relative_precision"] == pytest.approx(eps)
    assert p["min"] == pytest.approx(-largest if p["kind"] == "float" else -(largest + 1))


@pytest.mark.parametrize("name, tdtype", [("fp32", torch.float32), ("fp16", torch.float16),
                                          ("bf16", torch.bfloat16),
                                          ("fp8_e4m3", torch.float8_e4m3fn),
                                          ("fp8_e5m2", torch.float8_e5m2)])
def test_float_grids_agree_with_torch_finfo(name, tdtype):
    info, p = torch.finfo(tdtype), float_formats.format_properties(name)
    assert p["max"] == float(info.max)
    assert p["min_positive_normal"] == float(info.smallest_normal)
    assert p["relative_precision"] == float(info.eps)


@pytest.mark.parametrize("name, count, largest", [
    ("fp8_e4m3", 126, 448.0),      # 15 binades x 8 + 7 subnormals - the NaN code (480)
    ("fp8_e5m2", 123, 57344.0),    # 30 binades x 4 + 3 subnormals
    ("fp16", 31743, 65504.0),      # 30 x 1024 + 1023
    ("fp4_e2m1", 7, 6.0),          # 0.5 (subnormal), 1, 1.5, 2, 3, 4, 6
    ("int8", 127, 127.0), ("int4", 7, 7.0)])
def test_representable_values(name, count, largest):
    v = float_formats.representable_values(name)
    assert len(v) == count and v.max() == largest and v.min() > 0
    assert np.all(np.diff(v) > 0)


def test_fp4_e2m1_grid_by_hand():
    np.testing.assert_array_equal(float_formats.representable_values("fp4_e2m1"),
                                  [0.5, 1, 1.5, 2, 3, 4, 6])


@pytest.mark.parametrize("name, tdtype", [("fp8_e4m3", torch.float8_e4m3fn),
                                          ("fp8_e5m2", torch.float8_e5m2),
                                          ("fp16", torch.float16)])
def test_enumerated_values_match_torch_bit_patterns(name, tdtype):
    # An independent derivation: every 8/16-bit pattern with the sign bit clear, read by torch.
    bits = torch.finfo(tdtype).bits
    store = {8: torch.uint8, 16: torch.int16}[bits]
    codes = torch.arange(1, 2 ** (bits - 1), dtype=torch.int64).to(store)
    values = codes.view(tdtype).double().numpy()
    np.testing.assert_array_equal(float_formats.representable_values(name),
                                  np.sort(values[np.isfinite(values)]))


def test_formats_table_has_every_format():
    assert list(float_formats.formats_table()["format"]) == list(float_formats.FORMATS)


# --- casting onto a float grid: round to nearest even, subnormals, saturation ------------------

@pytest.mark.parametrize("x, expected", [
    # E2M1 ties go to the even mantissa: 0.25 between 0 and 0.5 -> 0; 0.75 between 0.5
    # (mantissa 1) and 1.0 (mantissa 0) -> 1; 1.25 -> 1; 1.75 -> 2; 2.5 -> 2; 3.5 -> 4;
    # 5 between 4 (even) and 6 -> 4.
    (0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0),
    (0.3, 0.5),   # subnormal: 0.3 / 0.5 = 0.6 steps -> 1 step
    (5.5, 6.0), (7.0, 6.0), (1e9, 6.0),   # saturates at 6, no infinity in E2M1
    (-2.6, -3.0), (-100.0, -6.0),
])
def test_fp4_e2m1_rounding_by_hand(x, expected):
    assert float_formats.fake_quantize_float(np.array([x]), "fp4_e2m1")[0] == expected


@pytest.mark.parametrize("fmt, x, expected", [
    ("fp8_e4m3", 448.0, 448.0), ("fp8_e4m3", 464.0, 448.0),  # 464: tie 448 / (480): even
    ("fp8_e4m3", 500.0, 448.0), ("fp8_e4m3", 1e6, 448.0),    # saturate, never NaN
    ("fp8_e4m3", 1 + 1 / 16, 1.0),        # tie between 1 (1.000) and 1.125 (1.001)
    ("fp8_e4m3", 1 + 3 / 16, 1.25),       # tie between 1.125 (1.001) and 1.25 (1.010)
    ("fp8_e4m3", 2.0**-9, 2.0**-9),       # smallest subnormal: 2**(1 - 7) x 2**-3
    ("fp8_e4m3", 2.0**-10, 0.0),          # half of it: tie with 0 (even) -> 0
    ("fp8_e4m3", 1.5 * 2.0**-10, 2.0**-9),
    ("fp8_e5m2", 57344.0, 57344.0), ("fp8_e5m2", 61440.0, 57344.0),  # saturate, no inf
    ("fp8_e5m2", 1.125, 1.0),             # tie between 1 (1.00) and 1.25 (1.01)
    ("fp8_e5m2", 2.0**-16, 2.0**-16),     # smallest subnormal: 2**(1 - 15) x 2**-2
])
def test_fp8_rounding_by_hand(fmt, x, expected):
    assert float_formats.fake_quantize_float(np.array([x]), fmt)[0] == expected
    assert float_formats.fake_quantize_float(np.array([-x]), fmt)[0] == -expected


@pytest.mark.parametrize("fmt, tdtype, spread", [("fp8_e4m3", torch.float8_e4m3fn, 50.0),
                                                 ("fp8_e4m3", torch.float8_e4m3fn, 1e-3),
                                                 ("fp8_e5m2", torch.float8_e5m2, 5e3)])
def test_casts_agree_with_torch_inside_the_range(fmt, tdtype, spread):
    x = RNG.normal(size=50_000) * spread      # normals and (for 1e-3) subnormals
    x = x[np.abs(x) <= float_formats.format_properties(fmt)["max"]]
    expected = torch.from_numpy(x).to(tdtype).double().numpy()
    np.testing.assert_array_equal(float_formats.fake_quantize_float(x, fmt), expected)


def test_grid_values_round_trip_exactly():
    for fmt in ["fp8_e4m3", "fp8_e5m2", "fp4_e2m1"]:
        v = float_formats.representable_values(fmt)
        v = np.concatenate([-v, [0.0], v])
        np.testing.assert_array_equal(float_formats.fake_quantize_float(v, fmt), v)


def test_torch_in_torch_out_for_floats():
    x = torch.tensor([0.74, 5.2, -9.0])
    out = float_formats.fake_quantize_float(x, "fp4")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.tolist() == [0.5, 6.0, -6.0]   # 0.74 -> 0.5 (not a tie), 5.2 -> 6


# --- scales: per tensor, per channel, MX (E8M0) and NVFP4 (E4M3 + fp32) ------------------------

def test_fp32_scale_puts_the_largest_value_on_the_maximum():
    # Per channel: row 0's amax 896 maps to 448 (scale 2), row 1's 0.5 to 448.
    w = np.array([[896.0, 3.0], [0.5, -0.25]])
    out = float_formats.fake_quantize_float(w, "fp8_e4m3", axis=0)
    # Row 0: 3 / 2 = 1.5 is on the grid -> 3 exactly. Row 1: scale 0.5 / 448;
    # -0.25 / scale = -224 is on the grid (1.75 x 2**7) -> -0.25 exactly.
    np.testing.assert_array_equal(out, w)
    # Per tensor (scale 896 / 448 = 2): 0.5 / 2 = 0.25 = 2**-2 is on the grid, -0.25 / 2 =
    # -0.125 too; everything round-trips here as well.
    np.testing.assert_array_equal(float_formats.fake_quantize_float(w, "fp8_e4m3", scale_fmt="fp32"), w)


@pytest.mark.parametrize("amax, expected", [
    (6.0, 1.0),          # floor(log2 6) = 2; 2 - emax(E2M1) 2 = 0 -> 2**0
    (7.0, 1.0),          # also 2**0: 7 will saturate to 6
    (8.0, 2.0),          # floor(log2 8) = 3 -> 2**1
    (12.0, 2.0),         # 12 / 2 = 6: exact
    (0.1, 2.0**-6),      # floor(log2 0.1) = -4 -> 2**-6
    (0.0, 2.0**-127),    # an all-zero block: the smallest E8M0 scale
])
def test_mx_scale_follows_the_ocp_rule(amax, expected):
    assert float_formats.mx_scale(amax) == expected


def test_mxfp4_block_by_hand():
    block = np.zeros(32)
    block[:5] = [7.0, 5.0, 0.3, -2.6, 6.0]
    # Scale 2**0 (amax 7): 7 saturates to 6, 5 ties to 4, 0.3 -> 0.5, -2.6 -> -3, 6 stays.
    out = float_formats.fake_quantize_float(block, "mxfp4")
    np.testing.assert_array_equal(out[:5], [6.0, 4.0, 0.5, -3.0, 6.0])
    assert np.all(out[5:] == 0)
    # A second block with amax 0.1: scale 2**-6; 0.1 / 2**-6 = 6.4 -> 6 -> 0.09375.
    two = np.concatenate([block, np.full(32, 0.1)])
    np.testing.assert_allclose(float_formats.fake_quantize_float(two, "mxfp4")[32:], 6 * 2.0**-6)
    # Same as spelling out the parts.
    np.testing.assert_array_equal(
        float_formats.fake_quantize_float(two, "fp4_e2m1", block_size=32, scale_fmt="e8m0"),
        float_formats.fake_quantize_float(two, "mxfp4"))


def test_nvfp4_scales_and_block_by_hand():
    # Two blocks of 16. Tensor amax 2688 = 6 x 448 -> s_t = 2688 / (6 x 448) = 1.
    x = np.zeros(32)
    x[0], x[1] = 2688.0, 1000.0          # block 0: amax 2688 -> s_b = 2688 / 6 = 448
    x[16], x[17] = 7.0, 1.0              # block 1: amax 7 -> 7 / 6 = 1.1667 -> E4M3 1.125
    s_b, s_t = float_formats.nvfp4_scales([2688.0, 7.0], 2688.0)
    assert s_t == 1.0
    np.testing.assert_array_equal(s_b, [448.0, 1.125])   # 1.1667 / 0.125 = 9.33 -> 9
    out = float_formats.fake_quantize_float(x, "nvfp4")
    # 2688 / 448 = 6 -> 2688; 1000 / 448 = 2.23 -> 2 -> 896.
    # 7 / 1.125 = 6.22 -> 6 -> 6.75; 1 / 1.125 = 0.889 -> 1 -> 1.125.
    np.testing.assert_array_equal(out[[0, 1, 16, 17]], [2688.0, 896.0, 6.75, 1.125])


def test_block_formats_fix_their_blocks():
    x = np.ones((2, 64))
    with pytest.raises(ValueError, match="fixes blocks of 32"):
        float_formats.fake_quantize_float(x, "mxfp4", block_size=16)
    with pytest.raises(ValueError, match="fixes blocks of 16"):
        float_formats.fake_quantize_float(x, "nvfp4", scale_fmt="e8m0")


def test_sqnr_per_bit_orders_the_4_bit_formats():
    # Gaussian rows: NVFP4 (smaller blocks, finer E4M3 scales) beats MXFP4 (power-of-two
    # scales that leave the block max anywhere in [4, 8) and clip above 6); both far
    # below fp8 E4M3 (3 mantissa bits: ~31 dB), itself below int8 per channel.
    w = _rows_of_different_scales()
    db = {name: quant.sqnr_db(w, out) for name, out in {
        "int8": quant.fake_quantize(w, bits=8, axis=0),
        "fp8": float_formats.fake_quantize_float(w, "fp8_e4m3", axis=0),
        "nvfp4": float_formats.fake_quantize_float(w, "nvfp4"),
        "mxfp4": float_formats.fake_quantize_float(w, "mxfp4")}.items()}
    assert db["int8"] > db["fp8"] > db["nvfp4"] > db["mxfp4"]
    assert 29 < db["fp8"] < 34


# --- SmoothQuant, dynamic and static activation scales -----------------------------------------

def test_smoothquant_scales_by_hand():
    act, w = np.array([16.0, 1.0, 0.0]), np.array([1.0, 4.0, 2.0])
    # alpha 0.5: sqrt(16) / sqrt(1) = 4; sqrt(1) / sqrt(4) = 0.5; no activation -> 1.
    np.testing.assert_allclose(quant.smoothquant_scales(act, w), [4.0, 0.5, 1.0])
    # alpha 1: all the range moves into the weights (s = max|X|); alpha 0: s = 1 / max|W|.
    np.testing.assert_allclose(quant.smoothquant_scales(act, w, alpha=1.0), [16.0, 1.0, 1.0])
    np.testing.assert_allclose(quant.smoothquant_scales(act, w, alpha=0.0), [1.0, 0.25, 1.0])
    # At alpha 0.5 both sides end with the same range, sqrt(max|X| x max|W|): 16/4 = 1 x 4.
    s = quant.smoothquant_scales(act[:2], w[:2])
    np.testing.assert_allclose(act[:2] / s, w[:2] * s)


def _outlier_activations(n_tokens, seed, d_in=256, outliers=(3, 77, 140, 201)):
    x = np.random.default_rng(seed).normal(size=(n_tokens, d_in))   # [tokens, d_in]
    x[:, list(outliers)] *= 30
    return x


def test_smoothing_leaves_the_product_unchanged_and_lowers_w8a8_error():
    w = RNG.normal(size=(64, 256)) / 16                   # [d_out, d_in]
    x_cal, x = _outlier_activations(512, 1), _outlier_activations(256, 2)
    s = quant.smoothquant_scales(np.abs(x_cal).max(axis=0), np.abs(w).max(axis=0))
    np.testing.assert_allclose((x / s) @ (w * s).T, x @ w.T, rtol=1e-9, atol=1e-9)

    def w8a8(x_in, w_in, cal):
        a = quant.fake_quantize(x_in, bits=8, calibration=cal)    # static, per tensor
        return a @ quant.fake_quantize(w_in, bits=8, axis=0).T

    y = x @ w.T
    before = quant.sqnr_db(y, w8a8(x, w, x_cal))
    after = quant.sqnr_db(y, w8a8(x / s, w * s, x_cal / s))
    assert after > before + 6     # the outlier channels no longer set every token's step


def test_dynamic_per_token_scales_beat_a_static_range_on_varying_tokens():
    # Tokens whose magnitude varies 100x: one static range (min-max of a calibration set)
    # is too coarse for the quiet tokens; a scale per token (axis 0) follows each.
    r = np.random.default_rng(3)
    gain = np.exp(r.normal(0, 1.5, size=(256, 1)))
    x = r.normal(size=(256, 128)) * gain
    cal = r.normal(size=(256, 128)) * np.exp(r.normal(0, 1.5, size=(256, 1)))
    static = quant.sqnr_db(x, quant.fake_quantize(x, bits=8, calibration=cal))
    dynamic = quant.sqnr_db(x, quant.fake_quantize(x, bits=8, axis=0))
    assert dynamic > static + 6


# --- the chapter's synthetic data --------------------------------------------------------------

def test_example_data_is_reproducible_and_has_its_outliers():
    np.testing.assert_array_equal(quant_examples.example_weights(), quant_examples.example_weights())
    assert quant_examples.example_weights(8, 64, tails="heavy").shape == (8, 64)
    x = quant_examples.example_activations(512, 64, outliers=(5,), outlier_gain=20.0)
    typical = np.median(np.abs(x), axis=0)                     # per channel
    assert typical[5] > 10 * np.median(typical)                # the outlier channel
    keys, values = quant_examples.example_kv(1024, 32, outlier_channels=(7,))
    assert np.abs(keys[:, 7]).mean() > 10 * np.abs(values[:, 7]).mean()


# --- bad input: every public function, one table ------------------------------------------------

X = np.ones((4, 8))
BAD_INPUT = [
    # (function, args, kwargs, error, words in the message)
    (quant.qrange, (1,), {}, ValueError, "bits"),
    (quant.qrange, (17,), {}, ValueError, "bits"),
    (quant.qrange, (8.5,), {}, ValueError, "bits"),
    (quant.qrange, (True,), {}, TypeError, "bits"),
    (quant.qrange, (8, "yes"), {}, TypeError, "symmetric"),
    (quant.ideal_sqnr_db, (8, "square"), {}, KeyError, "signal"),
    (quant.ideal_sqnr_db, (None,), {}, TypeError, "bits"),
    (quant.quantize, (X,), {"axis": 2}, ValueError, "axis 2"),
    (quant.quantize, (X,), {"axis": "rows"}, TypeError, "axis"),
    (quant.quantize, (X,), {"method": "mse"}, KeyError, "method='mse'"),
    (quant.quantize, (X,), {"method": "entrpy"}, KeyError, "did you mean 'entropy'"),
    (quant.quantize, (X,), {"group_size": 7}, ValueError, "group_size 7"),
    (quant.quantize, (X,), {"group_size": 0}, ValueError, "group_size"),
    (quant.quantize, (X,), {"axis": 0, "group_size": 4}, ValueError, "not both"),
    (quant.quantize, (X,), {"method": "entropy", "symmetric": False}, ValueError, "symmetric"),
    (quant.quantize, (X,), {"method": "percentile", "percentile": 0}, ValueError, "percentile"),
    (quant.quantize, (X,), {"method": "percentile", "percentile": 101}, ValueError, "percentile"),
    (quant.quantize, (X,), {"axis": 1, "calibration": np.ones((5, 3))}, ValueError, "channels"),
    (quant.quantize, (X,), {"group_size": 4, "calibration": np.ones(8)}, ValueError, "calibration"),
    (quant.quantize, (X,), {"calibration": []}, ValueError, "empty"),
    (quant.quantize, (X,), {"calibration": [np.array([1.0, np.nan])]}, ValueError, "NaN"),
    (quant.quantize, (np.array([1.0, np.inf]),), {}, ValueError, "NaN or infinite"),
    (quant.quantize, (np.array([1.0, np.nan, 2.0]),), {"method": "entropy"}, ValueError, "NaN"),
    (quant.quantize, (np.array([1.0, np.nan, 2.0]),), {"method": "percentile"}, ValueError, "NaN"),
    (quant.quantize, (torch.tensor([1.0, float("nan")]),), {}, ValueError, "NaN"),
    (quant.quantize, (np.array([]),), {}, ValueError, "empty"),
    (quant.quantize, ("1, 2, 3",), {}, TypeError, "numbers"),
    (quant.quantize, (None,), {}, TypeError, "numbers"),
    (quant.calibrate, (X,), {"method": "entropy", "num_bins": 100_000}, ValueError, "num_bins"),
    (quant.calibrate, (X,), {"method": "entropy", "num_bins": 64}, ValueError, "num_bins"),
    (quant.calibrate, (X,), {"method": "entropy", "num_bins": 2048.5}, ValueError, "num_bins"),
    (quant.fake_quantize, (X,), {"bits": 0}, ValueError, "bits"),
    (quant.scale_zero_point, (np.nan, 1.0), {}, ValueError, "lo"),
    (quant.scale_zero_point, (-1.0, np.inf), {}, ValueError, "hi"),
    (quant.scale_zero_point, (2.0, 1.0), {}, ValueError, "inverted"),
    (quant.scale_zero_point, ([0.0, 3.0], [1.0, 2.0]), {}, ValueError, "lo must be <= hi"),
    (quant.scale_zero_point, ([0.0, 1.0], [1.0, 2.0, 3.0]), {}, ValueError, "matching"),
    (quant.scale_zero_point, ("a", 1.0), {}, TypeError, "lo"),
    (quant.dequantize, (np.ones(3, np.int8), np.nan, 0), {}, ValueError, "scale"),
    (quant.dequantize, (np.ones(3, np.int8), 0.0, 0), {}, ValueError, "scale"),
    (quant.dequantize, (np.ones(3, np.int8), -0.1, 0), {}, ValueError, "scale"),
    (quant.dequantize, (np.ones(3), 0.1, 0), {}, TypeError, "q must hold integers"),
    (quant.dequantize, (np.ones(3, np.int8), 0.1, 0.5), {}, TypeError, "zero_point"),
    (quant.dequantize, (np.ones((2, 2), np.int8), np.ones(3), np.zeros(3, np.int8)), {},
     ValueError, "does not fit"),
    (quant.sqnr_db, (np.ones(3), np.ones(4)), {}, ValueError, "same shape"),
    (quant.sqnr_db, (np.ones(3), np.array([1.0, np.nan, 1.0])), {}, ValueError, "x_hat"),
    (quant.max_abs_error, ([], []), {}, ValueError, "empty"),
    (quant.mse, ("abc", "abd"), {}, TypeError, "numbers"),
    (quant.bytes_per_weight, (4, 0), {}, ValueError, "group_size"),
    (quant.bytes_per_weight, (4, 32, -1), {}, ValueError, "scale_bytes"),
    (quant.bytes_per_weight, (4, 32, 2, np.nan), {}, ValueError, "zero_point_bytes"),
    (quant.pack_int4, (np.ones((2, 3), np.int8),), {}, ValueError, "even"),
    (quant.pack_int4, (np.full((2, 2), 100, np.int8),), {}, ValueError, "4 bits"),
    (quant.pack_int4, (np.array([[-3, 12]]),), {}, ValueError, "all in"),   # mixed signs
    (quant.pack_int4, (np.array([[1.7, 2.2]]),), {}, TypeError, "integers"),
    (quant.pack_int4, (torch.tensor([[1.0, 2.0]]),), {}, TypeError, "integers"),
    (quant.unpack_int4, (np.array([[-1, 3]]),), {}, ValueError, "0..255"),
    (quant.unpack_int4, (np.array([[300]]),), {}, ValueError, "0..255"),
    (quant.unpack_int4, (np.array([[1.5]]),), {}, TypeError, "integers"),
    (quant.unpack_int4, (np.array([[1]], np.uint8),), {"signed": "no"}, TypeError, "signed"),
    (float_formats.mx_scale, (-1.0,), {}, ValueError, "amax"),
    (float_formats.mx_scale, (np.nan,), {}, ValueError, "amax"),
    (float_formats.mx_scale, (1.0, "int8"), {}, ValueError, "float element format"),
    (float_formats.nvfp4_scales, ([7.0], 6.0), {}, ValueError, "exceed"),
    (float_formats.nvfp4_scales, ([1.0], -1.0), {}, ValueError, "tensor_amax"),
    (float_formats.fake_quantize_float, (X, "fp6"), {}, KeyError, "fp6"),
    (float_formats.fake_quantize_float, (X, "int8"), {}, ValueError, "float element format"),
    (float_formats.fake_quantize_float, (X, None), {}, TypeError, "fmt"),
    (float_formats.fake_quantize_float, (X, "fp8_e4m3"), {"block_size": 3}, ValueError, "block_size 3"),
    (float_formats.fake_quantize_float, (X, "fp8_e4m3"), {"block_size": 4, "axis": 0}, ValueError,
     "not both"),
    (float_formats.fake_quantize_float, (X, "fp8_e4m3", 4, "e5m0"), {}, KeyError, "scale_fmt"),
    (float_formats.fake_quantize_float, (np.array([1.0, np.nan]), "fp8_e4m3"), {}, ValueError, "NaN"),
    (float_formats.fake_quantize_float, (np.array([np.inf]), "nvfp4"), {}, ValueError, "infinite"),
    (float_formats.format_properties, ("fp6",), {}, KeyError, "fp6"),
    (float_formats.format_properties, (8,), {}, TypeError, "name"),
    (float_formats.representable_values, ("fp32",), {}, ValueError, "too many"),
    (float_formats.representable_values, ("nvfp4",), {}, ValueError, "fp4_e2m1"),
    (quant.smoothquant_scales, ([1.0, 2.0], [1.0]), {}, ValueError, "one entry per input"),
    (quant.smoothquant_scales, ([1.0, -2.0], [1.0, 1.0]), {}, ValueError, "act_absmax"),
    (quant.smoothquant_scales, ([1.0, 2.0], [1.0, np.nan]), {}, ValueError, "weight_absmax"),
    (quant.smoothquant_scales, ([1.0], [1.0]), {"alpha": 1.5}, ValueError, "alpha"),
    (quant.smoothquant_scales, ([1.0], [1.0]), {"alpha": "half"}, TypeError, "alpha"),
    (quant_examples.example_weights, (0,), {}, ValueError, "d_out"),
    (quant_examples.example_weights, (), {"tails": "cauchy"}, KeyError, "tails"),
    (quant_examples.example_activations, (), {"outliers": (300,)}, ValueError, "outlier channel"),
    (quant_examples.example_activations, (), {"outlier_gain": -1}, ValueError, "outlier_gain"),
    (quant_examples.example_kv, (10, 2.5), {}, ValueError, "head_dim"),
    (quant_examples.example_kv, (), {"seed": -1}, ValueError, "seed"),
]


@pytest.mark.parametrize("fn, args, kwargs, error, words", BAD_INPUT,
                         ids=[f"{f.__name__}-{i}" for i, (f, *_) in enumerate(BAD_INPUT)])
def test_bad_input_gets_a_clear_error(fn, args, kwargs, error, words):
    with pytest.raises(error, match=words):
        fn(*args, **kwargs)


def test_unknown_names_are_both_key_and_value_errors():
    # validate.UnknownName: old `except ValueError` callers keep working.
    with pytest.raises(ValueError):
        quant.quantize(X, method="mse")
    with pytest.raises(ValueError):
        float_formats.format_properties("fp6")


def test_unpack_int4_of_a_tensor_stays_on_its_device():
    # A uint8 tensor is unpacked with torch ops on its own device, no host copy: on
    # `meta` (no data) any .cpu()/.numpy()/.item() raises. Byte 0x9F: low nibble 0xF
    # (-1 signed), high nibble 0x9 (9 - 16 = -7 signed, 9 unsigned).
    torch = pytest.importorskip("torch")
    meta = torch.empty(4, 6, dtype=torch.uint8, device="meta")
    out = quant.unpack_int4(meta)
    assert out.device.type == "meta" and tuple(out.shape) == (4, 12)
    assert out.dtype == torch.int8
    b = torch.tensor([[0x9F]], dtype=torch.uint8)
    assert quant.unpack_int4(b).tolist() == [[-1, -7]]
    assert quant.unpack_int4(b, signed=False).tolist() == [[15, 9]]
    with pytest.raises(ValueError, match="0..255"):  # other int dtypes are still checked
        quant.unpack_int4(torch.tensor([[300]], dtype=torch.int32))
    with pytest.raises(TypeError, match="integers"):
        quant.unpack_int4(torch.tensor([[1.5]]))


# --- rotations (QuaRot / SpinQuant's Hadamard) ------------------------------------------

def test_hadamard_by_hand_and_orthonormal():
    # Sylvester: H2 = [[1, 1], [1, -1]] / sqrt(2); H4 = [[H2, H2], [H2, -H2]].
    h2 = np.array([[1.0, 1.0], [1.0, -1.0]]) / np.sqrt(2)
    np.testing.assert_allclose(quant.hadamard(2), h2)
    np.testing.assert_allclose(quant.hadamard(4), np.block([[h2, h2], [h2, -h2]]) / np.sqrt(2))
    for n, seed in ((64, None), (64, 3), (256, 0)):
        h = quant.hadamard(n, seed=seed)
        np.testing.assert_allclose(h @ h.T, np.eye(n), atol=1e-12)
        assert np.allclose(np.abs(h), 1 / np.sqrt(n))
    with pytest.raises(ValueError, match="power of two"):
        quant.hadamard(12)


def test_rotation_keeps_the_product_and_spreads_an_outlier():
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(5, 16)), rng.normal(size=(16, 3))
    h = quant.hadamard(16, seed=1)
    np.testing.assert_allclose(quant.rotate(x, seed=1) @ (h.T @ w), x @ w, atol=1e-12)
    # One outlier of 8 among 16 channels: every rotated entry is +-8 / 4 = 2, and the
    # vector's length is kept.
    e = np.zeros(16)
    e[5] = 8.0
    np.testing.assert_allclose(np.abs(quant.rotate(e)), 2.0)
    assert np.linalg.norm(quant.rotate(e)) == pytest.approx(8.0)
    # On outlier-laden activations, int4 per-token quantisation loses less after rotation.
    a = quant_examples.example_activations(64, seed=2)
    r = quant.rotate(a, seed=0)
    assert (quant.sqnr_db(r, quant.fake_quantize(r, bits=4, axis=0))
            > quant.sqnr_db(a, quant.fake_quantize(a, bits=4, axis=0)) + 6)

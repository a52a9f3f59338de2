"""gpuinfer.quant against the theory of uniform quantisers and hand-worked values."""

import math

import numpy as np
import pytest
import torch

from gpuinfer import quant

RNG = np.random.default_rng(0)


def _sine(n=200_000, amplitude=1.0):
    # A full-scale sine at a frequency incommensurate with the sampling: the error is
    # spread evenly over a step, as the textbook derivation assumes.
    t = np.arange(n)
    x = amplitude * np.sin(2 * np.pi * t * (1 / math.pi / 7))
    x[0], x[1] = amplitude, -amplitude  # hit both extremes exactly (full scale)
    return x


# --- integer grids and the textbook SQNR ------------------------------------------------------

@pytest.mark.parametrize("bits, symmetric, expected", [
    (8, True, (-127, 127)), (8, False, (0, 255)), (4, True, (-7, 7)), (4, False, (0, 15)),
    (16, True, (-32767, 32767))])
def test_qrange(bits, symmetric, expected):
    assert quant.qrange(bits, symmetric) == expected


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


# --- number formats ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, bits, nbytes, largest, eps", [
    ("fp32", 32, 4, 3.4028235e38, 2**-23),
    ("fp16", 16, 2, 65504.0, 2**-10),           # IEEE 754 binary16
    ("bf16", 16, 2, 3.3895314e38, 2**-7),       # 8 exponent bits, 7 mantissa bits
    ("fp8_e4m3", 8, 1, 448.0, 2**-3),           # OCP FP8: E4M3 max 448
    ("fp8_e5m2", 8, 1, 57344.0, 2**-2),         # OCP FP8: E5M2 max 57344
    ("int8", 8, 1, 127.0, 1 / 127),
    ("int4", 4, 0.5, 7.0, 1 / 7),
])
def test_format_properties(name, bits, nbytes, largest, eps):
    p = quant.format_properties(name)
    assert p["bits"] == bits and p["bytes"] == nbytes
    assert p["max"] == pytest.approx(largest, rel=1e-6)
    assert p["relative_precision"] == pytest.approx(eps)
    assert p["min"] == pytest.approx(-largest if p["kind"] == "float" else -(largest + 1))


@pytest.mark.parametrize("name, count, largest", [
    ("fp8_e4m3", 126, 448.0),      # 0x01..0x7E; 0x7F is NaN (no infinities in E4M3FN)
    ("fp8_e5m2", 123, 57344.0),    # 0x01..0x7B; 0x7C is inf, 0x7D..0x7F NaN
    ("fp16", 31743, 65504.0),      # 0x0001..0x7BFF
    ("int8", 127, 127.0), ("int4", 7, 7.0)])
def test_representable_values(name, count, largest):
    v = quant.representable_values(name)
    assert len(v) == count and v.max() == largest and v.min() > 0
    assert np.all(np.diff(v) > 0)


def test_formats_table_has_every_format():
    assert list(quant.formats_table()["format"]) == list(quant.FORMATS)


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"bits": 1}, "bits"), ({"bits": 17}, "bits"), ({"bits": 8.5}, "bits"),
    ({"bits": True}, "bits"), ({"axis": 2}, "axis 2"), ({"axis": "rows"}, "axis"),
    ({"method": "mse"}, "method 'mse'"), ({"group_size": 7}, "group_size 7"),
    ({"group_size": 0}, "group_size"), ({"axis": 0, "group_size": 4}, "not both"),
    ({"method": "entropy", "symmetric": False}, "symmetric"),
    ({"method": "percentile", "percentile": 0}, "percentile"),
    ({"axis": 1, "calibration": np.ones((5, 3))}, "channels"),
    ({"group_size": 4, "calibration": np.ones(8)}, "calibration"),
    ({"calibration": []}, "empty"),
])
def test_bad_input_names_what_was_wrong(kwargs, words):
    with pytest.raises(ValueError, match=words):
        quant.quantize(np.ones((4, 8)), **kwargs)


def test_more_bad_input():
    with pytest.raises(ValueError, match="inf or nan"):
        quant.quantize(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="same shape"):
        quant.sqnr_db(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="does not fit"):
        quant.dequantize(np.ones((2, 2), np.int8), np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match="even"):
        quant.pack_int4(np.ones((2, 3), np.int8))
    with pytest.raises(ValueError, match="4 bits"):
        quant.pack_int4(np.full((2, 2), 100, np.int8))
    with pytest.raises(ValueError, match="too many"):
        quant.representable_values("fp32")
    with pytest.raises(ValueError, match="unknown format"):
        quant.format_properties("fp6")
    with pytest.raises(ValueError, match="signal"):
        quant.ideal_sqnr_db(8, "square")

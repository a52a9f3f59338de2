import numpy as np
import pytest

from gpuinfer import hardware
from gpuinfer.predict import roofline


def test_attainable_is_min_of_the_two_roofs():
    peak, bw = 100e12, 1e12  # ridge at 100 FLOP/byte
    assert roofline.attainable_flops(10, peak, bw) == pytest.approx(10e12)
    assert roofline.attainable_flops(1000, peak, bw) == pytest.approx(100e12)
    assert roofline.attainable_flops(100, peak, bw) == pytest.approx(100e12)


def test_attainable_is_vectorised():
    out = roofline.attainable_flops(np.array([1.0, 50, 500]), 100e12, 1e12)
    np.testing.assert_allclose(out, [1e12, 50e12, 100e12])


@pytest.mark.parametrize("bad", [dict(intensity=-1), dict(peak_flops=0), dict(bandwidth=-5)])
def test_attainable_rejects_bad_input(bad):
    args = dict(intensity=1.0, peak_flops=1e12, bandwidth=1e9) | bad
    with pytest.raises(ValueError):
        roofline.attainable_flops(**args)


def test_matmul_counts_by_hand():
    # [2, 3] @ [3, 4]: 2*2*4*3 = 48 FLOPs; (6 + 12 + 8) elements x 2 bytes = 52 bytes.
    assert roofline.matmul_flops(2, 4, 3) == 48
    assert roofline.matmul_bytes(2, 4, 3, "fp16") == 52
    assert roofline.matmul_intensity(2, 4, 3, "fp16") == pytest.approx(48 / 52)


def test_gemv_intensity_is_about_one_flop_per_byte_in_fp16():
    # Batch-1 decode: the [k, n] weight dominates; 2 FLOPs per 2-byte weight.
    assert roofline.matmul_intensity(1, 4096, 4096, "fp16") == pytest.approx(1.0, rel=1e-3)
    assert roofline.matmul_intensity(1, 4096, 4096, "int8") == pytest.approx(2.0, rel=1e-3)


def test_large_square_intensity():
    # n^3 * 2 / (3 n^2 * 2) = n / 3
    assert roofline.matmul_intensity(8192, 8192, 8192, "fp16") == pytest.approx(8192 / 3)


@pytest.mark.parametrize("m, n, k", [(0, 1, 1), (1, -1, 1), (1, 1, 2.5)])
def test_matmul_rejects_bad_sizes(m, n, k):
    with pytest.raises(ValueError, match="whole number"):
        roofline.matmul_flops(m, n, k)


def test_plot_draws_the_roof_and_the_points():
    import matplotlib

    matplotlib.use("Agg")
    ax = roofline.plot("H100 SXM", "fp16", points={"decode GEMV": 1.0, "prefill": 2000.0})
    roof = ax.get_lines()[0]
    x, y = roof.get_data()
    assert y.max() == pytest.approx(989.0)  # TFLOP/s
    assert ax.get_xscale() == "log" and "intensity" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "decode GEMV" in labels and "prefill" in labels
    with pytest.raises(ValueError, match="bf16"):
        roofline.plot(hardware.get("T4"), "bf16")


def test_op_seconds_is_the_larger_of_the_two_times():
    # 1e9 FLOP on 1e6 B at 100e12 FLOP/s, 1e12 B/s: compute 10 us, memory 1 us.
    assert roofline.op_time_s(1e9, 1e6, 100e12, 1e12) == pytest.approx(10e-6)
    assert roofline.op_time_s(1e6, 1e9, 100e12, 1e12) == pytest.approx(1e-3)
    np.testing.assert_allclose(roofline.op_time_s([1e9, 1e6], [1e6, 1e9], 100e12, 1e12),
                               [10e-6, 1e-3])
    assert np.isnan(roofline.op_time_s(1e9, 1e6, float("nan"), 1e12))  # unknown peak


def test_evaluate_puts_each_operation_on_the_roof_and_sums():
    ops = {"matmul": {"flops": 2e12, "bytes": 1e9, "dtype": "fp16"},   # 2000 FLOP/B
           "gemv": {"flops": 2e9, "bytes": 1e9, "dtype": "fp16"},      # 2 FLOP/B
           "bf16": {"flops": 1e9, "bytes": 1e6, "dtype": "bf16"}}
    # 65e12 fp16, 320e9 B/s, no bf16 peak: refused, unless NaN is asked for
    with pytest.raises(roofline.MissingPeak, match=r"T4 has no bf16 peak"):
        roofline.evaluate(ops, "T4")
    out = roofline.evaluate(ops, "T4", missing="nan")
    assert out.loc["matmul", "seconds"] == pytest.approx(2e12 / 65e12)
    assert out.loc["matmul", "bound"] == "compute"
    assert out.loc["gemv", "seconds"] == pytest.approx(1e9 / 320e9)
    assert out.loc["gemv", "bound"] == "memory"
    assert out.loc["gemv", "intensity"] == pytest.approx(2.0)
    assert np.isnan(out.loc["bf16", "seconds"]) and out.loc["bf16", "bound"] == "unknown"
    two = {k: v for k, v in ops.items() if k != "bf16"}
    assert roofline.total_s(two, "T4") == pytest.approx(2e12 / 65e12 + 1e9 / 320e9)
    # The vectorised form agrees.
    terms = {k: (v["flops"], v["bytes"], v["dtype"]) for k, v in two.items()}
    assert roofline.step_s(terms, "T4") == pytest.approx(roofline.total_s(two, "T4"))
    with pytest.raises(roofline.MissingPeak, match="T4 has no bf16"):
        roofline.step_s({**terms, "bf16": (1e9, 1e6, "bf16")}, "T4")
    assert np.isnan(roofline.step_s({**terms, "bf16": (1e9, 1e6, "bf16")}, "T4",
                                    missing="nan"))


@pytest.mark.parametrize("ops, error", [
    ([1, 2, 3], TypeError),
    ({"x": {"flops": 1.0, "bytes": 1.0}}, ValueError),                 # no dtype
    ({"x": {"flops": -1.0, "bytes": 1.0, "dtype": "fp16"}}, ValueError),
    ({"x": {"flops": 1.0, "bytes": float("nan"), "dtype": "fp16"}}, ValueError),
    ({"x": {"flops": 1.0, "bytes": 1.0, "dtype": "fp7"}}, KeyError),
])
def test_evaluate_refuses_bad_tables(ops, error):
    with pytest.raises(error):
        roofline.evaluate(ops, "T4")


def test_ridge_rows_by_hand():
    # A100 80GB fp16 ridge R = 312e12 / 2039e9 = 153.016 FLOP/byte; for k = n = 8192:
    # m >= R x 2 x 8192^2 / (2 x 8192^2 - R x 2 x 16384) = 158.96 -> 159.
    ridge = 312e12 / 2039e9
    m = ridge * 2 * 8192**2 / (2 * 8192**2 - ridge * 2 * 16384)
    assert roofline.ridge_rows(8192, 8192, "A100 80GB") == int(np.ceil(m)) == 159
    assert roofline.matmul_intensity(158, 8192, 8192) < ridge <= roofline.matmul_intensity(159, 8192, 8192)
    with pytest.raises(ValueError, match="no m"):
        roofline.ridge_rows(64, 64, "A100 80GB")   # at most 64 FLOP/byte: below the ridge

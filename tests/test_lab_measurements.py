"""lab_measurements: the one decode-step row, the roofline a sweep drew, the lab's shapes."""

import math

import pytest

torch = pytest.importorskip("torch")

from gpuinfer.measure import lab_measurements
from gpuinfer.predict import llm
from gpuinfer.measure import torch_device
from gpuinfer.hardware import devices  # noqa: E402
from gpuinfer.measure import torch_device as dev  # noqa: E402


def test_decode_step_compares_with_the_weight_read_ceiling():
    row = lab_measurements.decode_step(d_model=256, n_matrices=4, batch=2, device="cpu",
                                       min_run_s=0.01)
    ceiling = llm.weight_read_ceiling(4 * 256 * 256, 4, torch_device.accelerator_for("cpu").bandwidth, 2)
    assert row["ceiling_tokens_per_s"] == pytest.approx(ceiling)
    assert row["tokens_per_s"] == pytest.approx(2 / row["seconds"])
    assert row["fraction_of_ceiling"] == pytest.approx(row["tokens_per_s"] / ceiling)
    with pytest.raises(ValueError, match="n_matrices"):
        lab_measurements.decode_step(d_model=16, n_matrices=0, device="cpu")


def test_decode_step_on_a_device_without_known_bandwidth_has_no_ceiling(monkeypatch):
    # An unknown GPU's entry (hardware.detect) may carry bandwidth=nan: measure, don't crash.
    unknown = devices.Accelerator("Unknown GPU", 8e9, math.nan, {}, kind="gpu")
    monkeypatch.setattr(dev, "accelerator_for", lambda device=None: unknown)
    row = lab_measurements.decode_step(d_model=64, n_matrices=2, device="cpu",
                                       min_run_s=0.01)
    assert row["tokens_per_s"] > 0
    assert math.isnan(row["ceiling_tokens_per_s"]) and math.isnan(row["fraction_of_ceiling"])


def test_measured_roofline_from_hand_rows():
    rows = [{"flops": 2e9, "bytes": 1e9, "seconds": 1e-3},   # 2 TFLOP/s, 1 TB/s
            {"flops": 1e12, "bytes": 1e9, "seconds": 0.1}]   # 10 TFLOP/s, 10 GB/s
    r = lab_measurements.measured_roofline(rows)
    assert r["peak_flops"] == pytest.approx(1e13)
    assert r["bandwidth"] == pytest.approx(1e12)
    assert r["ridge"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match="seconds"):
        lab_measurements.measured_roofline([{"flops": 1.0, "bytes": 1.0}])


def test_lab_matmul_shapes_run_from_gemv_to_squares():
    shapes = lab_measurements.lab_matmul_shapes("cpu")
    assert shapes[0] == (1, 1024, 1024) and shapes[-1] == (1024, 1024, 1024)
    assert len(lab_measurements.lab_matmul_shapes("cpu", quick=True)) < len(shapes)


def test_touched_copies_cycle_the_touched_experts_beyond_the_cache(monkeypatch):
    monkeypatch.setattr(dev, "cache_bytes", lambda device=None: 2**20)     # a 1 MiB cache
    # 8 experts, two tensors of 16,384 fp32 each: 2 x 64 KiB = 128 KiB an expert.
    gate = torch.arange(8.0)[:, None].expand(8, 16384).contiguous()
    weights = {"gate": gate, "down": gate + 100}
    pool = lab_measurements.touched_copies(weights, [5, 2], "cpu")
    # Two touched experts: 256 KiB a call; 4 x 1 MiB / 256 KiB = 16 copies (the whole
    # layer's 1 MiB would have given 4, all of them cached between calls at one token).
    assert len(pool) == 16
    assert lab_measurements.copies_beyond_cache(8 * 128 * 1024, "cpu") == 4
    for copy in pool:
        assert copy["gate"].shape == (2, 16384)
        assert copy["gate"][:, 0].tolist() == [5.0, 2.0]          # expert 5 is row 0
        assert copy["down"][:, 0].tolist() == [105.0, 102.0]
    assert len({c["gate"].data_ptr() for c in pool}) == 16       # 16 distinct buffers
    # Eight touched experts: 1 MiB a call, 4 copies.
    assert len(lab_measurements.touched_copies(weights, range(8), "cpu")) == 4
    with pytest.raises(ValueError, match="experts"):
        lab_measurements.touched_copies(weights, [], "cpu")
    with pytest.raises(ValueError, match="out of range"):
        lab_measurements.touched_copies(weights, [8], "cpu")

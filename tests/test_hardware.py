import math

import pytest

from gpuinfer import dtypes, hardware


@pytest.mark.parametrize("dtype, size", [("fp32", 4), ("tf32", 4), ("fp16", 2), ("bf16", 2),
                                         ("fp8", 1), ("int8", 1), ("int4", 0.5)])
def test_bytes_per_element(dtype, size):
    assert dtypes.bytes_per_element(dtype) == size


def test_bytes_per_element_accepts_torch_dtypes_and_aliases():
    torch = pytest.importorskip("torch")
    assert dtypes.bytes_per_element(torch.float16) == 2
    assert dtypes.bytes_per_element("bfloat16") == 2


def test_unknown_dtype_names_the_known_ones():
    with pytest.raises(ValueError, match="fp16"):
        dtypes.bytes_per_element("fp12")


@pytest.mark.parametrize("required", ["T4", "L4", "A10G", "A100 40GB", "A100 80GB", "H100 SXM",
                                      "H100 PCIe", "H200", "L40S", "B200", "MI300X", "CPU"])
def test_catalogue_has_the_required_devices_with_sources(required):
    acc = hardware.get(required)
    assert acc.source.startswith("https://")
    assert acc.bandwidth > 0 and acc.memory_bytes > 0


@pytest.mark.parametrize("torch_name, entry", [
    ("Tesla T4", "T4"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA L4", "L4"), ("NVIDIA H200", "H200"), ("h100", "H100 SXM"), ("t4", "T4"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("AMD Instinct MI300X", "MI300X")])
def test_names_torch_reports(torch_name, entry):
    assert hardware.get(torch_name).name == entry


def test_unknown_device_lists_closest_entries():
    with pytest.raises(KeyError, match="H100"):
        hardware.get("H1000 SXM")
    with pytest.raises(KeyError):
        hardware.get("")


def test_dense_not_sparse_peaks():
    # Datasheets: H100 SXM fp16 1,979 TFLOP/s *with sparsity*; A100 312 dense (624 sparse).
    assert hardware.get("H100 SXM").peak_flops("fp16") == pytest.approx(989e12)
    assert hardware.get("A100 80GB").peak_flops("bf16") == pytest.approx(312e12)
    assert hardware.get("L4").peak_flops("fp16") == pytest.approx(121e12)
    # T4 has no sparsity mode: 65 TFLOP/s fp16 is already dense.
    assert hardware.get("T4").peak_flops("fp16") == pytest.approx(65e12)


def test_missing_dtype_names_the_dtypes_the_device_has():
    with pytest.raises(ValueError, match="fp16"):
        hardware.get("T4").peak_flops("bf16")


def test_ridge_points_from_the_datasheets():
    assert hardware.get("H100 SXM").ridge_point("fp16") == pytest.approx(989 / 3.35, rel=1e-9)
    assert hardware.get("A100 80GB").ridge_point("fp16") == pytest.approx(312e12 / 2039e9)
    assert hardware.get("T4").ridge_point("fp16") == pytest.approx(203.125)


def test_cpu_entry_is_derived_from_its_parts():
    cpu = hardware.get("CPU")
    assert cpu.bandwidth == pytest.approx(89.6e9)  # 2 channels x 8 B x 5600 MT/s
    assert cpu.peak_flops("fp32") == pytest.approx(8 * 4.0e9 * 32)
    assert hardware.get("EPYC 9654").bandwidth == pytest.approx(460.8e9)


def test_catalogue_frame():
    df = hardware.catalogue()
    assert len(df) == len(hardware.names())
    assert {"name", "bandwidth_bytes_per_s", "peak_fp16_flops", "source"} <= set(df.columns)
    t4 = df.set_index("name").loc["T4"]
    assert math.isnan(t4["peak_bf16_flops"])


def test_detect_on_cpu_returns_the_cpu_entry(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    acc = hardware.detect()
    assert acc.kind == "cpu" and acc.name == "CPU"


class _Props:
    total_memory = 85_520_809_984
    L2_cache_size = 52_428_800
    memory_clock_rate = 2_619_000  # kHz
    memory_bus_width = 5120  # bits


def _fake_gpu(monkeypatch, name):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: _Props())


def test_detect_known_gpu_uses_torch_memory(monkeypatch):
    _fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3")
    acc = hardware.detect()
    assert acc.name == "H100 SXM"
    assert acc.memory_bytes == _Props.total_memory
    assert acc.cache_bytes == _Props.L2_cache_size
    assert acc.peak_flops("fp16") == pytest.approx(989e12)


def test_detect_unknown_gpu_warns_and_builds_an_entry(monkeypatch):
    _fake_gpu(monkeypatch, "NVIDIA Future GPU 9000")
    with pytest.warns(UserWarning, match="not in the gpuinfer catalogue"):
        acc = hardware.detect()
    assert acc.name == "NVIDIA Future GPU 9000"
    assert acc.memory_bytes == _Props.total_memory
    # 2 transfers/clock x 2.619 GHz x 640 bytes
    assert acc.bandwidth == pytest.approx(2 * 2.619e9 * 640)
    with pytest.raises(ValueError, match="no fp16 peak"):
        acc.peak_flops("fp16")

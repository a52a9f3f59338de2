"""hardware.detect() against a mocked torch.cuda: the names real cards report, MIG slices,
GeForce cards, GPUs the catalogue does not know (with and without NVML), and the device
index asked for. No GPU needed."""

import math
import sys
import types
from types import SimpleNamespace

import pytest

from gpuinfer import hardware
from gpuinfer.measure import detection
from gpuinfer.hardware import device_links

torch = pytest.importorskip("torch")


def _props(total_memory, l2=50 * 2**20, clock_khz=2_619_000, bus_bits=5120, sms=132,
           major=9, minor=0, **extra):
    return SimpleNamespace(total_memory=total_memory, L2_cache_size=l2,
                           memory_clock_rate=clock_khz, memory_bus_width=bus_bits,
                           multi_processor_count=sms, major=major, minor=minor,
                           clock_rate=1_980_000, uuid=None, **extra)


@pytest.fixture
def gpus(monkeypatch):
    """Install fake GPUs: gpus([(name, props), ...], current=0)."""
    def install(devices, current=0):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(devices))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)

        def pick(i=None):
            if i is None:
                i = current
            if isinstance(i, torch.device):
                i = i.index
            return devices[i]

        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: pick(i)[0])
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i=None: pick(i)[1])
    # No NVML unless a test installs a fake one.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    return install


# Names torch.cuda.get_device_name() returns on real cards (nvidia-smi, deviceQuery and
# issue threads cited in gpuinfer/hardware/devices.py), and the catalogue entry each must find.
REAL_NAMES = [
    ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"), ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"), ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"), ("NVIDIA B200", "B200"),
    ("Tesla P100-PCIE-16GB", "P100 PCIe"), ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe 32GB"), ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA RTX A6000", "RTX A6000"), ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
]


@pytest.mark.parametrize("torch_name, entry", REAL_NAMES)
def test_detect_matches_the_names_real_cards_report(gpus, torch_name, entry):
    gpus([(torch_name, _props(12_345_678_912, l2=6 * 2**20))])
    acc = detection.detect()
    assert acc.name == entry
    # The card in front of us: torch's memory and L2, not the catalogue's.
    assert acc.memory_bytes == 12_345_678_912 and acc.cache_bytes == 6 * 2**20
    assert acc.peaks == hardware.get(entry).peaks and not acc.estimated


def test_detect_reads_the_gpu_asked_for(gpus):
    gpus([("NVIDIA A100-SXM4-80GB", _props(85_100_068_864)),
          ("NVIDIA H100 80GB HBM3", _props(85_045_477_376))], current=1)
    assert detection.detect(0).name == "A100 80GB"
    assert detection.detect("cuda:1").name == "H100 SXM"
    assert detection.detect(torch.device("cuda", 1)).name == "H100 SXM"
    assert detection.detect(torch.device("cuda:0")).memory_bytes == 85_100_068_864
    # No index: the current device (GPU 1 here), as torch itself would use.
    assert detection.detect().name == "H100 SXM"
    assert detection.detect("cuda").name == "H100 SXM"
    assert detection.detect("cpu").name == "CPU"
    with pytest.raises(ValueError, match="GPU 5.*2 GPUs"):
        detection.detect("cuda:5")
    with pytest.raises(ValueError, match="device"):
        detection.detect(-1)
    with pytest.raises(ValueError, match="device"):
        detection.detect("gpu-please")
    with pytest.raises(TypeError, match="device"):
        detection.detect(True)
    with pytest.raises(TypeError, match="device"):
        detection.detect(1.5)


def test_detect_asked_for_cuda_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert detection.detect().name == "CPU"
    with pytest.raises(ValueError, match="is_available"):
        detection.detect("cuda:0")


def test_detect_unknown_gpu_warns_and_builds_a_labelled_estimate(gpus):
    gpus([("NVIDIA Future GPU 9000", _props(85_520_809_984, l2=52_428_800))])
    with pytest.warns(UserWarning, match="not in the gpuinfer catalogue"):
        acc = detection.detect()
    assert acc.name == "NVIDIA Future GPU 9000" and acc.estimated
    assert acc.memory_bytes == 85_520_809_984 and acc.cache_bytes == 52_428_800
    # 2 transfers/clock x 2.619 GHz x 640 bytes, as the H100's 3.35 TB/s comes out.
    assert acc.bandwidth == pytest.approx(2 * 2.619e9 * 640)
    assert acc.peaks == {} and "ESTIMATE" in acc.note and "132 SMs" in acc.note
    with pytest.raises(ValueError, match="no fp16 peak"):
        acc.peak_flops("fp16")


def test_detect_unknown_gpu_without_clocks_has_unknown_bandwidth(gpus):
    gpus([("NVIDIA Mystery", _props(8e9, clock_khz=0, bus_bits=0))])
    with pytest.warns(UserWarning, match="unknown"):
        acc = detection.detect()
    assert math.isnan(acc.bandwidth) and acc.memory_bytes == 8e9
    assert acc.estimated and acc.memory_source == "torch total_memory of this card"


def test_detect_unknown_gpu_uses_nvml_when_installed(gpus, monkeypatch):
    gpus([("NVIDIA Mystery", _props(8e9, clock_khz=0, bus_bits=0))])
    calls = []
    fake = types.SimpleNamespace(
        NVML_CLOCK_MEM=2,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetHandleByUUID=lambda u: ("handle", u),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(total=8e9),
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 9001,  # MHz, as an L40S's GDDR6
        nvmlDeviceGetMemoryBusWidth=lambda h: 384,
        nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 350_000)  # mW
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.warns(UserWarning):
        acc = detection.detect()
    # 2 x 9001 MHz x 48 bytes = 864 GB/s (the L40S's datasheet figure), from NVML.
    assert acc.bandwidth == pytest.approx(2 * 9001e6 * 384 / 8)
    assert acc.tdp_w == 350 and "NVML" in acc.note and "NVML" in acc.source
    assert calls == ["init", "shutdown"]


@pytest.mark.parametrize("torch_name, parent, sms, compute, memory", [
    # torch reports the slice's SMs: its share of the card's (108 on an A100, 132 on an
    # H100 or H200) scales the peaks; the memory slices (of 8) scale the bandwidth.
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100 40GB", 14, 14 / 108, 1 / 8),
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "A100 80GB", 14, 14 / 108, 1 / 8),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "H100 SXM", 60, 60 / 132, 4 / 8),
    ("NVIDIA H200 MIG 1g.18gb+me", "H200", 16, 16 / 132, 1 / 8)])
def test_detect_a_mig_slice_scales_its_parent(gpus, torch_name, parent, sms, compute, memory):
    gpus([(torch_name, _props(10_200_547_328, sms=sms))])
    acc = detection.detect()
    base = hardware.get(parent)
    assert acc.estimated and "MIG" in acc.name and "ESTIMATE" in acc.note
    assert acc.memory_bytes == 10_200_547_328  # what torch reports for the slice
    assert acc.peak_flops("fp16") == pytest.approx(base.peak_flops("fp16") * compute)
    assert acc.bandwidth == pytest.approx(base.bandwidth * memory)


def test_detect_a_mig_slice_of_an_unknown_gpu_still_works(gpus):
    gpus([("NVIDIA Future GPU MIG 1g.10gb", _props(10e9))])
    with pytest.warns(UserWarning, match="not in the gpuinfer catalogue"):
        acc = detection.detect()
    assert acc.estimated and acc.memory_bytes == 10e9


def test_detect_a_geforce_card_missing_from_the_catalogue(gpus):
    gpus([("NVIDIA GeForce RTX 5090", _props(33_670_000_000, clock_khz=14_001_000,
                                              bus_bits=512, sms=170, major=12))])
    with pytest.warns(UserWarning):
        acc = detection.detect()
    assert acc.name == "NVIDIA GeForce RTX 5090" and acc.estimated
    assert acc.bandwidth == pytest.approx(2 * 14.001e9 * 64)  # 1.79 TB/s


@pytest.mark.parametrize("torch_name", [n for n, _ in REAL_NAMES if "pcie" in n.lower()])
def test_a_pcie_card_never_maps_to_an_sxm_entry(torch_name):
    # An A100-PCIE-40GB used to find the SXM entry (400 W, NVLink 3): lab 7 then compared
    # a PCIe pair with NVLink. Every PCIe name finds a PCIe entry.
    assert "PCIe" in hardware.get(torch_name).name


@pytest.mark.parametrize("torch_name, entry, bandwidth_gb, tdp_w", [
    # A100 datasheet (hardware.devices.A100_DATASHEET): PCIe 80GB 1,935 GB/s at 300 W; PCIe
    # 40GB 1,555 GB/s at 250 W; both 312 TFLOP/s dense fp16, PCIe Gen4.
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935, 300),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", 1555, 250),
])
def test_a100_pcie_cards_get_pcie_figures_and_a_pcie_link(torch_name, entry, bandwidth_gb,
                                                         tdp_w):
    acc = hardware.get(torch_name)
    assert acc.name == entry and acc.bandwidth == bandwidth_gb * 1e9 and acc.tdp_w == tdp_w
    assert acc.peaks["fp16"] == 312e12
    with pytest.raises(KeyError):  # no NVLink entry: lab 7 falls back to the host link
        device_links.interconnect_for(acc)
    assert device_links.host_link(acc).name == "PCIe Gen4 x16"

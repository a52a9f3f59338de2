"""The accelerator catalogue: dense peaks, the memory cards really have, validation, MIG
profiles and achievable ceilings. Expected values are written out from the sources cited
in gpuinfer/hardware/."""

import math

import pytest

from gpuinfer import dtypes, hardware
from gpuinfer.hardware import devices
from gpuinfer.hardware import measured_rates
from gpuinfer.hardware import mig_slices
from gpuinfer.measure import detection

MiB, GiB = 2**20, 2**30


@pytest.mark.parametrize("dtype, size", [("fp32", 4), ("tf32", 4), ("fp16", 2), ("bf16", 2),
                                         ("fp8", 1), ("int8", 1),
                                         ("int4", 0.5 + 2 / 32)])  # + an fp16 scale per 32
def test_bytes_per_element(dtype, size):
    assert dtypes.bytes_per_element(dtype) == size


def test_bytes_per_element_accepts_torch_dtypes_and_aliases():
    torch = pytest.importorskip("torch")
    assert dtypes.bytes_per_element(torch.float16) == 2
    assert dtypes.bytes_per_element("bfloat16") == 2


def test_unknown_dtype_names_the_known_ones():
    with pytest.raises(ValueError, match="fp16"):
        dtypes.bytes_per_element("fp12")


REQUIRED = ["T4", "L4", "A10", "A10G", "L40S", "L40", "A40", "A30", "V100 SXM2",
            "V100 SXM2 32GB", "V100 PCIe 16GB", "V100 PCIe 32GB", "P100 PCIe", "A100 40GB",
            "A100 80GB", "A100 80GB PCIe", "H100 SXM", "H100 PCIe", "H100 NVL", "H200",
            "H200 NVL", "GH200", "GH200 144GB", "B200", "GB200", "MI300X", "RTX 4090",
            "RTX 3090", "RTX 6000 Ada", "RTX A6000", "CPU", "EPYC 9654"]


@pytest.mark.parametrize("required", REQUIRED)
def test_catalogue_has_the_required_devices_with_sources(required):
    acc = hardware.get(required)
    assert "https://" in acc.source
    assert acc.bandwidth > 0 and acc.memory_bytes > 0
    # Where memory_bytes comes from is stated: a URL, or a flag saying it is not sourced.
    assert "https://" in acc.memory_source or acc.memory_source.startswith(("UNSOURCED", "ASSUMED"))


@pytest.mark.parametrize("torch_name, entry", [
    ("Tesla T4", "T4"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("NVIDIA L4", "L4"), ("NVIDIA H200", "H200"), ("h100", "H100 SXM"), ("t4", "T4"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA GH200 144G HBM3e", "GH200 144GB"), ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"), ("NVIDIA A10G", "A10G"), ("NVIDIA A10", "A10"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA L40", "L40"), ("NVIDIA A40", "A40"),
    ("NVIDIA A30", "A30"), ("Tesla P100-PCIE-16GB", "P100 PCIe"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"), ("Tesla V100-PCIE-32GB", "V100 PCIe 32GB"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"), ("NVIDIA RTX A6000", "RTX A6000"),
    ("AMD Instinct MI300X", "MI300X")])
def test_names_torch_reports(torch_name, entry):
    assert hardware.get(torch_name).name == entry


def test_unknown_device_lists_closest_entries():
    with pytest.raises(KeyError, match="H100"):
        hardware.get("H1000 SXM")
    with pytest.raises(KeyError):
        hardware.get("")


@pytest.mark.parametrize("bad", [None, 3, 80e9, True, ["H100 SXM"]])
def test_get_refuses_what_is_not_a_name(bad):
    with pytest.raises(TypeError, match="accelerator"):
        hardware.get(bad)


def test_dense_not_sparse_peaks():
    # Datasheets: H100 SXM fp16 1,979 TFLOP/s *with sparsity*; A100 312 dense (624 sparse).
    assert hardware.get("H100 SXM").peak_flops("fp16") == pytest.approx(989e12)
    assert hardware.get("A100 80GB").peak_flops("bf16") == pytest.approx(312e12)
    assert hardware.get("L4").peak_flops("fp16") == pytest.approx(121e12)
    # T4 has no sparsity mode: 65 TFLOP/s fp16 is already dense.
    assert hardware.get("T4").peak_flops("fp16") == pytest.approx(65e12)
    # H100 NVL: 1,671 TFLOP/s bf16 with sparsity on NVIDIA's H100 page.
    assert hardware.get("H100 NVL").peak_flops("bf16") == pytest.approx(1671e12 / 2)
    # GH200 datasheet: "1,979 teraFLOPS* | 990 teraFLOPS" fp16.
    assert hardware.get("GH200").peak_flops("fp16") == pytest.approx(990e12)


def test_blackwell_has_dense_fp4():
    # Blackwell datasheet, HGX B200 per GPU: FP4 18 PFLOPS and FP8 9 PFLOPS with sparsity.
    b200 = hardware.get("B200")
    assert b200.peak_flops("fp4") == pytest.approx(18e15 / 2)
    assert b200.peak_flops("nvfp4") == pytest.approx(18e15 / 2)  # a format computing in fp4
    assert b200.peak_flops("fp8_e4m3") == pytest.approx(9e15 / 2)
    assert hardware.get("GB200").peak_flops("fp4") == pytest.approx(20e15 / 2)
    with pytest.raises(ValueError, match="no fp4 peak"):
        hardware.get("H100 SXM").peak_flops("fp4")


def test_geforce_fp16_peak_is_the_fp32_accumulate_rate():
    # Ada: 330.3 TFLOP/s fp16 with fp16 accumulate, half that with fp32 accumulate, which
    # is what a torch fp16 matmul uses (pytorch/pytorch#123157).
    assert hardware.get("RTX 4090").peak_flops("fp16") == pytest.approx(330.3e12 / 2, rel=1e-3)
    # GA102 (RTX 3090): 142 with fp16 accumulate, 71 with fp32 accumulate.
    assert hardware.get("RTX 3090").peak_flops("fp16") == pytest.approx(142e12 / 2)
    # A workstation card runs fp32 accumulate at the full rate: RTX A6000 dense 154.8.
    assert hardware.get("RTX A6000").peak_flops("fp16") == pytest.approx(309.7e12 / 2, rel=1e-3)


def test_missing_dtype_names_the_dtypes_the_device_has():
    with pytest.raises(ValueError, match="fp16"):
        hardware.get("T4").peak_flops("bf16")


def test_ridge_points_from_the_datasheets():
    assert hardware.get("H100 SXM").ridge_point("fp16") == pytest.approx(989 / 3.35, rel=1e-9)
    assert hardware.get("A100 80GB").ridge_point("fp16") == pytest.approx(312e12 / 2039e9)
    assert hardware.get("T4").ridge_point("fp16") == pytest.approx(203.125)


# --- memory in the bytes a card has ---------------------------------------------------

@pytest.mark.parametrize("name, mib", [
    # deviceQuery prints "Total amount of global memory: <MiB> MBytes (<bytes> bytes)",
    # the MiB rounded ("%.0f" of bytes / 2**20).
    ("H100 SXM", 81106), ("A100 80GB", 81158), ("L4", 22478), ("L40S", 45589),
    ("A40", 45403), ("H100 NVL", 95235), ("RTX 4090", 24210), ("RTX 3090", 24154),
    ("RTX 6000 Ada", 48640), ("A100 80GB PCIe", 81049), ("MI300X", 196592),
    ("A10G", 23028)])  # the A10G's is nvidia-smi's total
def test_memory_is_what_the_card_reports_in_mib(name, mib):
    assert round(hardware.get(name).memory_bytes / MiB) == mib


def test_hbm_cards_have_binary_gigabytes_and_ecc_takes_a_little():
    h100 = hardware.get("H100 SXM")
    assert h100.memory_marketing_bytes == 80e9
    assert 85.0e9 < h100.memory_bytes < 80 * GiB  # 85.05e9: 80 GiB less what the driver keeps
    assert hardware.get("A100 80GB").memory_bytes == 85_100_068_864
    assert hardware.get("A100 40GB").memory_bytes == 42_298_834_944  # 40339 MiB
    # H200: the whole-GPU MIG instance 7g.141gb reports 139.75 GiB = 150.06e9 B.
    assert hardware.get("H200").memory_bytes == pytest.approx(139.75 * GiB)
    assert hardware.get("H200").memory_bytes == pytest.approx(150.06e9, rel=1e-4)
    # A T4 with ECC on has less than its 16 GB: 15110 MiB.
    t4 = hardware.get("T4")
    assert t4.memory_bytes == 15_843_721_216 and round(t4.memory_bytes / MiB) == 15110
    assert t4.memory_bytes < t4.memory_marketing_bytes == 16e9


def test_b200_memory_is_178_35_gib_below_nvidia_smis_total():
    b200 = hardware.get("B200")
    assert b200.memory_bytes == pytest.approx(178.35 * GiB)
    assert b200.memory_bytes < 183359 * MiB  # nvidia-smi's total includes the reserve


def test_unsourced_memory_is_flagged_not_invented():
    for name in ("H100 PCIe", "L40", "V100 SXM2", "P100 PCIe", "RTX A6000", "GB200"):
        acc = hardware.get(name)
        assert acc.memory_source.startswith("UNSOURCED")
        assert acc.memory_bytes == acc.memory_marketing_bytes


def test_cpu_rows_state_their_memory():
    assert hardware.get("EPYC 9654").memory_bytes == 12 * 64e9  # one 64 GB DIMM per channel
    for name in ("CPU", "EPYC 9654"):
        assert hardware.get(name).memory_source.startswith("ASSUMED")


def test_cpu_entry_is_derived_from_its_parts():
    cpu = hardware.get("CPU")
    assert cpu.bandwidth == pytest.approx(89.6e9)  # 2 channels x 8 B x 5600 MT/s
    assert cpu.peak_flops("fp32") == pytest.approx(8 * 4.0e9 * 32)
    assert hardware.get("EPYC 9654").bandwidth == pytest.approx(460.8e9)


def test_catalogue_frame():
    df = devices.catalogue()
    assert len(df) == len(devices.names())
    assert {"name", "bandwidth_bytes_per_s", "peak_fp16_flops", "peak_fp4_flops",
            "memory_bytes", "memory_marketing_bytes", "memory_source", "source"} <= set(df.columns)
    t4 = df.set_index("name").loc["T4"]
    assert math.isnan(t4["peak_bf16_flops"])
    assert t4["memory_bytes"] == 15_843_721_216 and t4["memory_marketing_bytes"] == 16e9


def test_detect_on_cpu_returns_the_cpu_entry(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    acc = detection.detect()
    assert acc.kind == "cpu" and acc.name == "CPU"


# --- validation on construction -------------------------------------------------------

GOOD = dict(name="X", memory_bytes=8e9, bandwidth=1e11, peaks={"fp16": 1e12})
NAN, INF = math.nan, math.inf


@pytest.mark.parametrize("change, error, words", [
    (dict(bandwidth=-1.0), ValueError, "bandwidth"),
    (dict(bandwidth=0), ValueError, "bandwidth"),
    (dict(bandwidth=NAN), ValueError, "bandwidth"),  # a row with peaks needs a bandwidth
    (dict(bandwidth=INF), ValueError, "bandwidth"),
    (dict(bandwidth="fast"), TypeError, "bandwidth"),
    (dict(bandwidth=None), TypeError, "bandwidth"),
    (dict(memory_bytes=-8e9), ValueError, "memory_bytes"),
    (dict(memory_bytes=0), ValueError, "memory_bytes"),
    (dict(memory_bytes=NAN), ValueError, "memory_bytes"),
    (dict(memory_bytes="80GB"), TypeError, "memory_bytes"),
    (dict(peaks={"fp16": -1e12}), ValueError, "fp16"),
    (dict(peaks={"fp16": 0}), ValueError, "fp16"),
    (dict(peaks={"fp16": NAN}), ValueError, "fp16"),
    (dict(peaks={"fp16": INF}), ValueError, "fp16"),
    (dict(peaks={"fp16": "big"}), TypeError, "fp16"),
    (dict(peaks={"fp12": 1e12}), KeyError, "fp12"),
    (dict(peaks={16: 1e12}), TypeError, "peak names"),
    (dict(peaks=[1e12]), TypeError, "peaks"),
    (dict(peaks=None), TypeError, "peaks"),
    (dict(kind="tpu"), KeyError, "kind"),
    (dict(tdp_w=-70), ValueError, "tdp_w"),
    (dict(cache_bytes=NAN), ValueError, "cache_bytes"),
    (dict(memory_marketing_bytes=-1), ValueError, "memory_marketing_bytes"),
    (dict(name=""), ValueError, "name"),
    (dict(name=None), TypeError, "name"),
    (dict(aliases="h100"), TypeError, "aliases"),
    (dict(estimated="yes"), TypeError, "estimated must be"),
    (dict(source=None), TypeError, "source"),
])
def test_accelerator_refuses_bad_values(change, error, words):
    with pytest.raises(error, match=words):
        devices.Accelerator(**{**GOOD, **change})


def test_accelerator_normalises_and_allows_an_unknown_devices_bandwidth():
    acc = devices.Accelerator(**{**GOOD, "peaks": {"half": 2e12, "fp8_e4m3": 4e12}})
    assert acc.peaks == {"fp16": 2e12, "fp8": 4e12}  # spellings map to the peak they use
    # An unknown device (no peaks at all) may have an unknown (NaN) bandwidth: detect()
    # builds such an entry, and measurements carry on without a ceiling.
    unknown = devices.Accelerator("Unknown GPU", 8e9, math.nan, {}, kind="gpu")
    assert math.isnan(unknown.bandwidth)
    with pytest.raises(ValueError, match="no known bandwidth"):
        unknown.ridge_point("fp16")


# --- MIG profiles -------------------------------------------------------------------------

def test_mig_profiles_of_an_a100_80gb():
    df = mig_slices.mig_profiles("A100 80GB")
    assert list(df.index) == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb",
                              "4g.40gb", "7g.80gb"]
    # Compute: the slice's SMs of the card's 108 (14 per compute slice; 7g has 98, as
    # nvidia-smi mig -lgip lists them), not g/7. Memory: 8 memory slices (MIG user guide).
    assert df.loc["1g.10gb", "compute_fraction"] == pytest.approx(14 / 108)
    assert df.loc["3g.40gb", "compute_fraction"] == pytest.approx(42 / 108)
    assert df.loc["7g.80gb", "compute_fraction"] == pytest.approx(98 / 108)
    assert df.loc["1g.20gb", "bandwidth_fraction"] == pytest.approx(2 / 8)
    assert df.loc["3g.40gb", "bandwidth_fraction"] == pytest.approx(4 / 8)
    assert df.loc["1g.10gb", "max_instances"] == 7
    assert df.loc["1g.20gb", "max_instances"] == 4
    assert df.loc["2g.20gb", "max_instances"] == 3
    assert df.loc["3g.40gb", "max_instances"] == 2
    assert df.loc["7g.80gb", "max_instances"] == 1
    # Reported on Wulver (deviceQuery): 10.2 GB and 14 SMs for 1g.10gb.
    assert df.loc["1g.10gb", "memory_bytes"] == pytest.approx(10.2e9)
    assert df.loc["1g.10gb", "sm_count"] == 14
    # Not reported: derived as memory slices / 8 x the card's memory.
    assert df.loc["7g.80gb", "memory_bytes"] == pytest.approx(85_100_068_864)
    assert df.loc["1g.20gb", "memory_bytes"] == pytest.approx(2 / 8 * 85_100_068_864)
    assert df.loc["1g.20gb", "memory_source"] == "derived"


def test_mig_profiles_of_hopper_from_nvidia_smi():
    h100 = mig_slices.mig_profiles("H100 SXM")
    assert h100.loc["1g.10gb", "memory_bytes"] == pytest.approx(9.75 * GiB)
    assert h100.loc["7g.80gb", "sm_count"] == 132 and h100.loc["3g.40gb", "sm_count"] == 60
    h200 = mig_slices.mig_profiles("nvidia h200")
    assert list(h200.index)[-1] == "7g.141gb"
    assert h200.loc["1g.18gb", "memory_bytes"] == pytest.approx(16.00 * GiB)
    assert h200.loc["3g.71gb", "memory_bytes"] == pytest.approx(69.50 * GiB)
    a100_40 = mig_slices.mig_profiles("A100 40GB")
    assert a100_40.loc["1g.5gb", "memory_bytes"] == pytest.approx(4.75 * GiB)  # -lgip
    assert a100_40.loc["1g.10gb", "memory_bytes"] == pytest.approx(42_298_834_944 / 4)  # derived
    assert a100_40.loc["7g.40gb", "sm_count"] == 98
    assert a100_40.loc["1g.10gb", "memory_fraction"] == pytest.approx(2 / 8)
    # An H100's 1g slice has 16 of 132 SMs: 0.121 of the peaks, less than 1/7.
    assert h100.loc["1g.10gb", "compute_fraction"] == pytest.approx(16 / 132)
    assert h100.loc["3g.40gb", "compute_fraction"] == pytest.approx(60 / 132)
    for name in ("H100 SXM", "H100 NVL", "H200 NVL"):
        assert mig_slices.mig_profiles(name)["compute_fraction"].max() == 1.0  # 7g: all 132
    # No published -lgip for the 114-SM H100 PCIe: compute slices / 7.
    pcie = mig_slices.mig_profiles("H100 PCIe")
    assert pcie["sm_count"].isna().all()
    assert pcie.loc["3g.40gb", "compute_fraction"] == pytest.approx(3 / 7)


def test_mig_profiles_refuse_gpus_without_mig():
    with pytest.raises(ValueError, match="no MIG"):
        mig_slices.mig_profiles("T4")
    with pytest.raises(KeyError):
        mig_slices.mig_profiles("H1000")
    with pytest.raises(TypeError):
        mig_slices.mig_profiles(None)


def test_a_mig_slice_is_scaled_from_its_parent():
    s = mig_slices.mig_slice("A100 80GB", "3g.40gb")
    assert s.name == "A100 80GB MIG 3g.40gb" and s.estimated
    assert s.peak_flops("fp16") == pytest.approx(312e12 * 42 / 108)
    assert s.bandwidth == pytest.approx(2039e9 * 4 / 8)
    assert s.memory_bytes == pytest.approx(42.4e9)
    # The name torch reports for a slice finds the same thing.
    assert hardware.get("NVIDIA A100-SXM4-80GB MIG 3g.40gb") == s
    with pytest.raises(KeyError, match="profile"):
        mig_slices.mig_slice("A100 80GB", "9g.99gb")
    # What torch reports for the slice wins over the table; more SMs than the card has is refused.
    assert mig_slices.mig_slice("H100 SXM", "1g.20gb", sm_count=26).peak_flops("fp16") \
        == pytest.approx(hardware.get("H100 SXM").peak_flops("fp16") * 26 / 132)
    with pytest.raises(ValueError, match="sm_count"):
        mig_slices.mig_slice("A100 80GB", "1g.10gb", sm_count=200)


# --- achievable ceilings --------------------------------------------------------------------

def test_achievable_matmul_from_mamf_and_bandwidth_from_gpt_fast():
    h100 = measured_rates.achievable("H100 SXM")
    assert h100["matmul_bf16_flops"] == pytest.approx(794.5e12)
    assert h100["matmul_bf16_flops"] / hardware.get("H100 SXM").peak_flops("bf16") \
        == pytest.approx(0.803, abs=1e-3)  # MAMF's 80.3% efficiency
    assert h100["matmul_fp8_flops"] == pytest.approx(1402.6e12)
    a100 = measured_rates.achievable("A100 80GB")
    assert a100["bandwidth_bytes_per_s"] == pytest.approx(1700e9)
    # ridge = best 16-bit matmul (271.2 bf16 > 258.74 fp16) / achievable bandwidth
    assert a100["ridge_point"] == pytest.approx(271.2e12 / 1700e9)
    assert "gpt-fast" in a100["bandwidth_bytes_per_s_source"]


def test_a_t4_sustains_far_less_than_its_boost_clock_peak():
    t4 = measured_rates.achievable("Tesla T4")
    assert t4["matmul_fp16_flops"] == pytest.approx(41.91e12)
    assert t4["matmul_fp16_flops"] / 65e12 == pytest.approx(0.645, abs=1e-3)
    assert math.isnan(t4["bandwidth_bytes_per_s"]) and math.isnan(t4["ridge_point"])
    assert t4["ridge_point_datasheet_bandwidth"] == pytest.approx(41.91e12 / 320e9)
    assert "585" in t4["note"] and "1590" in t4["note"]


def test_achievable_is_nan_where_nothing_is_published():
    l40 = measured_rates.achievable("L40")
    assert math.isnan(l40["matmul_fp16_flops"]) and l40["matmul_fp16_flops_source"] == ""
    assert len(measured_rates.achievable_table()) >= 10
    with pytest.raises(KeyError):
        measured_rates.achievable("H900")


def test_cpu_ceilings_for_the_threads_used():
    # The reference CPU: 8 cores, 89.6 GB/s, 8 x 4 GHz x 32 = 1.024 TFLOP/s fp32.
    one = detection.cpu(threads=1)
    assert one.bandwidth == pytest.approx(89.6e9 / 8)
    assert one.peaks["fp32"] == pytest.approx(1.024e12 / 8)
    assert one.cores == 1 and "1 of 8 cores" in one.name
    assert detection.cpu().cores == 8
    with pytest.raises(ValueError, match="threads"):
        detection.cpu(threads=9)


def test_derated_uses_published_measurements():
    t4 = measured_rates.derated("T4")
    a = measured_rates.achievable("T4")
    assert t4.peaks["fp16"] == a["matmul_fp16_flops"] < hardware.get("T4").peaks["fp16"]
    assert t4.bandwidth == hardware.get("T4").bandwidth  # no published bandwidth: datasheet
    assert measured_rates.derated("T4", bandwidth_fraction=0.83).bandwidth == pytest.approx(0.83 * 320e9)
    with pytest.raises(ValueError, match="percentage"):
        measured_rates.derated("T4", bandwidth_fraction=83)
    h100 = measured_rates.derated("H100 SXM")
    assert h100.peaks["bf16"] == h100.peaks["fp16"] == 794.5e12   # MAMF
    assert h100.name == "H100 SXM (achievable)"


def test_cpu_cache_from_sysfs(monkeypatch, tmp_path):
    # sysconf without cache names (this VM's Python): Linux's sysfs, highest level wins.
    monkeypatch.setattr(detection.os, "sysconf", lambda key: (_ for _ in ()).throw(ValueError(key)))
    for i, (level, size) in enumerate([(1, "32K"), (2, "512K"), (3, "32768K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(f"{size}\n")
    monkeypatch.setattr(detection, "SYSFS_CACHE", str(tmp_path))
    assert detection.cpu().cache_bytes == 32 * 2**20   # level 3, 32768 KiB
    monkeypatch.setattr(detection, "SYSFS_CACHE", str(tmp_path / "none"))
    assert detection.cpu().cache_bytes is None   # the reference row has no cache figure


# Dense fp16 tensor-core FLOP per clock for the whole chip = tensor cores x FLOP a clock
# each (FMA = 2 FLOP), from the architecture whitepapers as quoted by each row's
# clock_source: Turing 64 FMA (T4: 320 cores); Ampere GA100 256 FMA (A100: 108 SMs x 4 =
# 432); Ada 128 FMA with fp32 accumulate on the data-centre parts (L4: 58 SMs x 4 = 232);
# Hopper 512 FMA (H100 SXM / H200: 132 SMs x 4 = 528).
TENSOR_FLOP_PER_CLOCK = {
    "T4": 320 * 128,                 # 40,960
    "L4": 232 * 256,                 # 59,392: x 2.04e9 = 121.16e12 against 121
    "A100 40GB": 432 * 512,          # 221,184: x 1.41e9 = 311.87e12 against 312
    "A100 80GB": 432 * 512,
    "A100 80GB PCIe": 432 * 512,
    "A100 40GB PCIe": 432 * 512,
    "H100 SXM": 528 * 1024,          # 540,672: x 1.83e9 = 989.43e12 against 989
    "H200": 528 * 1024,
}


def test_every_boost_clock_reproduces_its_rows_dense_fp16_peak():
    df = devices.catalogue()
    with_clock = sorted(df.loc[df["boost_clock_hz"].notna(), "name"])
    assert with_clock == sorted(TENSOR_FLOP_PER_CLOCK), "a row gained a clock: add it here"
    for name in with_clock:
        acc = hardware.get(name)
        assert acc.clock_source, name
        assert TENSOR_FLOP_PER_CLOCK[name] * acc.boost_clock_hz == pytest.approx(
            acc.peak_flops("fp16"), rel=0.01), name


def test_t4_clocks_are_in_the_table_and_give_its_datasheet_peak():
    t4 = hardware.get("T4")
    assert (t4.boost_clock_hz, t4.base_clock_hz) == (1590e6, 585e6)
    assert t4.clock_source.startswith("https://")
    # T4 datasheet: 320 Turing tensor cores; each does a 4x4x4 matrix FMA a clock (64 FMA
    # = 128 FLOP, Volta/Turing whitepapers): 320 x 128 x 1590e6 = 65.13e12, the 65 TFLOP/s.
    assert 320 * 128 * t4.boost_clock_hz == pytest.approx(t4.peak_flops("fp16"), rel=0.005)
    # No clock that reproduces the peak was found for the H100 PCIe (its 1755 MHz boost
    # gives 456 x 1024 x 1.755e9 = 819.5 TFLOP/s, not the 756 quoted): None on the row, NaN
    # in the frame; the H100 SXM quotes no base clock.
    assert hardware.get("H100 PCIe").boost_clock_hz is None
    df = devices.catalogue().set_index("name")
    assert df.loc["T4", "base_clock_hz"] == 585e6 and math.isnan(df.loc["H100 PCIe", "boost_clock_hz"])
    assert math.isnan(df.loc["H100 SXM", "base_clock_hz"])
    with pytest.raises(ValueError, match="base_clock_hz"):
        devices.Accelerator("x", 1e9, 1e9, base_clock_hz=2e9, boost_clock_hz=1e9)


def test_blackwell_and_amd_ridges_per_format_by_hand():
    # Dense peak / bandwidth. B200: 2,250 / 7.7 = 292.2, 4,500 / 7.7 = 584.4, 9,000 / 7.7 =
    # 1,168.8 FLOP/B. B300 (DGX B300 / 8): 2,250 / 8 = 281.25, 4,500 / 8 = 562.5, 13,500 / 8
    # = 1,687.5. GB300 (NVL72 / 72): 2,500 / 8 = 312.5, 5,000 / 8 = 625, 15,000 / 8 = 1,875.
    # MI355X: 256 CUs x 8,192 FP8 FLOP a clock x 2.4 GHz = 5,033.2 TFLOP/s, / 8 = 629.1.
    want = {"B200": (292.2, 584.4, 1168.8), "B300": (281.25, 562.5, 1687.5),
            "GB300": (312.5, 625.0, 1875.0), "MI355X": (314.6, 629.1, 1258.3)}
    for name, ridges in want.items():
        acc = hardware.get(name)
        for fmt, r in zip(("fp16", "fp8", "fp4"), ridges):
            assert acc.ridge_point(fmt) == pytest.approx(r, rel=1e-3), (name, fmt)
    assert hardware.get("MI355X").peak_flops("fp8") == pytest.approx(256 * 8192 * 2.4e9, rel=1e-4)
    # Blackwell Ultra cut int8: no peak is stored, so nothing can use a wrong one.
    assert "int8" not in hardware.get("B300").peaks and "int8" not in hardware.get("GB300").peaks

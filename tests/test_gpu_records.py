"""A GPU is one record (issue 32): its NVLink, PCIe generation, MIG profiles, measured
matmul and copy rates and example prices are fields of its catalogue entry
(`gpuinfer.hardware.devices`), and the tables other modules read (`links`, `mig`,
`measured`, `cost`) are derived from the entries. These tests iterate the catalogue, so
a new GPU's entry is checked without a line here; its own values go in
`test_the_derived_tables_keep_their_values` (CONTRIBUTING.md, "Adding a GPU")."""

import math

import pytest

from gpuinfer.predict import cost
from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.hardware import measured_rates
from gpuinfer.hardware import mig_slices
from gpuinfer.hardware import devices

NAMES = devices.names()
GPUS = [n for n in NAMES if hardware.get(n).kind == "gpu"]
CITED = ("http", "ASSUMED", "the ")  # a URL, or a stated assumption / another row's source


#: Measured rates above the stored datasheet peak, each with what is known. RTX 3090: a
#: square fp16 torch.mm measured 75.64 TFLOP/s (zzc) against the 71 stored, the
#: fp32-accumulate rate at the rated boost clock; not explained by a source here (a card
#: boosting above its rated clock would do it): left for the catalogue's owner.
ABOVE_DATASHEET = {("RTX 3090", "matmul_fp16_flops"): 75.64e12}


def _cites(text):
    return isinstance(text, str) and any(c in text for c in CITED) and text.strip() != ""


@pytest.mark.parametrize("name", GPUS)
def test_a_gpus_links_are_fields_of_its_entry(name):
    entry = hardware.get(name)
    if entry.nvlink is not None:
        link = device_links.get_interconnect(entry.nvlink)
        assert link.kind == "nvlink" and name in link.gpus
        assert device_links.interconnect_for(name) is link
    else:
        with pytest.raises(KeyError):
            device_links.interconnect_for(name)
    if entry.pcie_generation is not None:
        assert _cites(entry.pcie_source)
        link = device_links.host_link(name)
        assert link.name == f"PCIe Gen{entry.pcie_generation} x16"
        assert entry.pcie_source in link.note
    else:
        with pytest.raises(KeyError):
            device_links.host_link(name)


@pytest.mark.parametrize("name", GPUS)
def test_a_gpus_mig_profiles_are_fields_of_its_entry(name):
    entry = hardware.get(name)
    if entry.mig is None:
        with pytest.raises(ValueError, match="no MIG"):
            mig_slices.mig_profiles(name)
        return
    table = entry.mig
    assert "http" in table.source
    for p in table.profiles:
        # A GPU has 7 compute slices and 8 memory slices (NVIDIA's MIG user guide): a
        # profile "<g>g.<m>gb" takes g of the 7, and its instances fit in one GPU.
        assert p.profile.startswith(f"{p.compute_slices}g.")
        assert 1 <= p.compute_slices <= 7 and 1 <= p.memory_slices <= 8
        assert p.max_instances * p.compute_slices <= 7
        assert p.max_instances * p.memory_slices <= 8
        assert math.isnan(p.sm_count) or p.sm_count <= table.card_sms
        # -lgip's figure can pass torch's total by a little (H100 7g.80gb: 79.25 GiB,
        # torch 79.21), never the datasheet's size read in binary units (HBM is sized so).
        binary = entry.memory_marketing_bytes / 1e9 * 2**30
        assert math.isnan(p.memory_bytes) or p.memory_bytes <= binary
    profiles = mig_slices.mig_profiles(name)
    assert list(profiles.index) == [p.profile for p in table.profiles]


@pytest.mark.parametrize("name", GPUS)
def test_a_gpus_measured_rates_are_fields_of_its_entry_below_its_datasheet(name):
    entry = hardware.get(name)
    series = measured_rates.achievable(name)
    for key in devices.MEASURED_KEYS:
        if key not in entry.measured:
            assert math.isnan(series[key]) and series[f"{key}_source"] == ""
            continue
        value, source = entry.measured[key]
        assert series[key] == value and series[f"{key}_source"] == source
        assert "http" in source
        # What real code reaches is never above the datasheet's ceiling.
        ceiling = (entry.bandwidth if key == "bandwidth_bytes_per_s"
                   else entry.peak_flops(key.split("_")[1]))
        assert 0 < value <= max(ceiling, ABOVE_DATASHEET.get((name, key), 0.0))
    assert series["note"] == entry.measured_note


@pytest.mark.parametrize("name", GPUS)
def test_a_gpus_prices_are_fields_of_its_entry(name):
    entry = hardware.get(name)
    for price in entry.prices:
        # "8x NVIDIA H100 SXM": the instance's GPU count and the entry's name.
        count, _, rest = price.hardware.partition("x NVIDIA ")
        assert rest.split(",")[0].strip() == name and int(count) >= 1
        assert price in cost.EXAMPLE_PRICES and price.price_per_hour > 0
        assert "http" in price.source and price.currency == "USD"
    if entry.prices:
        first = entry.prices[0]
        count = int(first.hardware.partition("x NVIDIA ")[0])
        assert cost.price_per_gpu_hour(name) == first.price_per_hour / count


def test_cpu_entries_carry_no_gpu_fields():
    for name in NAMES:
        entry = hardware.get(name)
        if entry.kind == "cpu":
            assert (entry.nvlink, entry.pcie_generation, entry.mig, entry.measured,
                    entry.prices) == (None, None, None, {}, ())


def test_the_derived_tables_keep_their_values():
    # The tables as they stood before they moved into the entries (issue 32). By hand for
    # the H100 SXM: NVLink 4, 900 GB/s bidirectional = 450e9 B/s a direction; MIG 1g.10gb
    # is 16 of the card's 132 SMs = 0.1212 of its peaks, 1 of 8 memory slices, 9.75 GiB
    # = 9.75 x 2**30 = 10,468,982,784 B; measured bf16 794.5e12 (Bekman's MAMF), fp8
    # 1402.6e12, fp16 760.04e12 (torch.mm, zzc); priced by the p5.48xlarge, 39.33 USD/h
    # over 8 GPUs = 4.91625 USD a GPU-hour.
    h100 = hardware.get("H100 SXM")
    assert device_links.interconnect_for(h100).bandwidth_bytes_per_s == 450e9
    one_g = mig_slices.mig_profiles(h100).loc["1g.10gb"]
    assert one_g["compute_fraction"] == pytest.approx(16 / 132)
    assert one_g["memory_fraction"] == 1 / 8 and one_g["memory_bytes"] == 10_468_982_784
    assert {k: v for k, (v, _) in h100.measured.items()} == {
        "matmul_bf16_flops": 794.5e12, "matmul_fp8_flops": 1402.6e12,
        "matmul_fp16_flops": 760.04e12}
    assert cost.price_per_gpu_hour("H100 SXM") == pytest.approx(4.91625)

    nvlinks = {i.name: i.gpus for i in (device_links.get_interconnect(n)
                                        for n in device_links.interconnect_names())
               if i.kind == "nvlink"}
    assert nvlinks == {
        "NVLink 2": ("V100 SXM2", "V100 SXM2 32GB"), "NVLink 3": ("A100 40GB", "A100 80GB"),
        "NVLink 4": ("H100 SXM", "H200"), "NVLink 5": ("B200",),
        "NVLink bridge (H100 NVL pair)": ("H100 NVL",),
        "NVLink 4 (GH200 NVL32)": ("GH200", "GH200 144GB"), "NVLink 5 (GB200 NVL72)": ("GB200",)}
    pcie = {n: hardware.get(n).pcie_generation for n in GPUS
            if hardware.get(n).pcie_generation is not None}
    assert pcie == {"T4": 3, "V100 PCIe 16GB": 3, "V100 PCIe 32GB": 3, "P100 PCIe": 3,
                    "L4": 4, "L40": 4, "L40S": 4, "A40": 4, "A10": 4, "RTX A6000": 4,
                    "RTX 6000 Ada": 4, "A100 40GB PCIe": 4, "A100 80GB PCIe": 4,
                    "H100 PCIe": 5, "H200": 5, "B200": 5, "GB200": 5}
    mig = {n: len(hardware.get(n).mig.profiles) for n in GPUS if hardware.get(n).mig}
    assert mig == dict.fromkeys(["A100 40GB", "A100 80GB", "A100 80GB PCIe", "A100 40GB PCIe",
                                 "H100 SXM", "H100 PCIe", "H100 NVL", "H200", "H200 NVL"], 7)
    # The PCIe cards share their SXM sibling's profiles; the H100 PCIe's 114 SMs split
    # differently, so its SMs are unknown (compute slices / 7).
    assert hardware.get("A100 80GB PCIe").mig is hardware.get("A100 80GB").mig
    assert mig_slices.mig_profiles("H100 PCIe").loc["1g.10gb", "compute_fraction"] == 1 / 7
    table = measured_rates.achievable_table()
    short = {"matmul_fp16_flops": "fp16", "matmul_bf16_flops": "bf16",
             "matmul_fp8_flops": "fp8", "bandwidth_bytes_per_s": "copy"}
    measured = {n: {short[k]: row[k] for k in short if row[k] == row[k]}
                for n, row in table.iterrows()}
    assert measured == {
        "T4": {"fp16": 41.91e12}, "L4": {"fp16": 68.83e12, "bf16": 70.89e12},
        "L40S": {"fp16": 264.02e12, "bf16": 269.15e12}, "V100 SXM2": {"fp16": 94.84e12},
        "P100 PCIe": {"fp16": 8.39e12},
        "A100 40GB": {"fp16": 247.63e12, "bf16": 271.2e12},
        "A100 80GB": {"fp16": 258.74e12, "bf16": 271.2e12, "copy": 1700e9},
        "A100 80GB PCIe": {"bf16": 252.9e12},
        "H100 SXM": {"fp16": 760.04e12, "bf16": 794.5e12, "fp8": 1402.6e12},
        "H100 PCIe": {"fp16": 458.03e12, "bf16": 495.93e12},
        "H200": {"fp16": 759.40e12, "bf16": 794.5e12, "fp8": 1453.4e12},
        "GH200": {"copy": 3614.60e9}, "GH200 144GB": {"bf16": 828.6e12, "fp8": 1535.0e12},
        "B200": {"fp16": 1627.64e12, "bf16": 1745.0e12, "fp8": 3432.5e12},
        "MI300X": {"bf16": 668.4e12}, "RTX 4090": {"fp16": 165.08e12},
        "RTX 3090": {"fp16": 75.64e12}}
    assert list(table.index) == list(measured)  # in catalogue order, as before
    assert [(p.name, p.price_per_hour) for p in cost.EXAMPLE_PRICES] == [
        ("AWS c5.2xlarge", 0.34), ("AWS g4dn.xlarge", 0.526), ("AWS g5.xlarge", 1.006),
        ("AWS p5.48xlarge (Capacity Block)", 39.33),
        ("AWS p5e.48xlarge (Capacity Block)", 43.26)]


def _t4(**fields):
    return devices.Accelerator("T4 test", 16e9, 320e9, {"fp16": 65e12}, **fields)


def test_a_malformed_record_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="pcie_source"):
        _t4(pcie_generation=4)
    with pytest.raises(ValueError, match="pcie_generation"):
        _t4(pcie_generation=0, pcie_source="https://pcisig.com")
    with pytest.raises(KeyError, match="measured key"):
        _t4(measured={"matmul_int8_flops": (1e12, "https://x")})
    with pytest.raises(ValueError, match="measured"):
        _t4(measured={"matmul_fp16_flops": (-1.0, "https://x")})
    with pytest.raises(TypeError, match=r"\(value, source\)"):
        _t4(measured={"matmul_fp16_flops": 41.9e12})
    with pytest.raises(TypeError, match="mig must be a MigTable"):
        _t4(mig={"card_sms": 40})
    with pytest.raises(TypeError, match="prices must be a tuple of ExamplePrice"):
        _t4(prices=({"name": "AWS g4dn.xlarge"},))
    with pytest.raises(TypeError, match="MigProfile"):
        devices.MigTable(40, [("1g.5gb", 1, 1, 7)], "https://x")
    with pytest.raises(TypeError, match="nvlink"):
        _t4(nvlink=4)


def test_the_fields_stay_out_of_the_repr():
    # A MIG table or a price list in every printed Accelerator would drown its peaks.
    text = repr(hardware.get("H100 SXM"))
    assert "MigTable" not in text and "ExamplePrice" not in text and "nvlink" not in text

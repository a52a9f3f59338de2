"""The interconnect table: per-direction bandwidth from the datasheets and specifications,
NCCL's latency model, and the lookups."""

import pytest

from gpuinfer import hardware

# Datasheets quote NVLink per GPU as the bidirectional total (send + receive).
NVLINK_BIDIRECTIONAL = {"NVLink 2": 300e9, "NVLink 3": 600e9, "NVLink 4": 900e9,
                        "NVLink 5": 1800e9}


@pytest.mark.parametrize("name, bidirectional", NVLINK_BIDIRECTIONAL.items())
def test_nvlink_per_direction_is_half_the_datasheet_figure(name, bidirectional):
    ic = hardware.get_interconnect(name)
    assert ic.bandwidth_bytes_per_s == pytest.approx(bidirectional / 2)
    assert ic.bidirectional_bytes_per_s == pytest.approx(bidirectional)
    assert ic.kind == "nvlink" and ic.scope == "per GPU"


def test_nvlink4_is_eighteen_links_of_25_gb_per_s_each_way():
    assert hardware.get_interconnect("NVLink 4").bandwidth_bytes_per_s == pytest.approx(18 * 25e9)


def test_pcie_from_the_specification():
    # 16 lanes x 16 GT/s x 128/130 / 8 bits = 31.51 GB/s each way (Gen4); twice for Gen5.
    gen4 = hardware.get_interconnect("PCIe Gen4 x16")
    assert gen4.bandwidth_bytes_per_s == pytest.approx(31.5077e9, rel=1e-5)
    gen5 = hardware.get_interconnect("pcie5")
    assert gen5.bandwidth_bytes_per_s == pytest.approx(2 * gen4.bandwidth_bytes_per_s)
    # NVIDIA's datasheets round to 64 and 128 GB/s bidirectional.
    assert gen4.bidirectional_bytes_per_s == pytest.approx(64e9, rel=0.02)
    assert gen5.bidirectional_bytes_per_s == pytest.approx(128e9, rel=0.02)


@pytest.mark.parametrize("name, per_direction", [
    ("InfiniBand NDR x8", 8 * 400e9 / 8), ("InfiniBand HDR x8", 8 * 200e9 / 8),
    ("Ethernet 100GbE", 12.5e9), ("Ethernet 400GbE", 50e9)])
def test_networks_are_per_node_from_gigabits(name, per_direction):
    ic = hardware.get_interconnect(name)
    assert ic.bandwidth_bytes_per_s == pytest.approx(per_direction)
    assert ic.kind == "network" and ic.scope == "per node"


def test_latencies_are_ncclss_ring_ll_model():
    # NCCL src/graph/tuning.cc: baseLat Ring/LL 6.6 us; hwLat Ring/LL NVLink 0.6, PCI 1.0,
    # NET 2.7 us per step.
    assert hardware.get_interconnect("NVLink 4").step_latency_s == pytest.approx(0.6e-6)
    assert hardware.get_interconnect("PCIe Gen4 x16").step_latency_s == pytest.approx(1.0e-6)
    assert hardware.get_interconnect("ndr").step_latency_s == pytest.approx(2.7e-6)
    for name in hardware.interconnect_names():
        assert hardware.get_interconnect(name).base_latency_s == pytest.approx(6.6e-6)


@pytest.mark.parametrize("gpu, link", [("V100 SXM2", "NVLink 2"), ("A100 40GB", "NVLink 3"),
                                       ("A100 80GB", "NVLink 3"), ("H100 SXM", "NVLink 4"),
                                       ("NVIDIA H200", "NVLink 4"), ("B200", "NVLink 5")])
def test_nvlink_generation_per_gpu(gpu, link):
    assert hardware.interconnect_for(gpu).name == link


def test_gpus_without_nvlink_say_so():
    with pytest.raises(KeyError, match="PCIe"):
        hardware.interconnect_for("T4")


def test_unknown_interconnect_names_the_closest():
    with pytest.raises(KeyError, match="NVLink"):
        hardware.get_interconnect("NVLink 9")
    with pytest.raises(KeyError):
        hardware.get_interconnect("")
    ic = hardware.get_interconnect("NVLink 3")
    assert hardware.get_interconnect(ic) is ic


def test_every_row_is_cited_and_the_frame_states_both_directions():
    df = hardware.interconnects()
    assert len(df) == len(hardware.interconnect_names())
    assert {"bandwidth_bytes_per_s_per_direction", "bandwidth_bytes_per_s_bidirectional",
            "scope", "source"} <= set(df.columns)
    assert (df.bandwidth_bytes_per_s_bidirectional
            == 2 * df.bandwidth_bytes_per_s_per_direction).all()
    for name in hardware.interconnect_names():
        ic = hardware.get_interconnect(name)
        assert ic.source.startswith("https://") and ic.latency_source.startswith("https://")


def test_the_accelerator_catalogue_is_unchanged_by_the_table():
    assert "NVLink 4" not in hardware.names()
    assert hardware.get("H100 SXM").bandwidth == pytest.approx(3350e9)

"""The interconnect table: per-direction bandwidth from the datasheets and specifications,
NCCL's latency model, and the lookups."""

import math

import pytest

from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.hardware import devices

# Datasheets quote NVLink per GPU as the bidirectional total (send + receive).
NVLINK_BIDIRECTIONAL = {"NVLink 2": 300e9, "NVLink 3": 600e9, "NVLink 4": 900e9,
                        "NVLink 5": 1800e9}


@pytest.mark.parametrize("name, bidirectional", NVLINK_BIDIRECTIONAL.items())
def test_nvlink_per_direction_is_half_the_datasheet_figure(name, bidirectional):
    ic = device_links.get_interconnect(name)
    assert ic.bandwidth_bytes_per_s == pytest.approx(bidirectional / 2)
    assert ic.bidirectional_bytes_per_s == pytest.approx(bidirectional)
    assert ic.kind == "nvlink" and ic.scope == "per GPU"


def test_nvlink4_is_eighteen_links_of_25_gb_per_s_each_way():
    assert device_links.get_interconnect("NVLink 4").bandwidth_bytes_per_s == pytest.approx(18 * 25e9)


def test_pcie_from_the_specification():
    # 16 lanes x 16 GT/s x 128/130 / 8 bits = 31.51 GB/s each way (Gen4); twice for Gen5.
    gen4 = device_links.get_interconnect("PCIe Gen4 x16")
    assert gen4.bandwidth_bytes_per_s == pytest.approx(31.5077e9, rel=1e-5)
    gen5 = device_links.get_interconnect("pcie5")
    assert gen5.bandwidth_bytes_per_s == pytest.approx(2 * gen4.bandwidth_bytes_per_s)
    # NVIDIA's datasheets round to 64 and 128 GB/s bidirectional.
    assert gen4.bidirectional_bytes_per_s == pytest.approx(64e9, rel=0.02)
    assert gen5.bidirectional_bytes_per_s == pytest.approx(128e9, rel=0.02)


@pytest.mark.parametrize("name, per_direction", [
    ("InfiniBand NDR x8", 8 * 400e9 / 8), ("InfiniBand HDR x8", 8 * 200e9 / 8),
    ("Ethernet 100GbE", 12.5e9), ("Ethernet 400GbE", 50e9)])
def test_networks_are_per_node_from_gigabits(name, per_direction):
    ic = device_links.get_interconnect(name)
    assert ic.bandwidth_bytes_per_s == pytest.approx(per_direction)
    assert ic.kind == "network" and ic.scope == "per node"


def test_latencies_are_ncclss_ring_ll_model():
    # NCCL src/graph/tuning.cc: baseLat Ring/LL 6.6 us; hwLat Ring/LL NVLink 0.6, PCI 1.0,
    # NET 2.7 us per step.
    assert device_links.get_interconnect("NVLink 4").step_latency_s == pytest.approx(0.6e-6)
    assert device_links.get_interconnect("PCIe Gen4 x16").step_latency_s == pytest.approx(1.0e-6)
    assert device_links.get_interconnect("ndr").step_latency_s == pytest.approx(2.7e-6)
    for name in device_links.interconnect_names():
        assert device_links.get_interconnect(name).base_latency_s == pytest.approx(6.6e-6)


@pytest.mark.parametrize("gpu, link", [("V100 SXM2", "NVLink 2"), ("A100 40GB", "NVLink 3"),
                                       ("A100 80GB", "NVLink 3"), ("H100 SXM", "NVLink 4"),
                                       ("NVIDIA H200", "NVLink 4"), ("B200", "NVLink 5")])
def test_nvlink_generation_per_gpu(gpu, link):
    assert device_links.interconnect_for(gpu).name == link


def test_gpus_without_nvlink_say_so():
    with pytest.raises(KeyError, match="PCIe"):
        device_links.interconnect_for("T4")


def test_unknown_interconnect_names_the_closest():
    with pytest.raises(KeyError, match="NVLink"):
        device_links.get_interconnect("NVLink 9")
    with pytest.raises(KeyError):
        device_links.get_interconnect("")
    ic = device_links.get_interconnect("NVLink 3")
    assert device_links.get_interconnect(ic) is ic


def test_every_row_is_cited_and_the_frame_states_both_directions():
    df = device_links.interconnects()
    assert len(df) == len(device_links.interconnect_names())
    assert {"bandwidth_bytes_per_s_per_direction", "bandwidth_bytes_per_s_bidirectional",
            "scope", "source"} <= set(df.columns)
    assert (df.bandwidth_bytes_per_s_bidirectional
            == 2 * df.bandwidth_bytes_per_s_per_direction).all()
    for name in device_links.interconnect_names():
        ic = device_links.get_interconnect(name)
        assert ic.source.startswith("https://") and ic.latency_source.startswith("https://")


def test_the_accelerator_catalogue_is_unchanged_by_the_table():
    assert "NVLink 4" not in devices.names()
    assert hardware.get("H100 SXM").bandwidth == pytest.approx(3350e9)


def test_pcie_gen3_for_a_t4s_host_copies():
    # 16 lanes x 8 GT/s x 128/130 / 8 bits = 15.75 GB/s each way; "32 GB/s" bidirectional.
    gen3 = device_links.get_interconnect("PCIe Gen3 x16")
    assert gen3.bandwidth_bytes_per_s == pytest.approx(16 * 8e9 * 128 / 130 / 8)
    assert gen3.bidirectional_bytes_per_s == pytest.approx(32e9, rel=0.02)
    assert device_links.host_link("Tesla T4").name == "PCIe Gen3 x16"
    assert device_links.host_link("H100 PCIe").name == "PCIe Gen5 x16"
    with pytest.raises(KeyError, match="PCIe"):
        device_links.host_link("MI300X")


@pytest.mark.parametrize("name, domain", [
    ("NVLink 3", 8), ("NVLink 4", 8), ("NVLink 5", 8),  # HGX/DGX boards
    ("NVLink 4 (GH200 NVL32)", 32), ("NVLink 5 (GB200 NVL72)", 72),
    ("NVLink bridge (H100 NVL pair)", 2), ("InfiniBand NDR x8", math.inf),
    ("Ethernet 100GbE", math.inf)])
def test_domain_sizes(name, domain):
    ic = device_links.get_interconnect(name)
    assert ic.domain_gpus == domain
    assert ic.domain_source


@pytest.mark.parametrize("gpu, link", [("GB200", "NVLink 5 (GB200 NVL72)"),
                                       ("GH200", "NVLink 4 (GH200 NVL32)"),
                                       ("NVIDIA H100 NVL", "NVLink bridge (H100 NVL pair)")])
def test_nvlink_switch_systems_and_bridges(gpu, link):
    assert device_links.interconnect_for(gpu).name == link


# NCCL src/graph/tuning.cc: baseLatencies and hwLatencies (us), per algorithm and protocol.
RING = {"LL": (6.6, 0.6, 1.0, 2.7, 0.5), "LL128": (14.0, 1.9, 2.5, 4.0, 0.92),
        "Simple": (8.4, 3.4, 5.7, 14.0, 1.0)}
TREE = {"LL": (6.8, 0.6, 1.0, 5.0, 0.92 / 3.8), "LL128": (14.0, 1.25, 1.9, 8.5, 0.92 * 7 / 9),
        "Simple": (8.4, 4.0, 4.0, 14.0, 0.92)}


@pytest.mark.parametrize("algorithm, protocol, row",
                         [("ring", p, r) for p, r in RING.items()]
                         + [("tree", p, r) for p, r in TREE.items()])
def test_nccl_protocol_table(algorithm, protocol, row):
    base, nvlink, pcie, net, fraction = row
    got = device_links.nccl_protocols().loc[(algorithm, protocol)]
    assert got["base_latency_s"] == pytest.approx(base * 1e-6)
    assert got["step_latency_s_nvlink"] == pytest.approx(nvlink * 1e-6)
    assert got["step_latency_s_pcie"] == pytest.approx(pcie * 1e-6)
    assert got["step_latency_s_network"] == pytest.approx(net * 1e-6)
    assert got["bandwidth_fraction"] == pytest.approx(fraction)
    assert device_links.NCCL_PROTOCOLS[(algorithm, protocol)]["bandwidth_fraction"] == \
        pytest.approx(fraction)


def test_a_links_protocols_and_their_bandwidth():
    nvlink4 = device_links.get_interconnect("NVLink 4")
    simple = nvlink4.nccl("Simple")
    assert (simple.base_latency_s, simple.step_latency_s) == pytest.approx((8.4e-6, 3.4e-6))
    # NCCL prices a link from its topology, not the datasheet: an H100's 18 NVLinks at
    # SM90_NVLINK_BW = 20.6 GB/s (topo.h) = 370.8 GB/s a direction, below the 450 quoted.
    assert nvlink4.bandwidth_bytes_per_s == pytest.approx(450e9)          # the datasheet
    assert nvlink4.nccl_bus_bandwidth_bytes_per_s == pytest.approx(370.8e9)
    assert simple.bandwidth_bytes_per_s == pytest.approx(370.8e9)         # Simple: all of it
    assert nvlink4.nccl("LL").bandwidth_bytes_per_s == pytest.approx(185.4e9)  # 0.5 x 370.8
    # LL128: 0.92 x 370.8 = 341.136 GB/s.
    assert nvlink4.nccl("ll128").bandwidth_bytes_per_s == pytest.approx(341.136e9)
    assert nvlink4.nccl("LL", "tree").step_latency_s == pytest.approx(0.6e-6)
    assert set(nvlink4.protocols) == {"LL", "LL128", "Simple"}
    # LL128 is not on by default over PCIe (NCCL enables it only over NVLink).
    assert set(device_links.get_interconnect("PCIe Gen4 x16").protocols) == {"LL", "Simple"}
    assert device_links.get_interconnect("ndr").nccl("Simple").step_latency_s == pytest.approx(14e-6)
    # The attributes the all-reduce model reads stay the Ring/LL ones.
    assert (nvlink4.base_latency_s, nvlink4.step_latency_s) == \
        pytest.approx((nvlink4.nccl("LL").base_latency_s, nvlink4.nccl("LL").step_latency_s))
    with pytest.raises(KeyError, match="protocol"):
        nvlink4.nccl("LL64")
    with pytest.raises(KeyError, match="algorithm"):
        nvlink4.nccl("LL", "butterfly")


@pytest.mark.parametrize("name, links, per_link_gb", [
    ("NVLink 2", 6, 20.0), ("NVLink 3", 12, 20.0), ("NVLink 4", 18, 20.6),
    ("NVLink 5", 18, 40.1), ("NVLink 4 (GH200 NVL32)", 18, 20.6),
    ("NVLink 5 (GB200 NVL72)", 18, 40.1), ("NVLink bridge (H100 NVL pair)", 12, 20.6)])
def test_nccl_topology_bandwidth_is_links_times_ncclss_per_link_figure(name, links, per_link_gb):
    # topo.h: SM70/SM80_NVLINK_BW 20.0, SM90 20.6, SM100 40.1 GB/s a link; e.g. an A100's
    # 12 links: 240 GB/s against the datasheet's 300; a B200's 18: 721.8 against 900.
    link = device_links.get_interconnect(name)
    assert link.nccl_bus_bandwidth_bytes_per_s == pytest.approx(links * per_link_gb * 1e9)
    assert link.nccl_bus_bandwidth_bytes_per_s < link.bandwidth_bytes_per_s
    assert link.nccl("Simple").bandwidth_bytes_per_s == pytest.approx(links * per_link_gb * 1e9)


def test_links_without_a_topology_figure_keep_their_own():
    for name in ("PCIe Gen4 x16", "InfiniBand NDR x8", "Ethernet 100GbE"):
        link = device_links.get_interconnect(name)
        assert link.nccl_bus_bandwidth_bytes_per_s == link.bandwidth_bytes_per_s
    assert device_links.get_interconnect("ndr").nccl("Simple").bandwidth_bytes_per_s == 400e9


def test_nvls_tree_constants():
    t = device_links.NCCL_NVLS_TREE
    assert (t["latency_intra_s"], t["latency_net_s"]) == pytest.approx((25e-6, 20.9e-6))
    assert t["per_channel_max_bus_bytes_per_s"]["hopper"] == {2: 57.7e9, "more": 45.5e9}


def test_nvls_and_the_ll_bandwidth_cap():
    assert device_links.NCCL_NVLS["latency_s"] == pytest.approx(25e-6)
    assert device_links.NCCL_NVLS["efficiency"] == {"hopper": 0.85, "blackwell": 0.74}
    assert device_links.NCCL_LL_MAX_BUS_BANDWIDTH["hopper"] == pytest.approx(141e9)
    assert "one-shot" in device_links.ONE_SHOT_ALLREDUCE_NOTE.lower()


GOOD = dict(name="L", kind="nvlink", scope="per GPU", bandwidth_bytes_per_s=1e11,
            step_latency_s=1e-6, base_latency_s=5e-6, source="https://example.org")


@pytest.mark.parametrize("change, error, words", [
    (dict(bandwidth_bytes_per_s=-1e9), ValueError, "bandwidth_bytes_per_s"),
    (dict(bandwidth_bytes_per_s=math.nan), ValueError, "bandwidth_bytes_per_s"),
    (dict(bandwidth_bytes_per_s=math.inf), ValueError, "bandwidth_bytes_per_s"),
    (dict(bandwidth_bytes_per_s="fast"), TypeError, "bandwidth_bytes_per_s"),
    (dict(step_latency_s=-1e-6), ValueError, "step_latency_s"),
    (dict(base_latency_s=math.nan), ValueError, "base_latency_s"),
    (dict(kind="wifi"), KeyError, "kind"),
    (dict(scope="per rack"), KeyError, "scope"),
    (dict(domain_gpus=0), ValueError, "domain_gpus"),
    (dict(domain_gpus=2.5), ValueError, "domain_gpus"),
    (dict(domain_gpus="8"), TypeError, "domain_gpus must be"),
    (dict(gpus="H100 SXM"), TypeError, "gpus"),
    (dict(name=""), ValueError, "name"),
    (dict(nccl_bandwidth_bytes_per_s=-1e9), ValueError, "nccl_bandwidth_bytes_per_s"),
    (dict(nccl_bandwidth_bytes_per_s=math.nan), ValueError, "nccl_bandwidth_bytes_per_s"),
    (dict(nccl_bandwidth_bytes_per_s="fast"), TypeError, "nccl_bandwidth_bytes_per_s"),
])
def test_interconnect_refuses_bad_values(change, error, words):
    with pytest.raises(error, match=words):
        device_links.Interconnect(**{**GOOD, **change})


@pytest.mark.parametrize("bad", [None, 4, ["NVLink 4"]])
def test_interconnect_lookups_refuse_what_is_not_a_name(bad):
    with pytest.raises(TypeError, match="interconnect"):
        device_links.get_interconnect(bad)
    with pytest.raises(TypeError, match="accelerator"):
        device_links.interconnect_for(bad)


def test_nccl_protocols_has_its_docstring():
    # It was built by concatenation (an expression, not a docstring): __doc__ was None.
    doc = device_links.nccl_protocols.__doc__
    assert doc is not None and "https://github.com/NVIDIA/nccl/issues/786" in doc




def test_nccl_tree_correction_is_tunings_table():
    # tuning.cc: bw *= treeCorrectionFactor[protocol][log2i(nBytes >> 6)] for indices 0..22.
    # 16384 B >> 6 = 256 = 2^8: LL's ninth entry, 0.7.
    assert device_links.nccl_tree_correction(16384, "LL") == 0.7
    # 2 MB >> 6 = 32768 = 2^15: LL128's sixteenth entry, 0.6; 3 MB >> 6 = 49152, log2 = 15.58,
    # rounded down to 15: the same.
    assert device_links.nccl_tree_correction(2 ** 21, "LL128") == 0.6
    assert device_links.nccl_tree_correction(3 * 2 ** 20, "LL128") == 0.6
    # Under 64 B, nBytes >> 6 = 0 and log2i(0) = -1: no correction. 64 B: index 0, Simple 0.9.
    assert device_links.nccl_tree_correction(63, "Simple") == 1.0
    assert device_links.nccl_tree_correction(64, "Simple") == 0.9
    # 256 MB >> 6 = 2^22: index 22, the last used (Simple 0.9); 512 MB: index 23, none.
    assert device_links.nccl_tree_correction(2 ** 28, "Simple") == 0.9
    assert device_links.nccl_tree_correction(2 ** 29, "Simple") == 1.0
    assert all(len(row) == 24 for row in device_links.NCCL_TREE_CORRECTION.values())
    with pytest.raises(ValueError, match="protocol"):
        device_links.nccl_tree_correction(1024, "LL64")
    with pytest.raises(ValueError, match="n_bytes"):
        device_links.nccl_tree_correction(-1, "LL")

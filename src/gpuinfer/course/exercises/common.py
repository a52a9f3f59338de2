"""Helpers and constants that the exercises of several pages share (one home each;
each page's own exercises are in the module named after that page)."""


from gpuinfer.predict import cost
from gpuinfer.measure import reference
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import collectives


def published(experiment, what_starts, entry="A100 80GB"):
    for p in reference.PUBLISHED:
        if (p["experiment"] == experiment and p["catalogue_entry"] == entry
                and p["what"].startswith(what_starts)):
            return p["value"]
    raise KeyError(f"no published {experiment} figure starting {what_starts!r} for {entry}")


def price(name):
    return cost.example_price(name).price_per_hour


#: USD/h of one GPU: AWS g4dn.xlarge (1 T4), g5.xlarge (1 A10G), and an eighth of a
#: p5.48xlarge Capacity Block (8 H100 SXM) (cost.EXAMPLE_PRICES).
GPU_PRICES = {"T4": price("AWS g4dn.xlarge"), "A10G": price("AWS g5.xlarge"),
              "H100 SXM": price("AWS p5.48xlarge (Capacity Block)") / 8}

MX, QW = architectures.get("mixtral-8x7b"), architectures.get("qwen3-30b-a3b")


def costs(link):
    """'LL: 6.6 us, 0.6 us a step, 0.5 of the bandwidth; ...' from the catalogue's NCCL
    model of `link`, for the hints (one source for the numbers)."""
    ic = device_links.get_interconnect(link)
    return "; ".join(f"{p}: {c.base_latency_s * 1e6:.1f} us + {c.step_latency_s * 1e6:.1f} us "
                     f"a step, {c.bandwidth_fraction:g} of the bandwidth"
                     for p, c in ic.protocols.items())


def ll_slip(n_bytes, n_devices, link, fraction=1.0):
    """A single-protocol slip: LL's latency with `fraction` of NCCL's bandwidth for the
    link (1: all of it; 0.5: LL's half without NCCL's llMaxBw cap), over NCCL's fastest
    protocol. Cheap (no table), so it can run when the module loads."""
    ic = device_links.get_interconnect(link)
    ll = ic.nccl("LL")
    steps, share = 2 * (n_devices - 1), 2 * (n_devices - 1) / n_devices
    slip = ll.base_latency_s + steps * ll.step_latency_s \
        + share * n_bytes / (fraction * ic.nccl_bus_bandwidth_bytes_per_s)
    return slip / collectives.interconnect_allreduce_s(n_bytes, n_devices, link)

"""Cold read of chapters 5 and 9: conditions the pages state, held against the catalogue."""
from gpuinfer import dtypes, hardware


def test_chapter05_fusion_gpu_intermediate_exceeds_every_catalogued_l2():
    # Chapter 5's GPU run: 2**26 fp16 elements = 134,217,728 B = 128 MiB an intermediate.
    # Time follows bytes there only because no L2 holds one: the largest in the catalogue
    # is the B200's 132,644,864 B (126.5 MiB). A GPU added with a larger L2 breaks the claim.
    intermediate = 2**26 * dtypes.bytes_per_element("fp16")
    assert intermediate == 134_217_728
    l2 = {a.name: a.cache_bytes for a in map(hardware.get, hardware.names())
          if a.kind == "gpu" and a.cache_bytes}
    assert max(l2, key=l2.get) == "B200" and l2["B200"] == 132_644_864
    assert all(b < intermediate for b in l2.values())


def test_chapter09_h100_memory_is_79_2_gib_as_cuda_reports_it():
    # 85,045,477,376 B / 2**30 = 79.2 GiB; the 80 GiB of HBM would be 85,899,345,920 B.
    b = hardware.get("H100 SXM").memory_bytes
    assert b == 85_045_477_376
    assert round(b / 2**30, 1) == 79.2 and b < 80 * 2**30

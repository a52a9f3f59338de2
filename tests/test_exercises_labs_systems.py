"""The exercises of the Triton and compile-fuse-calibrate labs: answers worked by hand,
and the slips they name."""

import math

import pytest

from gpuinfer.course import exercises


def test_saturation_with_a_handoff_by_hand():
    # A full batch of 32 every 3.1 ms + 20 ms.
    assert exercises.get("lab-triton-saturation-with-handoff").answer() == pytest.approx(
        32 / (0.0031 + 0.020))


def test_servers_needed_by_hand():
    # 0.8 x 1,385.3 = 1,108.2 requests/s a server; 3,500 / 1,108.2 = 3.16 -> 4.
    per_server = 0.8 * 32 / (0.0031 + 0.020)
    assert math.ceil(3500 / per_server) == 4
    assert exercises.get("lab-triton-servers-needed").answer() == 4
    # The slips' counts: no headroom -> ceil(3,500 / 1,385.3) = 3; the model alone ->
    # ceil(3,500 / (0.8 x 10,323)) = 1.
    assert math.ceil(3500 / (32 / 0.0231)) == 3
    assert math.ceil(3500 / (0.8 * 32 / 0.0031)) == 1


def test_requests_in_flight_by_hand():
    assert exercises.get("lab-triton-requests-in-flight").answer() == pytest.approx(943 * 0.093)


def test_int8_bytes_fraction_by_hand():
    weights = 64 * 1024 + 1024 * 1024 * 2 + 1024 * 1       # 2,163,712
    channels = 1024 * 3 + 1                                 # 3,073 biases, 3,073 scales
    fp32 = (weights + channels) * 4                         # 8,667,140 B
    int8 = weights + channels * 4 + channels * 4            # 2,188,296 B
    assert exercises.get("lab-compile-int8-bytes-fraction").answer() == pytest.approx(int8 / fp32)


def test_int4_db_and_a100_ratio_by_hand():
    # 6.02 dB a bit (20 log10 2 = 6.0206), four bits from int8 to int4.
    assert exercises.get("lab-compile-int4-db").answer() == pytest.approx(4 * 6.0206, abs=1e-3)
    # A100 datasheet: 624 dense int8 TOPS, 19.5 fp32 TFLOP/s (CUDA cores), 156 TF32.
    assert exercises.get("lab-compile-a100-int8-over-fp32").answer() == pytest.approx(624 / 19.5)


@pytest.mark.parametrize("name, given, words", [
    ("lab-triton-saturation-with-handoff", 32 / 0.0031, "model alone"),
    ("lab-triton-saturation-with-handoff", 32 / (0.0031 + 32 * 0.020), "once per request"),
    ("lab-triton-servers-needed", 3, "headroom"),
    ("lab-triton-servers-needed", 1, "model's own throughput"),
    ("lab-triton-requests-in-flight", 1500 * 0.093, "offered rate"),
    ("lab-compile-int8-bytes-fraction", 0.25, "weights alone"),
    ("lab-compile-int4-db", 6.02, "one bit"),
    ("lab-compile-a100-int8-over-fp32", 624 / 156, "TF32"),
    ("lab-compile-a100-int8-over-fp32", 2 * 624 / 19.5, "sparse"),
])
def test_slips_get_their_hint(name, given, words):
    result = exercises.check(name, given)
    assert not result and words in repr(result)


def test_exact_counts_accept_only_the_count():
    assert exercises.check("lab-triton-servers-needed", 4)
    assert not exercises.check("lab-triton-servers-needed", 4.05)

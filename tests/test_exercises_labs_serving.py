"""The labs' decision exercises: the answers worked by hand, and the slips they name."""

import math

import pytest

from gpuinfer.predict import batching
from gpuinfer.course import exercises


def test_cpu_gpu_fleet_by_hand():
    # CPU: ceil(10,000 / 12,000) = 1 machine, USD 0.34/h for 10,000 x 3600 predictions.
    cpu = 0.34 / (10_000 * 3600) * 1e6          # 0.009444 USD per million
    # GPU: 1 machine, USD 0.526/h for the same predictions.
    gpu = 0.526 / (10_000 * 3600) * 1e6         # 0.014611
    assert cpu < gpu
    assert exercises.get("lab-cpu-gpu-cheapest-fleet").answer() == pytest.approx(cpu)


@pytest.mark.parametrize("given, words", [
    (0.526 / (10_000 * 3600) * 1e6, "GPU machine: it is 2.5% busy"),
    (0.526 / (400_000 * 3600) * 1e6, "GPU machine fully busy"),
    (0.34 / (12_000 * 3600) * 1e6, "CPU machine fully busy"),
])
def test_cpu_gpu_fleet_slips(given, words):
    result = exercises.check("lab-cpu-gpu-cheapest-fleet", given)
    assert not result and words in repr(result)


def test_batching_fleet_by_hand():
    table = {1: 0.004, 2: 0.0041, 4: 0.0043, 8: 0.0048, 16: 0.0058, 32: 0.0080}
    service = batching.service_table(list(table), list(table.values()))
    caps = {mb: batching.capacity(service, mb, slo_s=0.012) for mb in (1, 8, 32)}
    # Each capacity is below its saturation (b / S(b)) and batching raises it.
    assert caps[1] < 1 / 0.004 and caps[8] < 8 / 0.0048 and caps[32] < 32 / 0.008
    assert caps[1] < caps[8] < caps[32]
    gpus = {mb: math.ceil(5000 / c) for mb, c in caps.items()}
    assert gpus[32] == 3 and gpus[8] == 4 and gpus[1] == 62  # the slips' factors assume so
    assert exercises.get("lab-batching-cheapest-fleet").answer() == pytest.approx(3 * 1.006)


@pytest.mark.parametrize("gpus, words", [(4, "max_batch 8"), (2, "saturation"),
                                         (62, "max_batch 1")])
def test_batching_fleet_slips(gpus, words):
    result = exercises.check("lab-batching-cheapest-fleet", gpus * 1.006)
    assert not result and words in repr(result)

"""Lab 11's GPU paths on a CPU: the fp16 model planned on torch's meta device (every
tensor's shape and dtype, no memory), the decode step that a CUDA graph captures (no read
back to the host inside it; the replay's static cache spanning max_len gives the eager
step's logits), and the timing of a graphed step with `torch.cuda` mocked. No GPU is
needed or used."""

import pytest

torch = pytest.importorskip("torch")

from gpuinfer.measure import torch_device as dev  # noqa: E402
from gpuinfer.measure import real_model as rm  # noqa: E402

from tests.test_real_model import tiny_source  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return tiny_source()


def test_the_fp16_model_on_the_meta_device_has_the_gpu_shapes(tiny):
    m = rm.TorchLlama(tiny, "meta", max_batch=4, max_len=32)
    assert m.dtype == "fp16" and m.embedding.dtype == torch.float16   # a GPU's default
    assert m.embedding.device.type == "meta"
    # fp16: two bytes a weight, the tied head once: linear 30,720 + head 61 x 64 = 3,904
    assert m.weight_bytes == 2 * (2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 96 * 64) + 61 * 64)
    logits = m.forward([[1, 2, 3], [4, 5, 6]], [0, 0])
    assert logits.shape == (2, 3, 61) and logits.dtype == torch.float32
    k, v = m.cache()[0]
    assert k.shape == (4, 2, 32, 16) and k.dtype == torch.float16 and k.device.type == "meta"
    bf16 = rm.TorchLlama(tiny, "meta", "bf16", max_len=8)
    assert bf16.head.dtype == torch.bfloat16


@pytest.mark.parametrize("kernel", ["dense", "int8-dequant", "int4-unpack"])
def test_the_decode_step_never_reads_back_to_the_host(monkeypatch, tiny, kernel):
    # A CUDA graph captures decode_fn's step: .item(), .cpu(), .numpy() or .tolist() inside
    # it is illegal during capture. Make each raise while the step runs.
    m = rm.TorchLlama(tiny, "cpu", max_batch=2, max_len=32)
    if kernel != "dense":
        m = m.quantised(kernel)
    m.prefill([[1, 2, 3], [4, 5]])
    steps = [m.decode_fn(2), m.decode_fn(2, cuda_graph=True)]   # on a CPU: not captured

    def host_read(self, *args, **kwargs):
        raise AssertionError("the decode step read a tensor back to the host")

    for name in ("item", "cpu", "numpy", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    eager, static = (step() for step in steps)
    monkeypatch.undo()
    assert eager.shape == static.shape == (2, 1, 61)
    # the static cache spans max_len: the masked positions change nothing
    assert float((eager - static).abs().max()) < 1e-4


def test_a_gpu_decode_step_is_captured_once_and_replayed(monkeypatch, tiny):
    m = rm.TorchLlama(tiny, "cpu", max_len=32)
    m.prefill([[1, 2, 3]])
    m.device = torch.device("cuda")           # as on a GPU; its tensors stay on the CPU
    captured, synced = [], []

    def graphed(fn, device):
        captured.append((fn, device))
        return fn                             # the "replay" runs the captured step

    monkeypatch.setattr(dev, "graphed", graphed)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    timing = rm.time_decode(m, 1, cuda_graph=True, min_run_s=0.001, warmup=1)
    assert len(captured) == 1 and captured[0][1] == torch.device("cuda")
    assert timing.median_s > 0 and timing.blocks >= 5
    assert synced and all(d == torch.device("cuda") for d in synced)   # the clock waited
    eager = rm.time_decode(m, 1, min_run_s=0.001, warmup=1)
    assert len(captured) == 1 and eager.median_s > 0                  # eager: no capture
    assert rm.time_prefill(m, [1, 2, 3], min_run_s=0.001, warmup=1).median_s > 0
    before = [c.clone() for c in m.cache()[0]]
    assert rm.time_verify(m, 4, min_run_s=0.001, warmup=1).median_s > 0
    # the verify step writes beyond row 0's length only: the cached prompt is untouched
    assert all(torch.equal(a[0, :, :3], b[0, :, :3]) for a, b in zip(before, m.cache()[0]))

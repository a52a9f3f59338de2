"""gpuinfer.predict.tabular: parameter, FLOP and byte counts worked by hand; the model agrees."""

import numpy as np
import pytest
import torch

from gpuinfer import hardware
from gpuinfer.predict import roofline, tabular
from gpuinfer.measure import tabular_model
from gpuinfer.hardware import device_links


def test_params_by_hand_and_against_torch():
    # 64 -> 1024 -> 1024 -> 1024 -> 1: (64*1024 + 1024) + 2*(1024*1024 + 1024) + (1024 + 1)
    assert tabular.mlp_params() == 66_560 + 2 * 1_049_600 + 1_025 == 2_166_785
    model = tabular_model.mlp()
    assert sum(p.numel() for p in model.parameters()) == tabular.mlp_params()
    assert tabular.mlp_params() < 10_000_000  # a "small model"
    assert tabular.mlp_params(10, (5,), 2) == 10 * 5 + 5 + 5 * 2 + 2


def test_flops_and_bytes_by_hand():
    # 2 FLOPs per weight per row: 2 * (10*5 + 5*2) = 120 per row.
    assert tabular.mlp_flops(1, 10, (5,), 2) == 120
    assert tabular.mlp_flops(8, 10, (5,), 2) == 960
    # fp32: 4 bytes x (67 parameters: 10*5 + 5 + 5*2 + 2) plus, per row, each Linear's
    # input and output, (10 + 5) + (5 + 2) = 22, and the ReLU's read and write, 5 + 5.
    assert tabular.mlp_bytes(1, 10, (5,), 2, "fp32") == 4 * (67 + 22 + 10)
    assert tabular.mlp_bytes(3, 10, (5,), 2, "fp16") == 2 * (67 + 3 * (22 + 10))
    # Fused ReLU: no extra traffic.
    assert tabular.mlp_bytes(1, 10, (5,), 2, "fp32", fused=True) == 4 * (67 + 22)


def test_kernel_count_matches_the_modules():
    model = tabular_model.mlp(hidden=(32, 32))
    assert tabular.mlp_kernels((32, 32)) == len(model) == 5


def test_model_runs_on_the_synthetic_batch():
    x = tabular_model.synthetic_batch(16, seed=1)
    assert x.shape == (16, tabular.DEFAULT_FEATURES) and x.dtype == torch.float32
    # The last 8 x 4 columns are one-hot: one 1 per categorical column.
    onehot = x[:, -32:].reshape(16, 8, 4)
    assert torch.equal(onehot.sum(-1), torch.ones(16, 8))
    assert torch.equal(x, tabular_model.synthetic_batch(16, seed=1))  # seeded
    with torch.no_grad():
        y = tabular_model.mlp()(x)
    assert y.shape == (16, 1)
    # Same seed, same weights.
    a, b = tabular_model.mlp(seed=3), tabular_model.mlp(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_ops_by_hand():
    # 10 features -> 5 -> 2, batch 3, fp32: linear0 reads 10 x 5 + 5 parameters and
    # [3, 10], writes [3, 5]; relu0 reads and writes [3, 5]; linear1 reads 5 x 2 + 2 and
    # [3, 5], writes [3, 2].
    ops = tabular.mlp_ops(3, 10, (5,), 2, "fp32")
    assert list(ops.index) == ["linear0", "relu0", "linear1"]
    assert ops.loc["linear0", "flops"] == 2 * 3 * 10 * 5
    assert ops.loc["linear0", "bytes"] == 4 * (55 + 3 * (10 + 5))
    assert ops.loc["relu0", "bytes"] == 4 * 2 * 3 * 5
    assert ops.loc["linear1", "bytes"] == 4 * (12 + 3 * (5 + 2))
    assert list(tabular.mlp_ops(3, 10, (5,), 2, fused=True).index) == ["linear0", "linear1"]


def test_overlapped_s_by_hand():
    # Chapter 6's host-overlap model. 7 kernels, 5 us of host time each, 20 us of device
    # time: the host's 7 x 5 = 35 us outlast the device's 5 + 20 = 25 us: 35 us.
    assert tabular.overlapped_s(7, 5e-6, 20e-6) == pytest.approx(35e-6)
    # 100 us on the device: 5 + 100 = 105 us > 35 us, the device sets it.
    assert tabular.overlapped_s(7, 5e-6, 100e-6) == pytest.approx(105e-6)
    # Without overlap the two add: 35 + 100 = 135 us.
    assert tabular.overlapped_s(7, 5e-6, 100e-6, overlap=False) == pytest.approx(135e-6)
    np.testing.assert_allclose(tabular.overlapped_s(7, 5e-6, np.array([20e-6, 100e-6])),
                               [35e-6, 105e-6])
    with pytest.raises(ValueError, match="launch_s"):
        tabular.overlapped_s(7, -1.0, 1e-6)
    with pytest.raises(TypeError, match="overlap"):
        tabular.overlapped_s(7, 1e-6, 1e-6, overlap="yes")


def test_predicted_latency_by_hand():
    acc = hardware.get("T4")   # 65e12 FLOP/s fp16, 320e9 B/s
    # Batch 1, fp16: every kernel is memory-bound: 13.6 us of device time for 7 kernels.
    work = tabular.mlp_bytes(1, dtype="fp16") / 320e9
    # Without overlap (the host dispatches, then the kernel runs): 7 x 5 us + the work.
    serial = 7 * 5e-6 + work
    assert tabular.predicted_latency_s(1, "T4", 5e-6, dtype="fp16", overlap=False) \
        == pytest.approx(serial)
    # A GPU overlaps them (asynchronous launches): max(7 x 5 us, 5 us + the work).
    assert tabular.predicted_latency_s(1, "T4", 5e-6, dtype="fp16") \
        == pytest.approx(max(7 * 5e-6, 5e-6 + work))
    # A floor on each kernel's run time: 7 kernels of at least 3 us each on the device.
    ops = tabular.mlp_ops(1, dtype="fp16")
    floored = sum(max(3e-6, r.bytes / 320e9, r.flops / 65e12) for r in ops.itertuples())
    assert tabular.predicted_latency_s(1, "T4", 1e-6, dtype="fp16", min_kernel_s=3e-6) \
        == pytest.approx(max(7e-6, 1e-6 + floored))
    # A CPU does not overlap by default.
    assert tabular.predicted_latency_s(1, "CPU", 5e-6) == pytest.approx(
        7 * 5e-6 + roofline.total_s(tabular.mlp_ops(1), "CPU"))
    # A huge batch: each kernel its own roofline. The 1024 x 1024 matmuls are
    # compute-bound, the ReLUs and the thin first and last layers memory-bound.
    big = 1 << 20
    ops = tabular.mlp_ops(big, dtype="fp16")
    by_hand = sum(max(r.bytes / 320e9, r.flops / 65e12) for r in ops.itertuples())
    got = tabular.predicted_latency_s(big, acc, 0.0, dtype="fp16")
    assert got == pytest.approx(by_hand)
    assert got > max(tabular.mlp_flops(big) / 65e12, tabular.mlp_bytes(big, dtype="fp16") / 320e9)
    np.testing.assert_allclose(tabular.predicted_latency_s(np.array([1, big]), acc, 5e-6,
                                                           dtype="fp16"),
                               [max(35e-6, 5e-6 + work), got + 5e-6])


@pytest.mark.parametrize("call, error, words", [
    (lambda: tabular.mlp_params(0, (5,), 1), ValueError, "n_features"),
    (lambda: tabular.mlp_params(4, (5.5,), 1), ValueError, "hidden width"),
    (lambda: tabular.mlp_params(4, 5, 1), TypeError, "hidden"),
    (lambda: tabular.mlp_flops(0), ValueError, "batch"),
    (lambda: tabular.mlp_flops(2.5), ValueError, "batch"),
    (lambda: tabular.mlp_flops(10**12), ValueError, "batch"),
    (lambda: tabular_model.synthetic_batch(4, n_features=8, n_categorical=3, categories=4),
     ValueError, "fit"),
    (lambda: tabular.predicted_latency_s(1, "T4", -1.0), ValueError, "overhead_per_kernel_s"),
    (lambda: tabular.predicted_latency_s(1, "T4", None), TypeError, "overhead_per_kernel_s"),
    (lambda: tabular.predicted_latency_s(1, "T4", 0.0, overlap="yes"), TypeError, "overlap"),
    (lambda: tabular.predicted_latency_s(1, "T4", 0.0, min_kernel_s=-1), ValueError, "min_kernel"),
])
def test_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_host_copies_by_hand():
    # T4 over PCIe Gen3 x16: 16 lanes x 8 GT/s x 128/130 / 8 = 15.75 GB/s each way.
    link = device_links.host_link("T4")
    bw = 16 * 8e9 * 128 / 130 / 8
    assert link.bandwidth_bytes_per_s == pytest.approx(bw)
    # Batch 1, 64 fp16 features in, 1 out: two copies, each 6.5 us + bytes / bandwidth.
    copies = 2 * tabular.HOST_COPY_LATENCY_S + (64 * 2 + 1 * 2) / bw
    base = tabular.predicted_latency_s(1, "T4", 0.0, dtype="fp16")
    assert tabular.predicted_latency_s(1, "T4", 0.0, dtype="fp16", host_link=link) \
        == pytest.approx(base + copies)
    assert tabular.host_copy_s(1e9, "PCIe Gen3 x16") == pytest.approx(6.5e-6 + 1e9 / bw)


def test_predicted_latency_checks_its_arguments_outside_the_displayed_body():
    import inspect

    # Chapter 6 prints the source: the body is the model, the checks are the decorator's.
    body = inspect.getsource(tabular.predicted_latency_s.__wrapped__).split('"""')[-1]
    assert "_v." not in body and "raise" not in body
    for kw, err, name in ((dict(batch=0), ValueError, "batch"),
                          (dict(overhead_per_kernel_s=-1e-6), ValueError, "overhead_per_kernel_s"),
                          (dict(min_kernel_s=float("nan")), ValueError, "min_kernel_s"),
                          (dict(overlap="yes"), TypeError, "overlap"),
                          (dict(accelerator="nope"), KeyError, "accelerator")):
        args = {"batch": 1, "accelerator": "T4", "overhead_per_kernel_s": 1e-5, **kw}
        with pytest.raises(err, match=name):
            tabular.predicted_latency_s(**args)


# --- the CPU paths chapter 6 compares (tabular_model) ---------------------------------------

def test_numpy_forward_is_the_torch_models_pass():
    # Same weights, same arithmetic in fp32: relu(relu(relu(x W1 + b1) W2 + b2) W3 + b3) W4 + b4.
    import torch

    model = tabular_model.mlp(hidden=(32, 16))
    x = tabular_model.synthetic_batch(5)
    with torch.inference_mode():
        want = model(x).numpy()
    got = tabular_model.numpy_forward(model)(x.numpy().copy())
    assert got.shape == (5, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_numpy_forward_refuses_a_model_without_linear_layers():
    import torch

    with pytest.raises(ValueError, match="torch.nn.Linear"):
        tabular_model.numpy_forward(torch.nn.Sequential(torch.nn.ReLU()))


def test_blas_threads_sets_openblas_where_it_can_and_nests():
    # numpy's wheels bundle OpenBLAS: the count in force is the one asked for; another BLAS
    # yields None. Nested, the inner block restores the outer count on leaving.
    with tabular_model.blas_threads(2) as outer:
        with tabular_model.blas_threads(1) as inner:
            assert inner in (1, None) and (inner is None) == (outer is None)
        with tabular_model.blas_threads(2) as again:
            assert again == outer
    with pytest.raises(ValueError):
        with tabular_model.blas_threads(0):
            pass


def test_cpu_paths_times_each_path_it_is_asked_for():
    model = tabular_model.mlp(hidden=(8,))
    runs = tabular_model.cpu_paths(model, 2, repeats=2, paths=("eager PyTorch", "numpy"))
    assert set(runs) == {"eager PyTorch", "numpy"}
    assert all(r.shape == (2,) and (r > 0).all() for r in runs.values())
    with pytest.raises(ValueError, match="paths must be among"):
        tabular_model.cpu_paths(model, 2, paths=("cuBLAS",))


def test_cpu_paths_pin_the_first_allowed_core_not_core_0(monkeypatch):
    # A container whose cpuset is {3, 5}: core 0 may not be used, so pinning to it would
    # raise; cpu_paths pins to min({3, 5}) = 3 and restores the set afterwards.
    import os

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("this OS has no affinity call")
    allowed, calls = {3, 5}, []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(allowed))
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: calls.append(set(cores)))
    assert tabular_model.first_core() == 3
    runs = tabular_model.cpu_paths(tabular_model.mlp(hidden=(8,)), 2, repeats=1,
                                   paths=("numpy",))
    assert runs["numpy"][0] > 0
    assert calls[0] == {3} and calls[-1] == {3, 5}


def test_cpu_path_verdict_branches_on_the_spread():
    # numpy's best run is 1.00 against eager's 2.00: twice the throughput, each within 5%.
    clear = tabular_model.cpu_path_verdict(
        {"eager PyTorch": np.array([2.0, 2.05, 2.1]), "numpy": np.array([1.0, 1.01, 1.02])}, 256)
    assert clear.startswith("On this run numpy was the fastest") and "2.00 times" in clear
    # 1.9 against 2.0: a 5% difference inside spreads of 5% and 6% plus the 5% margin.
    close = tabular_model.cpu_path_verdict(
        {"eager PyTorch": np.array([2.0, 2.05, 2.1]), "numpy": np.array([1.9, 2.0, 2.01])}, 256)
    assert close.startswith("Inconclusive") and "numpy's" in close
    alone = tabular_model.cpu_path_verdict({"numpy": np.array([1.0])}, 1)
    assert alone.startswith("Only numpy")
    with pytest.raises(TypeError, match="runs must be a dict"):
        tabular_model.cpu_path_verdict([], 1)


def test_cpu_paths_times_onnx_runtime_where_installed():
    # The third path exports the model (torch's dynamo exporter) and runs it on one
    # intra-op thread; without onnxruntime it is left out rather than failing.
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    runs = tabular_model.cpu_paths(tabular_model.mlp(hidden=(8,)), 2, repeats=1,
                                   paths=("ONNX Runtime",))
    assert set(runs) == {"ONNX Runtime"} and runs["ONNX Runtime"][0] > 0

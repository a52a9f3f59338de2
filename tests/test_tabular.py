"""gpuinfer.tabular: parameter, FLOP and byte counts worked by hand; the model agrees."""

import numpy as np
import pytest
import torch

from gpuinfer import hardware, tabular


def test_params_by_hand_and_against_torch():
    # 64 -> 1024 -> 1024 -> 1024 -> 1: (64*1024 + 1024) + 2*(1024*1024 + 1024) + (1024 + 1)
    assert tabular.mlp_params() == 66_560 + 2 * 1_049_600 + 1_025 == 2_166_785
    model = tabular.mlp()
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
    model = tabular.mlp(hidden=(32, 32))
    assert tabular.mlp_kernels((32, 32)) == len(model) == 5


def test_model_runs_on_the_synthetic_batch():
    x = tabular.synthetic_batch(16, seed=1)
    assert x.shape == (16, tabular.DEFAULT_FEATURES) and x.dtype == torch.float32
    # The last 8 x 4 columns are one-hot: one 1 per categorical column.
    onehot = x[:, -32:].reshape(16, 8, 4)
    assert torch.equal(onehot.sum(-1), torch.ones(16, 8))
    assert torch.equal(x, tabular.synthetic_batch(16, seed=1))  # seeded
    with torch.no_grad():
        y = tabular.mlp()(x)
    assert y.shape == (16, 1)
    # Same seed, same weights.
    a, b = tabular.mlp(seed=3), tabular.mlp(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_predicted_latency_by_hand():
    acc = hardware.get("T4")
    hidden = (1024, 1024, 1024)
    # Batch 1, fp16: weight bytes dominate; 7 kernels x 5 us of overhead on top.
    bytes_ = tabular.mlp_bytes(1, hidden=hidden, dtype="fp16")
    expected = 7 * 5e-6 + bytes_ / 320e9
    assert tabular.predicted_latency_s(1, "T4", 5e-6, dtype="fp16") == pytest.approx(expected)
    # A huge batch is compute-bound: FLOPs / 65 TFLOP/s.
    big = 1 << 20
    flops = tabular.mlp_flops(big)
    got = tabular.predicted_latency_s(big, acc, 0.0, dtype="fp16")
    assert got == pytest.approx(max(flops / 65e12, tabular.mlp_bytes(big, dtype="fp16") / 320e9))
    np.testing.assert_allclose(tabular.predicted_latency_s(np.array([1, big]), acc, 5e-6,
                                                           dtype="fp16"),
                               [expected, got + 7 * 5e-6])


@pytest.mark.parametrize("call, words", [
    (lambda: tabular.mlp_params(0, (5,), 1), "widths"),
    (lambda: tabular.mlp_params(4, (5.5,), 1), "widths"),
    (lambda: tabular.mlp_flops(0), "batch"),
    (lambda: tabular.synthetic_batch(4, n_features=8, n_categorical=3, categories=4), "fit"),
    (lambda: tabular.predicted_latency_s(1, "T4", -1.0), "overhead_per_kernel_s"),
])
def test_bad_input(call, words):
    with pytest.raises(ValueError, match=words):
        call()

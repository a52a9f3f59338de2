"""ONNX export, ONNX Runtime's fusions and its int8 calibration, against hand arithmetic
and against gpuinfer.measure.quant on the same tensors."""

import math

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from gpuinfer.measure import onnx_runtime as ox, tabular_model  # noqa: E402

HIDDEN = (256, 256, 256)


@pytest.fixture(scope="module")
def mlp_onnx(tmp_path_factory):
    module = tabular_model.mlp(hidden=HIDDEN)
    path = ox.export(module, tabular_model.synthetic_batch(16), tmp_path_factory.mktemp("m") / "mlp.onnx")
    return module, path


@pytest.fixture(scope="module")
def calibration():
    return [tabular_model.synthetic_batch(64, seed=s).numpy() for s in range(4)]


def test_export_runs_in_onnx_runtime_like_torch_at_any_batch(mlp_onnx):
    module, path = mlp_onnx
    assert ox.op_counts(path) == {"Gemm": 4, "Relu": 3}      # 4 Linear layers, 3 ReLUs
    x = tabular_model.synthetic_batch(40, seed=9)                    # not the exported batch of 16
    y = ox.session(path, "off").run(None, {"x": x.numpy()})[0]
    assert np.allclose(y, module(x).detach().numpy(), rtol=1e-4, atol=1e-6)


def test_onnx_runtime_fuses_each_relu_into_its_gemm(mlp_onnx):
    _, path = mlp_onnx
    # By hand: 3 hidden layers -> 3 (Gemm, Relu) pairs become FusedGemm; the last Gemm stays.
    assert ox.optimised_ops(path, "extended") == {"FusedGemm": 3, "Gemm": 1}
    assert ox.optimised_ops(path, "basic") == {"Gemm": 4, "Relu": 3}   # basic: no fusion here
    found = ox.fusions_applied(path)
    assert list(found["fusion"]) == ["GemmActivationFusion"]
    assert found["change"].iloc[0] == "FusedGemm 0->3, Gemm 4->1, Relu 3->0"


def test_int8_model_is_within_tolerance_of_fp32(mlp_onnx, calibration, tmp_path):
    """Tolerance, by hand: one int8 rounding of a Gaussian-like tensor clipped at its
    max (~4.5 sigma) keeps SQNR = 6.02 x 8 + 4.77 - 20 log10(4.5) ~ 40 dB (7-bit weights on
    a CPU without VNNI: ~34 dB). The model rounds 12 tensors (4 weights; the input, 4
    Gemm outputs and 3 ReLU outputs): noise powers add, -10 log10(12) = -10.8 dB, so
    ~23-29 dB (the ReLU outputs and the weights lose less). Require >= 22 dB (noise power
    under 0.6% of the signal's)."""
    module, path = mlp_onnx
    q = ox.quantize_int8(path, tmp_path / "int8.onnx", calibration, "minmax")
    ops = ox.op_counts(q)
    assert ops["QuantizeLinear"] == 1 + 4 + 3          # x, the 4 Gemm outputs, the 3 ReLU outputs
    assert ops["DequantizeLinear"] == 8 + 4 + 4        # those, 4 weights, 4 int32 biases
    x = tabular_model.synthetic_batch(256, seed=100)
    y32 = module(x).detach().numpy()
    y8 = ox.session(q).run(None, {"x": x.numpy()})[0]
    acc = ox.accuracy(y32, y8)
    assert acc["sqnr_db"] >= 22.0, acc


def test_minmax_ranges_agree_exactly_and_ort_entropy_defaults_do_not_clip(mlp_onnx, calibration):
    _, path = mlp_onnx
    table = ox.compare_ranges(path, calibration, methods=("minmax", "entropy"))
    mm = table[table["method"] == "minmax"]
    # Same tensors, same extremes: both calibrators return the min and the max.
    assert np.allclose(mm["ort_lo"], mm["gpuinfer_lo"], rtol=1e-6)
    assert np.allclose(mm["ort_hi"], mm["gpuinfer_hi"], rtol=1e-6)
    # ORT's entropy default is 128 histogram bins for 128 quantised bins: no threshold
    # below the largest value can be tried, so its range reaches max|x| (no clipping);
    # gpuinfer's (TensorRT's 2048 bins) clips: its hi is at most max|x|.
    en = table[table["method"] == "entropy"]
    assert np.allclose(np.maximum(en["ort_hi"].abs(), en["ort_lo"].abs()), en["amax"], rtol=1e-5)
    assert (en["gpuinfer_hi"] <= en["amax"] * (1 + 1e-6)).all()


def test_accuracy_by_hand():
    acc = ox.accuracy([1.0, -1.0], [1.1, -1.0])
    # signal power 1, noise power 0.1^2 / 2: SQNR = 10 log10(1 / 0.005) = 23.01 dB
    assert acc["sqnr_db"] == pytest.approx(10 * math.log10(1 / 0.005))
    assert acc["max_abs_error"] == pytest.approx(0.1)
    assert acc["max_error_over_std"] == pytest.approx(0.1)              # std of [1, -1] is 1
    with pytest.raises(ValueError, match="shapes differ"):
        ox.accuracy([1.0, 2.0], [1.0])


def test_vnni_from_cpu_flags():
    assert ox.cpu_has_vnni("flags\t\t: fpu sse2 avx2 fma\n") is False
    assert ox.cpu_has_vnni("flags\t\t: sse2 avx2 avx512f avx512_vnni\n") is True
    assert ox.cpu_has_vnni("flags\t\t: sse2 avx2 avx_vnni\n") is True
    assert ox.cpu_has_vnni("Features\t: fp asimd\n") is None          # an Arm CPU: unknown


def test_tensorrt_status_says_why_it_is_skipped(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ok, why = ox.tensorrt_status()
    assert not ok and "no CUDA GPU" in why
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)   # import fails
    ok, why = ox.tensorrt_status()
    assert not ok and "pip install tensorrt" in why


def test_arguments_are_checked(mlp_onnx):
    _, path = mlp_onnx
    with pytest.raises(KeyError, match="level"):
        ox.session(path, "fastest")
    with pytest.raises(KeyError, match="method"):
        ox.ort_ranges(path, [np.zeros((1, 64), np.float32)], "kl")
    with pytest.raises(ValueError, match="multiple of n_heads"):
        ox.transformer_block(d_model=250, n_heads=4)


def test_transformer_block_keeps_its_shape_and_exports(tmp_path):
    block = ox.transformer_block(d_model=32, n_heads=2, ff_mult=2)
    x = torch.randn(2, 5, 32)                                  # [batch, tokens, d_model]
    assert block(x).shape == x.shape
    path = ox.export(block, x, tmp_path / "block.onnx")
    ops = ox.op_counts(path)
    assert ops["LayerNormalization"] == 2 and ops["Softmax"] == 1
    y = ox.session(path, "all").run(None, {"x": torch.randn(3, 5, 32).numpy()})[0]
    assert y.shape == (3, 5, 32)

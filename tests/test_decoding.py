import math

import pytest

torch = pytest.importorskip("torch")

from gpuinfer.measure import decoding, lab_measurements
from gpuinfer.predict import llm
from gpuinfer.measure import torch_device
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model  # noqa: E402


def test_lab_model_layer_count_by_hand():
    # Llama-2-7B at 1/8 width: d 512, 4 heads of 128, d_ff 1376. Per layer
    # 4 x 512^2 + 3 x 512 x 1376 = 3,162,112 weights = 12.65 MB in fp32: 10 fit 128 MB.
    spec = decoding.lab_model("llama-2-7b", "cpu")
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.d_ff) == (10, 512, 4, 1376)
    assert spec.vocab_size == 0
    # Full width in fp16: 202,375,168 weights = 404.75 MB a layer; 7 GB holds 17.
    assert decoding.lab_model("llama-2-7b", "cpu", "fp16", weight_budget_bytes=7e9,
                           width_divisor=1).n_layers == 17
    assert decoding.lab_model("llama-2-7b", "cpu", "fp16", weight_budget_bytes=1e12,
                           width_divisor=1).n_layers == 32
    with pytest.raises(ValueError, match="width_divisor"):
        decoding.lab_model("llama-2-7b", "cpu", width_divisor=3)
    assert decoding.lab_batches("cpu") == [1, 2, 4, 8, 16, 32, 64]


def _small_spec(n_heads=4, n_kv_heads=2, n_layers=2):
    import dataclasses

    return dataclasses.replace(architectures.get("llama-2-7b"), name="small", n_layers=n_layers,
                               d_model=128, n_heads=n_heads, n_kv_heads=n_kv_heads,
                               head_dim=32, d_ff=256, vocab_size=0)


def test_decode_stack_matches_a_reference_transformer_layer():
    import torch.nn.functional as F

    spec = _small_spec(n_layers=1)
    stack = decoding.DecodeStack(spec, "fp32", "cpu")
    batch, context = 3, 5
    x, [(k, v)] = stack.inputs(batch, context)
    w = {name: weight.weight for name, weight in stack.layers[0].items()}  # DenseWeight
    h = F.rms_norm(x, (128,))
    qkv = h @ w["qkv"].T
    q = qkv[:, :128].reshape(batch, 4, 1, 32)              # 4 query heads
    kr, vr = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)  # 2 KV heads
    a = F.scaled_dot_product_attention(q, kr, vr).reshape(batch, 128)
    x = x + a @ w["o"].T
    gate, up = (F.rms_norm(x, (128,)) @ w["gate_up"].T).chunk(2, dim=-1)
    expected = x + (F.silu(gate) * up) @ w["down"].T
    assert torch.allclose(stack.output(batch, context), expected, atol=1e-5)


def test_decode_stack_counts_the_same_bytes_and_flops_as_llm():
    spec = _small_spec()
    stack = decoding.DecodeStack(spec, "fp32", "cpu")
    # The step multiplies by every weight but the norms (2 x d_model a layer, + final).
    assert stack.n_params == spec.n_params - spec.n_layers * 2 * 128 - 128
    assert stack.weight_bytes == 4 * stack.n_params
    row = stack.measure(batch=2, context=8, min_run_s=0.01)
    # By hand: per layer qkv [128 + 2 x 64, 128], o [128, 128], gate_up [512, 128],
    # down [128, 256] = 32,768 + 16,384 + 65,536 + 32,768 = 147,456 weights; 2 layers.
    n_params = 2 * 147_456
    # KV per token: 2 (K, V) x 2 layers x 2 KV heads x 32 x 4 bytes = 1,024 B.
    assert row["step_bytes"] == 4 * n_params + 2 * 8 * 1024
    # 2 FLOPs a weight a sequence, + attention 4 x 2 layers x 4 heads x 32 x 8 tokens.
    assert row["step_flops"] == 2 * (2 * n_params + 4 * 2 * 4 * 32 * 8)
    # llm's per-operation model counts a little more (the activations' bytes; the new
    # token's own key among the attended ones): within 5% and 1% at this tiny width.
    assert row["step_bytes"] == pytest.approx(llm.decode_step_bytes(spec, 2, 8, "fp32"),
                                              rel=0.05)
    assert row["step_flops"] == pytest.approx(llm.decode_step_flops(spec, 2, 8), rel=0.01)
    ceiling = llm.decode_ceiling(spec, torch_device.accelerator_for("cpu"), 2, 8, "fp32")
    assert row["ceiling_tokens_per_s"] == pytest.approx(ceiling)
    assert row["tokens_per_s"] == pytest.approx(2 / row["seconds"])
    assert row["fraction_of_ceiling"] == pytest.approx(row["tokens_per_s"] / ceiling)
    assert row["kv_cache_bytes"] == 2 * 8 * step_model.kv_cache_bytes_per_token(spec, "fp32")
    with pytest.raises(ValueError, match="batch"):
        stack.measure(batch=0)
    with pytest.raises(KeyError, match="kernel"):
        decoding.DecodeStack(spec, "fp32", "cpu", kernel="int3")
    assert set(lab_measurements.STEP_COLUMNS) == set(row)


def test_quantised_stacks_store_fewer_bytes_and_stay_close():
    from gpuinfer.measure import quant

    spec = _small_spec()
    dense = decoding.DecodeStack(spec, "fp32", "cpu")
    y = dense.output(2, 4)
    n_out = sum(a for a, _ in dense.shapes.values()) * spec.n_layers
    int8 = dense.quantised("int8-dequant")
    # one byte a weight + one fp32 scale per output row
    assert int8.weight_bytes == dense.n_params + 4 * n_out
    assert quant.sqnr_db(y, int8.output(2, 4)) > 30
    packed = dense.quantised("int8-pack")
    assert torch.allclose(packed.output(2, 4), int8.output(2, 4), rtol=1e-4, atol=1e-4)
    int4 = dense.quantised("int4-unpack")
    # half a byte a weight + one fp32 scale per 32 weights
    assert int4.weight_bytes == dense.n_params / 2 + 4 * dense.n_params / 32
    assert 10 < quant.sqnr_db(y, int4.output(2, 4)) < quant.sqnr_db(y, int8.output(2, 4))
    row = int4.measure(1, 0, min_run_s=0.01)
    assert row["weight_format"] == "int4" and row["kernel"] == "int4-unpack"
    # The weight-read ceiling counts the bytes stored, scales included: 0.5 + 4/32 =
    # 0.625 bytes a weight with fp32 scales (0.5625 with fp16 ones), not 0.5.
    bandwidth = torch_device.accelerator_for("cpu").bandwidth
    assert row["weight_read_ceiling_tokens_per_s"] == pytest.approx(
        bandwidth / (dense.n_params * (0.5 + 4 / 32)))
    with pytest.raises(ValueError, match="kernel"):
        dense.quantised("dense")
    with pytest.raises(ValueError, match="dense stack"):
        int8.quantised("int4-unpack")


def test_kernel_availability_on_the_cpu():
    assert decoding.kernel_available("dense", "cpu")
    assert decoding.kernel_available("int4-unpack", "cpu")


def test_weight_traffic_per_kernel_by_hand():
    assert decoding.weight_traffic_bytes_per_weight("dense", "fp16") == 2
    # read int8 (1) + write fp16 temporary (2) + read it in the matmul (2)
    assert decoding.weight_traffic_bytes_per_weight("int8-dequant", "fp16") == 5
    assert decoding.weight_traffic_bytes_per_weight("int8-pack", "fp32") == 1
    assert math.isnan(decoding.weight_traffic_bytes_per_weight("int4-unpack"))
    with pytest.raises(KeyError, match="kernel"):
        decoding.weight_traffic_bytes_per_weight("int2")


def test_each_weight_format_owns_its_bytes():
    w = torch.randn(8, 64)
    assert decoding.DenseWeight.from_dense(w).stored_bytes == 8 * 64 * 4
    # int8: a byte a weight + one fp32 scale per output row
    assert decoding.Int8DequantWeight.from_dense(w).stored_bytes == 8 * 64 + 8 * 4
    # int4: half a byte a weight + one fp32 scale per 32 inputs (2 groups a row)
    assert decoding.Int4UnpackWeight.from_dense(w).stored_bytes == 8 * 64 // 2 + 8 * 2 * 4
    assert set(decoding.KERNELS) == set(decoding.FORMATS) == {
        "dense", "int8-dequant", "int8-pack", "int4-unpack"}


def _meta_kernel(kernel, n_out=64, n_in=128, dtype=torch.float16):
    """One weight of `kernel`, [n_out, n_in], built straight on the `meta` device (no
    data): a forward on it fails if any operation needs the values on the host."""
    meta = dict(device="meta")
    if kernel == "dense":
        return decoding.DenseWeight(torch.empty(n_out, n_in, dtype=dtype, **meta))
    if kernel in ("int8-dequant", "int8-pack"):
        return decoding.FORMATS[kernel](torch.empty(n_out, n_in, dtype=torch.int8, **meta),
                                        torch.empty(n_out, dtype=dtype, **meta))
    groups = n_in // decoding.INT4_GROUP_SIZE
    return decoding.Int4UnpackWeight(torch.empty(n_out, n_in // 2, dtype=torch.uint8, **meta),
                                     torch.empty(n_out, groups, dtype=dtype, **meta))


@pytest.mark.parametrize("kernel", list(decoding.KERNELS))
def test_every_kernels_forward_stays_on_the_device(kernel):
    # A forward that copies to the host (.cpu(), .numpy(), .item()) cannot run inside a
    # CUDA-graph capture, and eager it times the PCIe link: on `meta` tensors it raises.
    # (int4-unpack used to unpack through numpy: this failed for it exactly.)
    w = _meta_kernel(kernel)
    x = torch.empty(3, 128, dtype=torch.float16, device="meta")  # [batch, in]
    y = w(x)
    assert y.device.type == "meta"
    assert tuple(y.shape) == (3, 64) and y.dtype == torch.float16


def test_quantised_kernels_return_the_dense_dtype_and_shape_at_context(monkeypatch):
    # Some torch builds' _weight_int8pack_mm return fp32 whatever the activations: mimic
    # one, and check every kernel's step at context > 0 matches the dense output's dtype
    # and shape (an fp32 layer output would turn the next layer's matmul into fp32).
    real = torch._weight_int8pack_mm
    monkeypatch.setattr(torch, "_weight_int8pack_mm",
                        lambda x, q, s: real(x, q, s).to(torch.float32))
    dense = decoding.DecodeStack(_small_spec(), "bf16", "cpu")
    y = dense.output(2, 4)
    for kernel in ("int8-dequant", "int8-pack", "int4-unpack"):
        out = dense.quantised(kernel).output(2, 4)
        assert out.dtype == y.dtype == torch.bfloat16, kernel
        assert out.shape == y.shape == (2, 128), kernel

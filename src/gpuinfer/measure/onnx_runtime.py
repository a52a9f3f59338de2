"""Compile, fuse, calibrate: a torch model exported to ONNX, run by ONNX Runtime with its
graph optimisations off and on, quantised to int8 with calibration, and (on a GPU with
TensorRT) built into strongly typed TensorRT engines.

Lab: *Compile, fuse, calibrate* (labs/09). Times are seconds; ranges are in the units of
the tensor. Needs the `serving` extra (`onnx`, `onnxscript`, `onnxruntime`).

- `export` uses torch's current ONNX exporter (`torch.onnx.export(..., dynamo=True)`,
  which needs `onnxscript`; no network), with a dynamic batch dimension.
- `optimised_ops` saves the graph ONNX Runtime runs after its optimisations
  (`SessionOptions.optimized_model_filepath`) and counts its operators; `fusions_applied`
  finds which fusions changed the graph by switching each off in turn
  (`disabled_optimizers`), and `fusion_savings` times the session without each one.
- `ort_ranges` runs ONNX Runtime's own calibrators (MinMax, Entropy, Percentile) on a
  calibration set; `compare_ranges` sets `gpuinfer.measure.quant.calibrate` beside them on the
  same activation tensors; `quantize_int8` writes a static int8 QDQ model.
- On x86 CPUs without VNNI, ONNX Runtime's u8 x s8 int8 kernels use an instruction
  (VPMADDUBSW) whose 16-bit intermediate sums can saturate; `reduce_range` (7-bit
  weights) avoids it. `cpu_has_vnni` tells which case this CPU is.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import math
import os
import pathlib
import tempfile
import warnings
from typing import Mapping, Sequence

import numpy as np

import torch
import torch.nn.functional as F

from gpuinfer.measure import quant as _quant
from gpuinfer import validate as _v

LEVELS = ("off", "basic", "extended", "all")

#: ONNX Runtime graph transformers that fuse operators (names as `disabled_optimizers`
#: takes them), with what each does. Source: onnxruntime/core/optimizer/*.cc.
FUSIONS = {
    "MatMulAddFusion": "MatMul + Add (bias) -> Gemm",
    "GemmActivationFusion": "Gemm + Relu/activation -> FusedGemm",
    "MatMulScaleFusion": "MatMul + scalar Mul/Div -> FusedMatMul",
    "BiasGeluFusion": "Add (bias) + Gelu -> BiasGelu",
    "GeluFusion": "the erf chain of GELU -> Gelu",
    "FastGeluFusion": "the tanh chain of GELU -> FastGelu",
    "LayerNormFusion": "ReduceMean/Sub/Pow/Sqrt/Div chain -> LayerNormalization",
    "SkipLayerNormFusion": "Add (residual) + LayerNormalization -> SkipLayerNormalization",
    "AttentionFusion": "the attention subgraph -> Attention",
}

#: Published TensorRT measurements, each with its source (read before use here).
TENSORRT_PUBLISHED = [
    {"what": "ResNet50-v1, TensorFlow (baseline)", "gpu": "A100", "batch": 1,
     "latency_ms": 7.95, "source": "https://docs.nvidia.com/deeplearning/tensorrt/"
     "tensorflow-quantization-toolkit/docs/docs/model_zoo.html"},
    {"what": "ResNet50-v1, TensorRT 8.4 int8 (PTQ)", "gpu": "A100", "batch": 1,
     "latency_ms": 0.46, "source": "https://docs.nvidia.com/deeplearning/tensorrt/"
     "tensorflow-quantization-toolkit/docs/docs/model_zoo.html"},
    {"what": "YOLOv4, TensorRT 7.2 fp32 (user report)", "gpu": "GTX 1060", "batch": 1,
     "latency_ms": 1.77, "source": "https://forums.developer.nvidia.com/t/"
     "why-is-int8-not-as-fast-as-fp16/167168"},
    {"what": "YOLOv4, TensorRT 7.2 fp16 (user report)", "gpu": "GTX 1060", "batch": 1,
     "latency_ms": 1.53, "source": "https://forums.developer.nvidia.com/t/"
     "why-is-int8-not-as-fast-as-fp16/167168"},
    {"what": "YOLOv4, TensorRT 7.2 int8 (user report)", "gpu": "GTX 1060", "batch": 1,
     "latency_ms": 1.64, "source": "https://forums.developer.nvidia.com/t/"
     "why-is-int8-not-as-fast-as-fp16/167168"},
]
TENSORRT_DOCS = {
    "calibrators deprecated in 10.1": "https://docs.nvidia.com/deeplearning/tensorrt/api/c_api/deprecated.html",
    "explicit quantization with strong typing": "https://docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/quantized-types-explicit-quantization.html",
    "TF32 enabled by default (BuilderFlag.TF32)": "https://docs.nvidia.com/deeplearning/tensorrt/archives/tensorrt-713/api/python_api/infer/Core/NetworkConfig.html",
}


# --- the models ---------------------------------------------------------------------------------

def transformer_block(d_model=256, n_heads=4, ff_mult=4, *, seed=0):
    """A pre-norm transformer block in eval mode (weights seeded): x + attention(LN(x)),
    then + MLP(LN(.)) with a tanh GELU. Input and output [batch, tokens, d_model]."""

    d_model = _v.count("d_model", d_model, maximum=65536)
    n_heads = _v.count("n_heads", n_heads)
    _v.ensure(d_model % n_heads == 0, f"d_model ({d_model}) must be a multiple of n_heads "
              f"({n_heads})")
    ff = d_model * _v.count("ff_mult", ff_mult)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d_model), torch.nn.LayerNorm(d_model)
            self.qkv = torch.nn.Linear(d_model, 3 * d_model)
            self.o = torch.nn.Linear(d_model, d_model)
            self.up, self.down = torch.nn.Linear(d_model, ff), torch.nn.Linear(ff, d_model)

        def forward(self, x):  # [b, t, d]
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)
                       for z in (q, k, v))                        # [b, heads, t, d/heads]
            scores = q @ k.transpose(-1, -2) / math.sqrt(d // n_heads)
            a = torch.softmax(scores, dim=-1) @ v
            x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
            return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return Block().eval()
    finally:
        torch.random.set_rng_state(state)


def export(module, example, path) -> pathlib.Path:
    """`module` to ONNX at `path` with torch's dynamo exporter, input `x`, output `y`,
    the first (batch) dimension dynamic. `example`: a tensor of the input's shape."""

    path = pathlib.Path(path)
    batch = torch.export.Dim("batch", min=1, max=4096)
    with _quiet_output():
        torch.onnx.export(module, (example,), str(path), dynamo=True, input_names=["x"],
                          output_names=["y"], dynamic_shapes=({0: batch},), verbose=False,
                          external_data=False)
    return path


@contextlib.contextmanager
def _quiet_output():
    """Exporters and calibrators print progress lines and warnings: keep them out of a
    notebook (errors still raise)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def op_counts(path) -> dict:
    """{operator type: count} of the ONNX graph at `path`."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return dict(collections.Counter(n.op_type for n in graph.node))


# --- ONNX Runtime sessions and their optimisations ---------------------------------------------

def _level(level):
    import onnxruntime as ort

    level = _v.choice("level", level, LEVELS)
    g = ort.GraphOptimizationLevel
    return {"off": g.ORT_DISABLE_ALL, "basic": g.ORT_ENABLE_BASIC,
            "extended": g.ORT_ENABLE_EXTENDED, "all": g.ORT_ENABLE_ALL}[level]


def session(path, level="all", *, threads=None, disabled=(), save_to=None):
    """An ONNX Runtime CPU session of the model at `path` at optimisation `level`
    ('off', 'basic', 'extended', 'all'), `threads` intra-op threads (default: torch's
    count, so that both time the same cores), `disabled` fusions switched off, the
    optimised graph saved to `save_to` if given."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = _level(level)
    options.intra_op_num_threads = _v.count("threads", threads or torch.get_num_threads())
    options.log_severity_level = 3
    if save_to is not None:
        options.optimized_model_filepath = str(save_to)
    with _quiet_output():
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=list(disabled))


def optimised_ops(path, level="extended", disabled=()) -> dict:
    """{operator: count} of the graph ONNX Runtime runs at `level` (its saved optimised
    model). 'all' adds layout changes specific to this CPU; 'extended' is portable."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "optimised.onnx"
        session(path, level, disabled=disabled, save_to=out)
        return op_counts(out)


def fusions_applied(path, level="extended", candidates: Mapping[str, str] = FUSIONS):
    """Which fusions changed the graph: for each candidate, the optimised graph with it
    switched off differs from the graph with everything on. A DataFrame: `fusion`,
    `what`, `ops_without` -> `ops_with` (only the operator counts that differ)."""
    import pandas as pd

    full = optimised_ops(path, level)
    rows = []
    for name, what in candidates.items():
        without = optimised_ops(path, level, disabled=[name])
        if without != full:
            keys = sorted(set(full) | set(without))
            diff = {k: (without.get(k, 0), full.get(k, 0)) for k in keys
                    if without.get(k, 0) != full.get(k, 0)}
            rows.append({"fusion": name, "what": what,
                         "change": ", ".join(f"{k} {a}->{b}" for k, (a, b) in diff.items())})
    return pd.DataFrame(rows, columns=["fusion", "what", "change"])


def time_session(sess, feed, *, min_run_s=None):
    """`bench.time_fn` of one `sess.run` on `feed` ({input name: array}): a Timing."""
    from gpuinfer.measure import bench as _bench

    return _bench.time_fn(lambda: sess.run(None, feed), device="cpu",
                          min_run_s=min_run_s)


def level_table(path, feed, *, levels=LEVELS, min_run_s=None):
    """Per optimisation level: operators in the graph ORT runs and the median seconds of
    one run (with its interquartile range). A DataFrame indexed by level."""
    import pandas as pd

    rows = []
    for level in levels:
        t = time_session(session(path, level), feed, min_run_s=min_run_s)
        ops = optimised_ops(path, level) if level != "off" else op_counts(path)
        rows.append({"level": level, "operators": sum(ops.values()),
                     "seconds": t.median_s, "iqr_s": t.iqr_s})
    df = pd.DataFrame(rows).set_index("level")
    df["speedup_vs_off"] = df.loc[levels[0], "seconds"] / df["seconds"]
    return df


def fusion_savings(path, feed, fusions: Sequence[str], *, level="extended",
                   min_run_s=None):
    """The time each fusion saved: one run with everything on against one run with only
    that fusion off (negative: the fusion cost time here). The IQR says how much of the
    difference is noise. A DataFrame, one row per fusion."""
    import pandas as pd

    base = time_session(session(path, level), feed, min_run_s=min_run_s)
    rows = []
    for name in fusions:
        t = time_session(session(path, level, disabled=[name]), feed,
                         min_run_s=min_run_s)
        rows.append({"fusion": name, "without_s": t.median_s, "with_s": base.median_s,
                     "saved_s": t.median_s - base.median_s,
                     "noise_s": max(t.iqr_s, base.iqr_s)})
    df = pd.DataFrame(rows, columns=["fusion", "without_s", "with_s", "saved_s", "noise_s"])
    df["saved_fraction"] = df["saved_s"] / df["without_s"]
    return df


# --- calibration and int8 ----------------------------------------------------------------------

class _Reader:
    """ONNX Runtime's CalibrationDataReader over a list of input arrays."""

    def __init__(self, batches):
        self._batches = [np.ascontiguousarray(b, dtype=np.float32) for b in batches]
        self.rewind()

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        self._it = iter([{"x": b} for b in self._batches])


def _method(method):
    from onnxruntime.quantization import CalibrationMethod

    method = _v.choice("method", method, _quant.METHODS)
    return {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile}[method]


def ort_ranges(path, batches, method="minmax", **options):
    """ONNX Runtime's calibrator `method` ('minmax', 'entropy', 'percentile') run over
    `batches` (arrays for input `x`) on every MatMul/Gemm input: a DataFrame `tensor`,
    `lo`, `hi`. `options` go to ORT's calibrator as they are (e.g. num_bins,
    symmetric, percentile); without them it uses ORT's defaults, as `quantize_static` does."""
    import pandas as pd
    from onnxruntime.quantization.calibrate import create_calibrator

    with tempfile.TemporaryDirectory() as tmp, _quiet_output():
        calibrator = create_calibrator(str(path), ["MatMul", "Gemm"],
                                       augmented_model_path=str(pathlib.Path(tmp) / "aug.onnx"),
                                       calibrate_method=_method(method), extra_options=options)
        calibrator.collect_data(_Reader(batches))
        data = calibrator.compute_data()
    rows = [{"tensor": name, "lo": float(np.asarray(r.range_value[0]).ravel()[0]),
             "hi": float(np.asarray(r.range_value[1]).ravel()[0])} for name, r in data.items()]
    return pd.DataFrame(rows)


def activations(path, batches, names: Sequence[str]) -> dict:
    """The values of the named tensors over all `batches` (fp32 model, no optimisation):
    {name: 1-D array}. The graph is copied with those tensors added as outputs."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    have = {o.name for o in model.graph.output}
    for name in names:
        if name not in have:
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, None))
    with tempfile.TemporaryDirectory() as tmp:
        aug = pathlib.Path(tmp) / "outputs.onnx"
        onnx.save(model, str(aug))
        sess = session(aug, "off")
        outs = [sess.run(list(names), {"x": np.asarray(b, dtype=np.float32)})
                for b in batches]
    return {n: np.concatenate([o[i].ravel() for o in outs]) for i, n in enumerate(names)}


def compare_ranges(path, batches, methods=_quant.METHODS):
    """ORT's calibrators (with their defaults) beside `quant.calibrate` (with its
    defaults) on the same activation tensors: one row per (tensor, method) with both
    ranges and `hi_ratio` = ORT's hi / gpuinfer's hi. MinMax is asymmetric in both
    (ORT's default); entropy and percentile are symmetric in both."""
    import pandas as pd

    rows = []
    found = {method: ort_ranges(path, batches, method) for method in methods}
    names = sorted({t for r in found.values() for t in r["tensor"]})
    values = activations(path, batches, names)
    for method, ranges in found.items():
        for _, r in ranges.iterrows():
            lo, hi = _quant.calibrate(values[r["tensor"]], method=method,
                                      symmetric=method != "minmax")
            rows.append({"tensor": r["tensor"], "method": method, "ort_lo": r["lo"],
                         "ort_hi": r["hi"], "gpuinfer_lo": float(lo[0]),
                         "gpuinfer_hi": float(hi[0]), "amax": float(np.abs(values[r["tensor"]]).max())})
    df = pd.DataFrame(rows)
    df["hi_ratio"] = df["ort_hi"] / df["gpuinfer_hi"]
    return df


def cpu_has_vnni(cpuinfo=None):
    """True if this x86 CPU has VNNI (int8 dot products without 16-bit saturation),
    False if it is an x86 CPU without it, None if unknown (not Linux, or not x86).
    `cpuinfo`: the text of /proc/cpuinfo (read from the machine when None)."""
    text = cpuinfo
    if text is None:
        try:
            text = pathlib.Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    if not flags or not ({"sse2", "avx2"} & flags):
        return None
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & flags)


def quantize_int8(path, out, batches, method="minmax", *, reduce_range=None,
                  for_tensorrt=False) -> pathlib.Path:
    """Static int8 quantisation with `onnxruntime.quantization.quantize_static`: QDQ
    format, signed int8 activations (symmetric, as TensorRT requires) and per-channel
    weights, ranges from calibrator `method` over `batches`. `reduce_range` (7-bit
    weights) defaults to True on x86 CPUs without VNNI. `for_tensorrt` keeps biases in
    fp32 (TensorRT dequantises int8 and fp8, not int32)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    if reduce_range is None:
        reduce_range = cpu_has_vnni() is False and not for_tensorrt
    out = pathlib.Path(out)
    extra = {"ActivationSymmetric": True, "WeightSymmetric": True}
    if for_tensorrt:
        extra["QuantizeBias"] = False
    with _quiet_output():
        quantize_static(str(path), str(out), _Reader(batches), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        per_channel=True, reduce_range=bool(reduce_range),
                        calibrate_method=_method(method), extra_options=extra)
    return out


def accuracy(reference, approx) -> dict:
    """How far `approx` is from `reference`: SQNR (dB, `quant.sqnr_db`), the largest
    absolute error, and that error over the reference's standard deviation."""
    ref = np.asarray(reference, dtype=np.float64)
    app = np.asarray(approx, dtype=np.float64)
    _v.ensure(ref.shape == app.shape, f"shapes differ: {ref.shape} vs {app.shape}")
    err = float(np.abs(ref - app).max())
    return {"sqnr_db": _quant.sqnr_db(ref, app), "max_abs_error": err,
            "max_error_over_std": err / float(ref.std()) if ref.std() > 0 else math.inf}


# --- TensorRT on a GPU ---------------------------------------------------------------------------

def tensorrt_status() -> tuple[bool, str]:
    """(True, version) where a CUDA GPU and an importable `tensorrt` are both here, else
    (False, the reason)."""

    if not torch.cuda.is_available():
        return False, "no CUDA GPU here (TensorRT builds engines for NVIDIA GPUs only)"
    try:
        import tensorrt as trt
    except ImportError:
        return False, "the tensorrt package is not installed (pip install tensorrt)"
    return True, trt.__version__


def build_engine(path, batch, n_features):
    """A strongly typed TensorRT engine from the ONNX model at `path`: the tensor types
    in the file decide the precision (fp16 weights and inputs: fp16; Q/DQ nodes: int8);
    no precision flags. Shapes [batch, n_features]. Returns (engine, context)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(pathlib.Path(path).read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {path}: {errors}")
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    shape = (int(batch), int(n_features))
    profile.set_shape("x", (1, shape[1]), shape, shape)
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT could not build an engine from {path}")
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    context = engine.create_execution_context()
    context.set_input_shape("x", shape)
    return engine, context


def time_engine(engine, context, x, *, min_run_s=None):
    """Median seconds of one engine run on the CUDA tensor `x` (`bench.time_fn`, which
    synchronises), and the output tensor."""
    import tensorrt as trt

    from gpuinfer.measure import bench as _bench

    x = x.to(dtype=getattr(torch, np.dtype(trt.nptype(engine.get_tensor_dtype("x"))).name))
    out_shape = tuple(context.get_tensor_shape("y"))
    y = torch.empty(out_shape, device=x.device,
                    dtype=getattr(torch, np.dtype(trt.nptype(engine.get_tensor_dtype("y"))).name))
    context.set_tensor_address("x", x.data_ptr())
    context.set_tensor_address("y", y.data_ptr())
    stream = torch.cuda.current_stream().cuda_stream
    t = _bench.time_fn(lambda: context.execute_async_v3(stream), device="cuda",
                       min_run_s=min_run_s)
    return t.median_s, y


def tensorrt_comparison(module, batch, n_features, calibration, workdir, *, min_run_s=None):
    """On a CUDA GPU with TensorRT: eager PyTorch fp32 and fp16 against strongly typed
    TensorRT engines built from an fp16 export and from the int8 QDQ model (calibrated
    with MinMax on `calibration`), all at [batch, n_features]. A DataFrame: `engine`,
    `seconds`, `speedup_vs_eager_fp32`. Eager fp32 keeps torch's default (no TF32 for
    matmuls); TensorRT may use TF32 in its fp32 layers (on by default)."""
    import copy

    import pandas as pd

    from gpuinfer.measure import bench as _bench

    workdir = pathlib.Path(workdir)
    x = torch.randn(int(batch), int(n_features), device="cuda")        # [batch, n_features]
    eager = {"eager PyTorch fp32": (copy.deepcopy(module).cuda().float().eval(), x),
             "eager PyTorch fp16": (copy.deepcopy(module).cuda().half().eval(), x.half())}
    rows = []
    with torch.inference_mode():
        for name, (m, xx) in eager.items():
            t = _bench.time_fn(lambda m=m, xx=xx: m(xx), device="cuda", min_run_s=min_run_s)
            rows.append({"engine": name, "seconds": t.median_s})
    fp16 = export(eager["eager PyTorch fp16"][0], x.half(), workdir / "trt_fp16.onnx")
    fp32 = export(copy.deepcopy(module).cpu().float().eval(), x.cpu(), workdir / "trt_fp32.onnx")
    int8 = quantize_int8(fp32, workdir / "trt_int8.onnx", calibration, for_tensorrt=True)
    for name, path in (("TensorRT fp16, strongly typed", fp16),
                       ("TensorRT int8 Q/DQ, strongly typed", int8)):
        engine, context = build_engine(path, batch, n_features)
        rows.append({"engine": name, "seconds": time_engine(engine, context, x,
                                                            min_run_s=min_run_s)[0]})
    df = pd.DataFrame(rows)
    df["speedup_vs_eager_fp32"] = df["seconds"].iloc[0] / df["seconds"]
    return df


def environment_note() -> str:
    """One line on what ran the ORT measurements: onnxruntime version, threads, VNNI."""
    import onnxruntime as ort

    vnni = cpu_has_vnni()
    v = {True: "with VNNI", False: "without VNNI (int8 uses 7-bit weights here)",
         None: "VNNI unknown"}[vnni]
    return (f"onnxruntime {ort.__version__}, {torch.get_num_threads()} threads, "
            f"CPU {v}, {os.cpu_count()} logical cores")

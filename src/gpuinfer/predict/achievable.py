"""The achievable model: what an engine reaches, beside the roofline's ceiling.

Chapters: every page that turns a ceiling into a decision (which GPU, which format, chunk
size, speculation, TP degree). Times in seconds, rates in tokens/s.

One forward step is the table of operations `llm.forward_step_breakdown` builds (one row
per kernel family). The ceiling times each row on the roofline, max(bytes / bandwidth,
FLOPs / peak), and sums the rows. The achievable model times the same rows on a derated
roofline and adds what a step costs beyond its kernels:

- a matmul-like row (`linear`, `lm_head`, and any other row that does arithmetic but is
  not attention: a mixture-of-experts' `router`, `experts`, `shared_experts`) computes at
  `matmul` x the peak of its format: the fraction a tuned GEMM reaches (Bekman's MAMF
  search, `hardware.achievable`), per GPU and format (`matmul_fraction`);
- `attention` computes at `attention` x the peak (FlashAttention-3 reaches 740 of the
  H100's 989 dense fp16 TFLOP/s in its forward pass: 0.75, Shah et al. 2024), the
  16-bit peak even when the matmuls run in fp8 (`attention_dtype`: FP8 attention
  kernels are opt-in in the engines);
- every row moves its bytes at `bandwidth` x the datasheet bandwidth (fitted), and a
  weight-only quantised matmul (int8/int4 weights computed in 16 bits) at a further
  `weight_only[format]` (its dequantisation kernels do not stream at full speed: fitted
  on gpt-fast's int8 and int4 figures);
- rows with no arithmetic (the embedding gather) are bandwidth-bound;
- the step pays a gap of `kernel_gap_s` between consecutive kernels (0.5 us replayed as
  a CUDA graph: NVIDIA's CUDA-graphs post, `tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S`), and
  without CUDA graphs the host's launches race the device as in chapter 6's host-overlap
  model (`tabular.overlapped_s`): max(kernels x `launch_s`, `launch_s` + device);
- a fixed `step_s` per step: the scheduler, sampling, the host's bookkeeping (fitted);
- `sequence_s` per sequence in the step: the host's per-request work (scheduling,
  detokenising, sampling bookkeeping) that grows with the batch, what limits small-KV
  mixtures of experts at batches of thousands (0 in `FITTED`; fitted in `REFIT`).

With every efficiency 1 and every overhead 0 (`CEILING`) the model is the roofline
exactly. `FITTED` holds the constants fitted on the training rows of the published engine
measurements: the fit, and the errors against the held-out rows, are in
`gpuinfer.predict.calibration` (`measurements`, `predict`, `errors`, `calibrate`), which uses the
serving simulator for its offline rows; this module imports neither `llm_serving` nor
`parallel`.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import measured_rates
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.predict import roofline as _roofline
from gpuinfer.predict import search as _search
from gpuinfer.predict import tabular as _tabular
from gpuinfer import validate as _v

#: Kernels one decoder layer launches in a decode step: `parallel.KERNELS_PER_LAYER`'s
#: illustrative count (13, the TP layout's; at TP 1 the two all-reduces are absent but
#: fused engines launch other small kernels, so the same count is kept).
KERNELS_PER_LAYER = 13

#: Gap a kernel adds inside a replayed CUDA graph: 3.4 - 2.9 us in NVIDIA's CUDA-graphs
#: post (`tabular.CUDA_GRAPHS_BLOG_PER_KERNEL_S`).
GRAPH_KERNEL_GAP_S = 0.5e-6
#: Host time to launch one kernel eagerly, back to back: the post's 3.8 us per kernel,
#: measured from C++ (cudaLaunchKernel in a loop of a kernel whose own work takes 2.9 us).
#: The host kept ahead of the GPU there, so this is the pace of the launches, mostly the
#: kernel's work, and an upper bound on C++'s own cost a launch, not a floor. PyTorch's
#: per-operation dispatch from Python costs several microseconds more a call: a lab
#: measures that on its machine (chapter 6's tiny kernel; lab 11 prices a step's profiled
#: launches with it).
EAGER_LAUNCH_S = 3.8e-6

#: FlashAttention-3's forward pass: up to 740 TFLOP/s of the H100's 989 (fp16), 75%
#: (Shah et al. 2024, abstract). FA2 reached 50-73% of the A100's peak (Dao 2023): the
#: same figure, rounded, serves both.
ATTENTION_FRACTION = 0.75

#: Llama-3.1-405B (meta-llama/Llama-3.1-405B config.json): for the calibration rows
#: (`gpuinfer.predict.calibration`) only,
#: the course's catalogue does not list it.
LLAMA_3_1_405B = architectures.ModelSpec(
    name="llama-3.1-405b", n_layers=126, d_model=16384, n_heads=128, n_kv_heads=8,
    head_dim=128, d_ff=53248, vocab_size=128256,
    source="https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json")
_EXTRA_MODELS = {LLAMA_3_1_405B.name: LLAMA_3_1_405B}


def model(name) -> architectures.ModelSpec:
    """A catalogue model (`llm.get`), or one of the calibration's extra models."""
    if isinstance(name, str) and name.strip().lower() in _EXTRA_MODELS:
        return _EXTRA_MODELS[name.strip().lower()]
    return architectures.get(name)


#: `model` under a private name, for the functions below whose parameter `model` shadows it.
_spec = model


#: How `Efficiency.all_to_all` prices an expert-parallel all-to-all.
ALL_TO_ALL = ("link", "measured")


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """The constants of the achievable model (see the module's docstring).

    `matmul`: a fraction of the format's peak, or None for `matmul_fraction` (per GPU
    and format); `matmul_scale`: a further factor on it (a sustained run in an engine
    against a short best-shape search); `bandwidth`: of the datasheet bandwidth; `weight_only`: ((format,
    fraction), ...) a further factor on a weight-only quantised matmul's bandwidth;
    `attention`: of the peak, for attention's arithmetic; `step_s`: fixed seconds a
    step; `kernel_gap_s`: seconds between kernels on the device; `cuda_graphs`: False
    adds the host's eager launches (`launch_s` each, chapter 6's overlap model);
    `sequence_s`: seconds a step per sequence it runs; `all_to_all`: how an expert-parallel
    step's all-to-alls are priced, "link" (the link model: the link's bandwidth plus
    NCCL's latency, `expert_parallel.all_to_all_s`; not a bound, which is
    `all_to_all_floor_s`, the ceiling's) or "measured" (the link model over the fraction
    of it DeepEP's kernels reach at the EP degree, `expert_parallel.deepep_fraction`)."""

    matmul: float | None = None
    matmul_scale: float = 1.0
    bandwidth: float = 1.0
    weight_only: tuple = ()
    attention: float = ATTENTION_FRACTION
    step_s: float = 0.0
    kernel_gap_s: float = GRAPH_KERNEL_GAP_S
    cuda_graphs: bool = True
    launch_s: float = EAGER_LAUNCH_S
    kernels_per_layer: int = KERNELS_PER_LAYER
    attention_dtype: str | None = "fp16"
    sequence_s: float = 0.0
    all_to_all: str = "link"

    def __post_init__(self):
        if self.matmul is not None:
            _v.fraction("matmul", self.matmul)
        _v.fraction("matmul_scale", self.matmul_scale)
        _v.fraction("bandwidth", self.bandwidth)
        _v.fraction("attention", self.attention)
        for fmt, f in self.weight_only:
            _dtypes.get(fmt)
            _v.fraction(f"weight_only[{fmt}]", f)
        _v.non_negative("step_s", self.step_s)
        _v.non_negative("kernel_gap_s", self.kernel_gap_s)
        _v.non_negative("launch_s", self.launch_s)
        _v.non_negative("sequence_s", self.sequence_s)
        _v.choice("all_to_all", self.all_to_all, list(ALL_TO_ALL))
        _v.count("kernels_per_layer", self.kernels_per_layer, minimum=0, maximum=10_000)
        if self.attention_dtype is not None:
            _dtypes.get(self.attention_dtype)
        if not isinstance(self.cuda_graphs, bool):
            raise TypeError(f"cuda_graphs must be True or False, got {self.cuda_graphs!r}")

    def weight_only_fraction(self, weight_format) -> float:
        table = {_dtypes.get(f).peak: x for f, x in self.weight_only}
        return table.get(_dtypes.peak_dtype(weight_format), 1.0)

    @property
    def is_ceiling(self) -> bool:
        return (self.matmul == 1.0 and self.matmul_scale == 1.0 and self.bandwidth == 1.0 and self.attention == 1.0
                and all(x == 1.0 for _, x in self.weight_only) and self.step_s == 0.0
                and self.kernel_gap_s == 0.0 and (self.cuda_graphs or self.launch_s == 0.0)
                and self.attention_dtype is None and self.sequence_s == 0.0
                and self.all_to_all == "link")


#: The roofline: every efficiency 1, every overhead 0.
CEILING = Efficiency(matmul=1.0, bandwidth=1.0, weight_only=(), attention=1.0, step_s=0.0,
                     kernel_gap_s=0.0, cuda_graphs=True, launch_s=0.0, attention_dtype=None)

#: Fitted on the 6 training rows of `calibration.measurements()` by
#: `calibration.calibrate()` (a test refits them): matmuls sustain 0.70 of the MAMF
#: fraction (`matmul_scale`; an H100's fp8 GEMMs: 0.70 x 0.709 = 0.50 of the datasheet peak in TensorRT-LLM's runs); bytes stream at 0.85
#: of the datasheet bandwidth; int8 and int4 weight-only matmuls at 0.83 and 0.74 of that
#: (gpt-fast's dequantising kernels); 1.6 ms a step for the scheduler, sampling and the
#: host's bookkeeping. Four dense rows fix three constants loosely: bandwidth and step_s
#: trade off against each other (0.73 and 0.3 ms fit almost as well). The rest are cited
#: (see the module's docstring). Held out (97 TensorRT-LLM rows): median absolute error
#: 9.0%, worst 34.8%.
FITTED = Efficiency(matmul=None, matmul_scale=0.70, bandwidth=0.85,
                    weight_only=(("int8", 0.83), ("int4", 0.74)),
                    attention=ATTENTION_FRACTION, step_s=1.6e-3)

#: A refit on every published source the course holds (`validation.refit()`, a test
#: refits it): the 245 rows of the fit pool (TensorRT-LLM's 2025 perf overview with its
#: MoE tables, gpt-fast's batch-1 rows with TP, int8/int4 and Mixtral (its README at
#: 48328fb), SGLang 0.3 and vLLM 0.6 offline, vLLM on 8 x MI300X), offline rows under their
#: engines' default caps (`validation.engine_caps`), with the host's per-sequence cost free:
#: bytes at 0.64 of the datasheet bandwidth, matmuls at 0.66 of the MAMF fraction, 1.0 ms a
#: step and 11 us a sequence, int8/int4 weight-only at 0.99/0.80; expert-parallel
#: all-to-alls at DeepEP's measured fraction of the link model (`all_to_all="measured"`,
#: cited, not fitted: no row of the data set runs EP through the model). On the 346
#: independent rows (TensorRT-LLM v0.17, never fitted on) its median |error| is 13.7% (p90
#: 35%; MoE 11.9%) against `FITTED`'s 21.1% (p90 60%; MoE 37.5%); left-one-source-out it is
#: no better than FITTED on the fit pool (median 38% vs 22%: the constants do not carry
#: from one publisher to another, `validation.loso`). Not the default: the pages' numbers
#: rest on `FITTED`.
REFIT = Efficiency(matmul=None, matmul_scale=0.66, bandwidth=0.64,
                   weight_only=(("int4", 0.80), ("int8", 0.99)),
                   attention=ATTENTION_FRACTION, step_s=1.0e-3, sequence_s=1.1e-5,
                   all_to_all="measured")

#: The achievable model for a lab's bare loop (`achievable.FITTED` less its fixed
#: `step_s`): the fitted kernels' bandwidth and the gaps between them, but no scheduler,
#: no sampling, no host bookkeeping, which an engine pays every step and a lab's loop
#: of matmuls does not. The labs grade their loop against this and the ceiling, and show
#: the engine's (`achievable.FITTED`) beside them.
LOOP = dataclasses.replace(FITTED, step_s=0.0)

#: The matmul fraction for a GPU and format with no MAMF-style measurement: the median of
#: the measured ones of that class (`matmul_fractions()`), 16-bit and 8-bit-or-narrower.
_FALLBACK_CLASS = {"fp16": "16", "bf16": "16", "fp8": "8", "int8": "8", "fp4": "8",
                   "int4": "8", "tf32": "16", "fp32": "16"}


@functools.lru_cache(maxsize=None)
def matmul_fractions():
    """Every measured matmul fraction in `hardware.achievable_table`: rows (GPU, peak
    format, measured FLOP/s, datasheet FLOP/s, fraction)."""
    import pandas as pd

    rows = []
    table = measured_rates.achievable_table()
    for name, row in table.iterrows():
        acc = _hardware.get(name)
        for fmt in ("fp16", "bf16", "fp8"):
            got = row.get(f"matmul_{fmt}_flops", math.nan)
            try:
                peak = acc.peak_flops(fmt)
            except ValueError:
                continue
            if got == got and peak > 0:
                rows.append({"accelerator": name, "format": fmt, "measured_flops": got,
                             "peak_flops": peak, "fraction": min(1.0, got / peak)})
    return pd.DataFrame(rows)


def matmul_fraction(accelerator, dtype) -> float:
    """The fraction of `accelerator`'s `dtype` peak a tuned matmul reaches: the best of
    its measured 16-bit formats for fp16/bf16, its fp8 figure for fp8, int8 and fp4
    (none is published for those: the fp8 kernels' fraction stands in), and where the
    device has no measurement of the class, the median fraction over devices that do."""
    acc = _hardware.get(accelerator)
    return _matmul_fraction(acc.name, _dtypes.peak_dtype(dtype))


#: `matmul_source`'s answers.
MATMUL_SOURCES = ("measured", "fp8 stand-in", "catalogue median")


def matmul_source(accelerator, dtype) -> str:
    """Where `matmul_fraction(accelerator, dtype)` comes from: "measured" (a MAMF-style
    figure for that GPU and format: fp16/bf16 for a 16-bit peak, fp8 for fp8), "fp8
    stand-in" (int8, fp4 or int4 arithmetic with no measurement of its own: the GPU's
    fp8 fraction serves) or "catalogue median" (the GPU has no measurement of the
    class: the median over the GPUs that do)."""
    acc = _hardware.get(accelerator)
    peak = _dtypes.peak_dtype(dtype)
    cls = _FALLBACK_CLASS.get(peak, "16")
    t = matmul_fractions()
    fmts = ("fp16", "bf16") if cls == "16" else ("fp8",)
    if not len(t[(t["accelerator"] == acc.name) & t["format"].isin(fmts)]):
        return "catalogue median"
    return "measured" if cls == "16" or peak == "fp8" else "fp8 stand-in"


@functools.lru_cache(maxsize=None)
def _matmul_fraction(name, peak) -> float:
    cls = _FALLBACK_CLASS.get(peak, "16")
    t = matmul_fractions()
    fmts = ("fp16", "bf16") if cls == "16" else ("fp8",)
    mine = t[(t["accelerator"] == name) & t["format"].isin(fmts)]
    if len(mine):
        return float(mine["fraction"].max())
    return float(t[t["format"].isin(fmts)]["fraction"].median())


# --- the derated device -------------------------------------------------------------------

def _derate(acc, eff, weight_format):
    peaks = {k: v * eff.matmul_scale * (eff.matmul if eff.matmul is not None
                                         else matmul_fraction(acc, k))
             for k, v in acc.peaks.items()}
    w = _dtypes.get(weight_format)
    bw = acc.bandwidth * eff.bandwidth * (eff.weight_only_fraction(w.name) if w.quantised
                                          else 1.0)
    return dataclasses.replace(acc, name=f"{acc.name} (achievable)", peaks=peaks,
                               bandwidth=bw)


def derated_accelerator(name, achievable=True, *, weight_format="fp16"):
    """The device at the achievable model's rates for a weight matmul, as an
    `hardware.Accelerator` the roofline functions take: each peak x `matmul_scale` x
    the fraction a tuned matmul reaches in that format (`matmul_fraction`, or the
    Efficiency's own `matmul`), the bandwidth x `bandwidth` (and, for int8/int4
    weight-only `weight_format`, x its `weight_only` factor). Named "<name>
    (achievable)". Attention's rate (`attention`) and the step's overheads are not in
    it: the function `step_s` times a whole step. With `CEILING` the device is the
    datasheet's."""
    return _derate(_hardware.get(name), as_efficiency(achievable), weight_format)


def compute_bound_batch(model, accelerator, dtype="fp16", *, kv_dtype=None,
                        compute_dtype=None, achievable=True) -> float:
    """`llm.compute_bound_batch` on the derated device (`accelerator`): the smallest batch
    at which a decode step's weight matmuls turn compute-bound at the rates a real
    matmul reaches. Sooner than the datasheet's ridge wherever the matmul fraction is
    below the bandwidth fraction x the weight-only factor (peak falls more than
    bandwidth)."""
    acc = _derate(_hardware.get(accelerator), as_efficiency(achievable), dtype)
    return _llm.compute_bound_batch(_spec(model), acc, dtype, kv_dtype=kv_dtype,
                                    compute_dtype=compute_dtype)


# --- one step -----------------------------------------------------------------------------

def _row_kind(name, flops) -> str:
    if name == "attention":
        return "attention"
    if np.all(np.asarray(flops) == 0):
        return "gather"
    return "matmul"


def row_rates(table_rows, accelerator, efficiency, weight_format):
    """(peak FLOP/s, bandwidth bytes/s) each row of an operations table runs at under
    `efficiency`: `table_rows` is [(name, flops, dtype)], generic in the row names."""
    acc = _hardware.get(accelerator)
    bw = _roofline.bandwidth_or_nan(acc) * efficiency.bandwidth
    w = _dtypes.get(weight_format)
    peaks, bws = [], []
    for name, flops, dtype in table_rows:
        kind = _row_kind(name, flops)
        peak = _roofline.peak_or_nan(acc, dtype)
        row_bw = bw
        if kind == "attention":
            if efficiency.attention_dtype is not None and _dtypes.get(dtype).bits < 16:
                # FP8 attention kernels are opt-in (TensorRT-LLM's FP8 context FMHA,
                # FlashAttention-3's fp8 path): engines attend in 16 bits by default.
                peak = _roofline.peak_or_nan(acc, efficiency.attention_dtype)
            peak *= efficiency.attention
        elif kind == "matmul":
            peak *= efficiency.matmul_scale * (efficiency.matmul if efficiency.matmul
                                               is not None else matmul_fraction(acc, dtype))
            if w.quantised and _dtypes.peak_dtype(dtype) != w.peak:  # weight-only
                row_bw = bw * efficiency.weight_only_fraction(w.name)
        peaks.append(peak)
        bws.append(row_bw)
    return np.array(peaks, dtype=float), np.array(bws, dtype=float)


def table_s(table, accelerator, achievable=True, weight_format=None):
    """Each row's seconds of an operations table (`llm.decode_step_breakdown` or
    `forward_step_breakdown`: columns `flops`, `bytes`, `dtype`) on the achievable model,
    as an array; `weight_format`: the weights' format (default the first row's dtype),
    which says whether a matmul is weight-only quantised. No step overheads."""
    eff = as_efficiency(achievable)
    rows = list(zip(table.index, table["flops"], table["dtype"]))
    w = weight_format if weight_format is not None else table["dtype"].iloc[0]
    peaks, bws = row_rates(rows, accelerator, eff, w)
    return _roofline.op_time_s_unchecked(table["flops"].to_numpy(float),
                                         table["bytes"].to_numpy(float), peaks, bws)


def overheads(device_s, n_layers, efficiency, sequences=0):
    """Seconds of a step whose kernels take `device_s` on the device: each of
    n_layers x kernels_per_layer kernels adds `kernel_gap_s`; without CUDA graphs the
    host's launches race the device (chapter 6's overlap model,
    `tabular.overlapped_s`: the slower stream sets the pace, the first launch
    always paid); then `step_s`, and `sequence_s` x `sequences` (the sequences the step
    runs). Vectorised over device_s and sequences."""
    kernels = n_layers * efficiency.kernels_per_layer
    d = np.asarray(device_s, dtype=float) + kernels * efficiency.kernel_gap_s
    if not efficiency.cuda_graphs:
        d = np.asarray(_tabular.overlapped_s(kernels, efficiency.launch_s, d),
                       dtype=float)
    return d + efficiency.step_s + efficiency.sequence_s * np.asarray(sequences, dtype=float)


def as_efficiency(achievable) -> Efficiency:
    """The `Efficiency` an `achievable=` argument names: True, the fitted model
    (`FITTED`); False or None, the ceiling (`CEILING`); an `Efficiency`, itself."""
    if achievable is True:
        return FITTED
    if achievable is False or achievable is None:
        return CEILING
    if isinstance(achievable, Efficiency):
        return achievable
    raise TypeError(f"achievable must be True (the fitted model), False (the ceiling) or "
                    f"an achievable.Efficiency, got {achievable!r}")


def step_breakdown(model, accelerator, new_tokens, context=0, dtype="fp16", *,
                   logits=None, kv_dtype=None, compute_dtype=None, achievable=True):
    """`llm.forward_step_breakdown`'s table with each row timed on the achievable model:
    columns `ceiling_s` (the roofline's) and `seconds` (derated rates). The step's
    overheads are added by the function `step_s`, not in the rows."""
    eff = as_efficiency(achievable)
    m = _spec(model)
    t = _llm.forward_step_breakdown(m, accelerator, new_tokens, context, dtype, logits=logits,
                                    kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    weight, _, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    rows = list(zip(t.index, t["flops"], t["dtype"]))
    peaks, bws = row_rates(rows, accelerator, eff, weight)
    out = t.copy()
    out["ceiling_s"] = t["seconds"]
    out["seconds"] = _roofline.op_time_s_unchecked(t["flops"].to_numpy(float),
                                                   t["bytes"].to_numpy(float), peaks, bws)
    return out


def step_s(model, accelerator, new_tokens, context=0, dtype="fp16", *, logits=None,
           kv_dtype=None, compute_dtype=None, achievable=True) -> float:
    """Seconds of one forward step on the achievable model (`achievable=False`: the
    ceiling, `llm.forward_step_s`): the rows of `step_breakdown` plus `overheads`."""
    eff = as_efficiency(achievable)
    t = step_breakdown(model, accelerator, new_tokens, context, dtype, logits=logits,
                       kv_dtype=kv_dtype, compute_dtype=compute_dtype, achievable=eff)
    return float(overheads(t["seconds"].sum(), _spec(model).n_layers, eff,
                           np.size(new_tokens)))


def decode_step_s(model, accelerator, batch=1, context=0, dtype="fp16", *,
                  kv_dtype=None, compute_dtype=None, achievable=True) -> float:
    """Seconds of one decode step: `batch` sequences at `context` cached tokens each."""
    b = _v.count("batch", batch, maximum=1 << 24)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    return step_s(model, accelerator, np.ones(b, dtype=int), np.full(b, c), dtype,
                  kv_dtype=kv_dtype, compute_dtype=compute_dtype, achievable=achievable)


def decode_tokens_per_s(model, accelerator, batch=1, context=0, dtype="fp16", *,
                        kv_dtype=None, compute_dtype=None, achievable=True) -> float:
    """Decode tokens/s across the batch: batch / `decode_step_s`. With
    `achievable=False` this is `llm.decode_ceiling`."""
    return batch / decode_step_s(model, accelerator, batch, context, dtype,
                                 kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                                 achievable=achievable)


def fraction_of_ceiling(model, accelerator, batch=1, context=0, dtype="fp16", *,
                        kv_dtype=None, compute_dtype=None, achievable=True) -> float:
    """Achievable decode tokens/s over the ceiling's, for a format and device: the
    fraction to apply in place of one number for every format (gpt-fast's 0.68 is bf16's
    on an A100; int8's is lower)."""
    eff = as_efficiency(achievable)
    kw = dict(kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    return (decode_tokens_per_s(model, accelerator, batch, context, dtype, achievable=eff, **kw)
            / decode_tokens_per_s(model, accelerator, batch, context, dtype, achievable=False,
                                  **kw))



# --- decisions: several options, the largest batch within an objective ---------------------

#: What one option of `decode_options` may set: `decode_tokens_per_s`'s parameters.
OPTION_KEYS = ("accelerator", "batch", "context", "dtype", "kv_dtype", "compute_dtype")


def decode_options(model, options, *, accelerator=None, batch=1, context=0, dtype="fp16",
                   kv_dtype=None, compute_dtype=None, baseline=None, achievable=True):
    """The decode speed of several configurations of one model, on the achievable model
    with the ceiling beside: a pandas DataFrame, one row per option, indexed by its label
    (tuple labels give a MultiIndex).

    `options`: {label: {parameter: value}}, each dict setting any of `OPTION_KEYS`
    (accelerator, batch, context, dtype, kv_dtype, compute_dtype) for that option; what
    it leaves out comes from the keyword arguments of the same names. `baseline`: a label
    of `options` to compare every option with. `achievable`: the model the `step_s` and
    `tokens_per_s` columns use (True: `FITTED`; an `Efficiency`; False: the ceiling, so
    that `fraction_of_ceiling` is 1).

    Columns:
      accelerator, batch, context, dtype, kv_dtype, compute_dtype: the option (None:
        the weights' format, as in `decode_tokens_per_s`);
      weight_bytes: the weights it holds in memory, `llm.weight_bytes` (bytes);
      step_s: seconds one decode step takes on the achievable model (`decode_step_s`),
        which is also each sequence's time per output token;
      tokens_per_s: batch / step_s, total over the batch;
      ceiling_tokens_per_s: the same on the roofline (`llm.decode_ceiling`), total;
      fraction_of_ceiling: tokens_per_s / ceiling_tokens_per_s;
      with `baseline`: speedup and ceiling_speedup, the option's tokens_per_s (and
        ceiling_tokens_per_s) over the baseline's.
    """
    import pandas as pd

    eff = as_efficiency(achievable)
    _v.ensure(isinstance(options, dict) and len(options) > 0,
              f"options must be a non-empty dict {{label: {{parameter: value}}}}, got "
              f"{options!r}", TypeError)
    common = dict(accelerator=accelerator, batch=batch, context=context, dtype=dtype,
                  kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    rows = []
    for label, option in options.items():
        _v.ensure(isinstance(option, dict), f"options[{label!r}] must be a dict "
                  f"{{parameter: value}}, got {option!r}", TypeError)
        unknown = sorted(set(option) - set(OPTION_KEYS))
        _v.ensure(not unknown, f"options[{label!r}] sets {unknown}, not a parameter an "
                  f"option may set: {', '.join(OPTION_KEYS)}")
        o = {**common, **option}
        _v.ensure(o["accelerator"] is not None, f"options[{label!r}] has no accelerator: "
                  f"give it in the option or as accelerator=")
        kw = dict(kv_dtype=o["kv_dtype"], compute_dtype=o["compute_dtype"])
        args = (model, o["accelerator"], o["batch"], o["context"], o["dtype"])
        step = decode_step_s(*args, achievable=eff, **kw)
        ceiling = decode_tokens_per_s(*args, achievable=CEILING, **kw)
        rows.append({**o, "weight_bytes": step_model.weight_bytes(_spec(model), o["dtype"]),
                     "step_s": step, "tokens_per_s": o["batch"] / step,
                     "ceiling_tokens_per_s": ceiling,
                     "fraction_of_ceiling": o["batch"] / step / ceiling})
    table = pd.DataFrame(rows, index=pd.Index(list(options)))
    if baseline is not None:
        _v.ensure(baseline in options, f"baseline={baseline!r} is not one of the options: "
                  f"{', '.join(map(repr, options))}")
        for col, out in (("tokens_per_s", "speedup"), ("ceiling_tokens_per_s", "ceiling_speedup")):
            table[out] = table[col] / table.loc[baseline, col]
    return table


def max_batch_within(model, accelerator, context, tpot_s, dtype="fp16", *, kv_dtype=None,
                     compute_dtype=None, reserve_bytes=None, achievable=True) -> int:
    """The largest batch whose decode step (every sequence at `context` cached tokens)
    takes at most `tpot_s` seconds on the achievable model (`decode_step_s`: the time per
    output token an engine would give) and fits in memory (`llm.max_batch`, holding back
    `reserve_bytes`, default `llm.DEFAULT_RESERVE_BYTES`); 0 if not even one sequence
    meets it. `achievable=False` searches
    the ceiling's step instead: `llm.max_batch_within`'s answer, more sequences than an
    engine meets the objective with. Batches above 2**24 are not tried."""
    eff = as_efficiency(achievable)
    limit = _v.positive("tpot_s", tpot_s)
    kw = dict(kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    fits = _llm.max_batch(_spec(model), accelerator, context, dtype, kv_dtype=kv_dtype,
                          reserve_bytes=reserve_bytes)
    if fits < 1:
        return 0

    def meets(b):
        return decode_step_s(model, accelerator, b, context, dtype, achievable=eff, **kw) <= limit

    return _search.largest_meeting(meets, 1, min(fits, 1 << 24))

# Names before the seconds suffix became `_s` everywhere (issue 25).

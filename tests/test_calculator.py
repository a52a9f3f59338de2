"""The website's calculator (_static/calculator.js) against the package, on the whole grid
of models x devices x formats x (batch, context), from the catalogue the build exports.

The calculator rebuilds a decode step in JavaScript from `llm.step_constants`, and times it
on the achievable model from `achievable.FITTED`'s exported constants with the interval of
`validation.interval`; this test runs that file under Node and compares every number with
`gpuinfer.predict.llm`, `gpuinfer.predict.achievable`, `gpuinfer.predict.validation` and `gpuinfer.predict.paged_kv`, so a
change to either side alone fails here (not only in the browser tests of `make site`)."""

import functools
import json
import math
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gpuinfer.predict import achievable, llm, paged_kv, roofline, validation
from gpuinfer import dtypes, hardware
from gpuinfer.hardware import devices
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))
import gpuinfer_site  # noqa: E402

CASES = [(1, 1), (16, 1024), (512, 128), (4096, 32768)]  # (batch, context)

RUNNER = r"""
const calc = require(process.argv[2]);
const cat = JSON.parse(require("fs").readFileSync(process.argv[3], "utf8"));
const cases = JSON.parse(require("fs").readFileSync(process.argv[4], "utf8"));
const out = cases.map(function (c) {
  try {
    const r = calc.compute(cat, c[0], c[1], c[2], c[3], c[4],
                           { kvDtype: c[5], memoryUtilization: c[6] });
    const ops = {};
    Object.keys(r.ops).forEach(function (k) { ops[k] = r.ops[k].seconds; });
    return { ok: true, decode: r.decodeCeiling, step: r.stepS, ops: ops,
             cbb: Number.isFinite(r.computeBoundBatch) ? r.computeBoundBatch : null,
             max: r.maxBatch, wrc: r.weightReadCeiling, weights: r.weightBytes,
             kv: r.kvBytesPerToken, kv_dtype: r.kvDtype,
             ach: r.achievable, ach_step: r.achievableStepS, regime: r.regime,
             ach_low: r.achievableInterval[0], ach_high: r.achievableInterval[1],
             step_low: r.achievableStepInterval[0], step_high: r.achievableStepInterval[1] };
  } catch (e) { return { ok: false, error: e.message }; }
});
process.stdout.write(JSON.stringify(out));
"""


#: The fp8 KV cache and the engines' memory fractions the page offers (None: the whole card).
KV_FP8 = gpuinfer_site.KV_FP8
FRACTIONS = (None, paged_kv.VLLM_GPU_MEMORY_UTILIZATION, paged_kv.ACHIEVABLE_GPU_MEMORY_UTILIZATION)


@pytest.fixture(scope="module")
def run_calculator(tmp_path_factory):
    """Run calculator.js's `compute` under Node on a list of cases (accelerator, model,
    dtype, batch, context[, kv_dtype, memory_utilization]): {case: what the page computes}."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the calculator's JavaScript cannot run here")
    tmp = tmp_path_factory.mktemp("calc")
    (tmp / "cat.json").write_text(json.dumps(gpuinfer_site.catalogue_payload()))
    (tmp / "run.js").write_text(RUNNER)

    def run(cases):
        full = [tuple(c) + (None, None)[len(c) - 5:] for c in cases]
        (tmp / "cases.json").write_text(json.dumps(full))
        done = subprocess.run([node, str(tmp / "run.js"), str(ROOT / "_static" / "calculator.js"),
                               str(tmp / "cat.json"), str(tmp / "cases.json")],
                              capture_output=True, text=True, check=True)
        return dict(zip(cases, json.loads(done.stdout)))
    return run


@pytest.fixture(scope="module")
def results(run_calculator):
    return run_calculator([(a, m, d, b, c) for a in devices.names() for m in architectures.names()
                           for d in dtypes.DTYPES for b, c in CASES])


def test_the_grid_is_whole(results):
    names = {(a, m, d) for a, m, d, _, _ in results}
    assert len(names) == len(devices.names()) * len(architectures.names()) * len(dtypes.DTYPES)


def _step_time_or_nan(model, acc, batch, context, dtype):
    """The package's step time, NaN where it raises MissingPeak (the page shows "no
    peak" there; the Python API refuses)."""
    try:
        return llm.decode_step_s(model, acc, batch, context, dtype)
    except roofline.MissingPeak:
        return np.full(np.shape(batch), math.nan)


def test_every_case_agrees_with_the_package(results):
    checked = 0
    for acc in devices.names():
        for model in architectures.names():
            for dtype in dtypes.DTYPES:
                b = np.array([c[0] for c in CASES])
                c = np.array([c[1] for c in CASES])
                want = np.atleast_1d(_step_time_or_nan(model, acc, b, c, dtype))
                for (batch, context), t in zip(CASES, want):
                    got = results[(acc, model, dtype, batch, context)]
                    if math.isnan(t):  # no peak for the compute format: the page says so
                        assert not got["ok"] and "no" in got["error"], (acc, model, dtype, got)
                        continue
                    assert got["ok"], (acc, model, dtype, got)
                    assert got["step"] == pytest.approx(t, rel=1e-12), (acc, model, dtype, batch, context)
                    assert got["decode"] == pytest.approx(batch / t, rel=1e-12)
                    assert got["max"] == llm.max_batch(model, acc, context, dtype)
                    assert got["weights"] == step_model.weight_bytes(model, dtype)
                    # Weights only: batch x bandwidth / the weights a step of this batch
                    # reads (an MoE model's touched experts grow with the batch).
                    assert got["wrc"] == pytest.approx(
                        llm.weight_read_ceiling(model, acc, batch, dtype), rel=1e-12)
                    cbb = llm.compute_bound_batch(model, acc, dtype)
                    assert (got["cbb"] if got["cbb"] is not None else math.inf) == cbb
                    checked += 1
    assert checked > 1000


@pytest.mark.parametrize("acc, model, dtype, batch, context", [
    ("T4", "llama-2-7b", "fp16", 1, 1),
    ("A100 80GB", "llama-3-8b", "int4", 512, 128),
    ("H200", "llama-3-70b", "fp8_e4m3", 16, 1024),
    ("H100 SXM", "mistral-7b", "nvfp4", 4096, 32768),
    # Mixtures of experts: the router, shared-expert and expert rows.
    ("H200", "deepseek-v3", "fp8_e4m3", 16, 1024),
    ("H100 SXM", "qwen3-30b-a3b", "bf16", 512, 128),
    ("A100 80GB", "gpt-oss-20b", "bf16", 1, 1),
    ("H100 SXM", "llama-4-maverick", "int4", 4096, 32768),
])
def test_each_operation_agrees(results, acc, model, dtype, batch, context):
    got = results[(acc, model, dtype, batch, context)]
    want = llm.decode_step_breakdown(model, acc, batch, context, dtype)["seconds"]
    assert list(got["ops"]) == list(step_model.operations(model)) == list(want.index)
    for op in step_model.operations(model):
        assert got["ops"][op] == pytest.approx(want[op], rel=1e-12), op


def test_the_grid_covers_the_mixtures_of_experts(results):
    moe = [m for m in architectures.names() if architectures.get(m).is_moe]
    assert {"mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b",
            "llama-4-maverick"} <= set(moe)
    for model in moe:
        got = results[("H100 SXM", model, "bf16", 16, 1024)]
        assert "experts" in got["ops"] and got["cbb"] == llm.compute_bound_batch(
            model, "H100 SXM", "bf16")


def test_the_pages_numbers_are_the_packages():
    """appendix/calculator.md states a few numbers in its prose (a page without a kernel
    cannot glue them): each is computed here and must appear as the page rounds it."""
    page = (ROOT / "appendix" / "calculator.md").read_text()
    text = " ".join(page.split())
    for gpu in ("T4", "A100 80GB", "H100 SXM"):  # "on any of these GPUs"
        short, long_ = (llm.decode_ceiling("llama-2-7b", gpu, 1, c, "fp16")
                        / llm.weight_read_ceiling("llama-2-7b", gpu, 1, "fp16")
                        for c in (1024, 32768))
        assert f"{short:.2f} of the weight-read ceiling at 1,024 tokens" in text
        assert f"is {long_:.2f} of the weight-read ceiling" in text
    assert f"\\approx {2 / dtypes.bytes_per_element('int4'):.1f}$ times that on int4" in text
    read = step_model.step_weight_bytes("mixtral-8x7b", "bf16", 1) / 1e9
    held = step_model.weight_bytes("mixtral-8x7b", "bf16") / 1e9
    assert f"{read:.1f} GB of the {held:.1f} GB it holds" in text
    # The engines' memory fractions and the interval's coverage, as the page words them.
    assert (f"{paged_kv.VLLM_GPU_MEMORY_UTILIZATION} by default in current releases, "
            f"{paged_kv.ACHIEVABLE_GPU_MEMORY_UTILIZATION} before") in text
    coverage = gpuinfer_site.catalogue_payload()["achievable"]["coverage"]
    assert f"the central {100 * coverage:.0f}% of measured / predicted" in text
    # "for mixtures of experts the range sits well below the prediction"
    assert "the range sits well below the prediction" in text
    assert validation.interval(1.0, "moe throughput")[1] < 1
    # "an fp8 KV cache halves s_kv against fp16"
    assert (step_model.kv_cache_bytes_per_token("llama-2-7b", KV_FP8)
            == step_model.kv_cache_bytes_per_token("llama-2-7b", "fp16") / 2)


# --- the second number: the achievable model and its interval -------------------------------

#: The package's achievable step takes ~2 ms a call (a pandas table), so the whole grid
#: would take a minute: every model x format x (batch, context) on these GPUs, and every
#: device x format at one throughput case on a dense model and a mixture of experts (the
#: GPU sets the matmul fraction a peak, the format the weight-only factor).
ACHIEVABLE_GPUS = ("T4", "H100 SXM")
ACHIEVABLE_CASE = (16, 1024)
ACHIEVABLE_MODELS = ("llama-2-7b", "mixtral-8x7b")


@functools.lru_cache(maxsize=None)
def _ratios(regime, per):
    """validation.interval of 1: the ratios an interval multiplies a value by."""
    return validation.interval(1.0, regime, per=per)


def _regime(model, batch):
    """validation.INTERVAL_REGIMES for a decode step on one GPU: batch 1, else dense or
    mixture-of-experts throughput."""
    return "batch-1" if batch == 1 else ("moe throughput" if architectures.get(model).is_moe
                                         else "dense throughput")


def _check_achievable(got, model, acc, dtype, batch, context, kv_dtype=None):
    """The page's achievable step, rate and intervals against the package's. The
    interval of a value x is x times (rate) or over (cost) the regime's quantiles, so
    `validation.interval(x)` is x x `validation.interval(1)` (a test below calls it on x)."""
    step = achievable.decode_step_s(model, acc, batch, context, dtype, kv_dtype=kv_dtype)
    assert got["ach_step"] == pytest.approx(step, rel=1e-12), (acc, model, dtype, batch, context)
    assert got["ach"] == pytest.approx(batch / step, rel=1e-12)
    assert got["regime"] == _regime(model, batch)
    low, high = _ratios(got["regime"], "rate")
    assert (got["ach_low"], got["ach_high"]) == pytest.approx((low * batch / step,
                                                               high * batch / step), rel=1e-12)
    low, high = _ratios(got["regime"], "cost")
    assert (got["step_low"], got["step_high"]) == pytest.approx((low * step, high * step),
                                                                rel=1e-12)


def test_the_achievable_number_and_its_interval_agree_with_the_package(results):
    checked = 0
    for (acc, model, dtype, batch, context), got in results.items():
        if not (acc in ACHIEVABLE_GPUS or ((batch, context) == ACHIEVABLE_CASE
                                           and model in ACHIEVABLE_MODELS)):
            continue
        if not got["ok"]:  # no peak for the compute format: the ceiling's test covers it
            continue
        _check_achievable(got, model, acc, dtype, batch, context)
        assert got["ach"] < got["decode"]  # below the ceiling: every efficiency <= 1, overheads > 0
        checked += 1
    assert checked > 1000
    # validation.interval itself, on values (not 1), in each regime the page uses
    for case in [("T4", "llama-2-7b", "int4", 1, 1), ("H100 SXM", "llama-2-7b", "fp8_e4m3", 512, 128),
                 ("H100 SXM", "mixtral-8x7b", "bf16", 16, 1024)]:
        got = results[case]
        want = validation.interval(got["ach"], got["regime"], per="rate")
        assert (got["ach_low"], got["ach_high"]) == pytest.approx(want, rel=1e-12)
        want = validation.interval(got["ach_step"], got["regime"], per="cost")
        assert (got["step_low"], got["step_high"]) == pytest.approx(want, rel=1e-12)


def test_the_achievable_step_by_hand(run_calculator):
    """Llama-2-7B in fp16 on a T4, batch 1, 1,024 tokens of context. Every row is
    memory-bound (the linear matmuls: 12.95 GFLOP at 65e12 x 0.70 x 0.645 = 29.3 TFLOP/s
    take 0.44 ms, their bytes 47.6 ms), so the step is its bytes at 0.85 x 320 GB/s =
    272 GB/s (`FITTED.bandwidth`):
      embedding     4,096 x (2 + 2)                            =         16,384 B
      linear        12,952,010,752 weights + 4,210,688 act      = 12,956,221,440 B
      attention     (1,024 + 1) x 524,288 KV + 1,048,576 act    =    538,443,776 B
      lm_head       262,144,000 weights + 72,192 act            =    262,216,192 B
      total                                                       13,756,897,792 B
    13,756,897,792 / 272e9 = 50.5768 ms, plus 32 layers x 13 kernels x 0.5 us = 0.208 ms of
    gaps and 1.6 ms a step: 52.3848 ms, 19.09 tokens/s. Batch 1 is the "batch-1" regime."""
    got = run_calculator([("T4", "llama-2-7b", "fp16", 1, 1024)])[("T4", "llama-2-7b", "fp16", 1, 1024)]
    fit = achievable.FITTED    # 0.85, 13 kernels x 0.5 us and 1.6 ms: FITTED's constants
    step = (13_756_897_792 / (fit.bandwidth * 320e9)
            + 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s)
    assert got["ach_step"] == pytest.approx(step, rel=1e-12)
    assert got["ach"] == pytest.approx(1 / step, rel=1e-12)         # 19.09 tokens/s
    assert got["regime"] == "batch-1"
    # The interval multiplies the rate by the regime's quantiles of measured / predicted,
    # and divides the step's seconds by them (the high rate is the short step).
    lo, hi = validation.interval(1.0, "batch-1")
    assert (got["ach_low"], got["ach_high"]) == pytest.approx((lo / step, hi / step), rel=1e-12)
    assert (got["step_low"], got["step_high"]) == pytest.approx((step / hi, step / lo), rel=1e-12)


def test_the_regime_follows_the_batch_and_the_model(results):
    assert results[("H100 SXM", "llama-3-8b", "fp16", 1, 1)]["regime"] == "batch-1"
    assert results[("H100 SXM", "llama-3-8b", "fp16", 16, 1024)]["regime"] == "dense throughput"
    assert results[("H100 SXM", "mixtral-8x7b", "bf16", 16, 1024)]["regime"] == "moe throughput"
    assert results[("H100 SXM", "mixtral-8x7b", "bf16", 1, 1)]["regime"] == "batch-1"


# --- the fp8 KV cache and the engines' memory fraction ---------------------------------------

OPTION_CASES = [(16, 1024), (4096, 32768)]


@pytest.fixture(scope="module")
def option_results(run_calculator):
    """The grid with an fp8 KV cache under each memory fraction, and with the activations'
    KV cache under the engines' fractions."""
    options = [(KV_FP8, u) for u in FRACTIONS] + [(None, u) for u in FRACTIONS[1:]]
    return run_calculator([(a, m, d, b, c, kv, u) for a in devices.names()
                           for m in architectures.names() for d in dtypes.DTYPES for b, c in OPTION_CASES
                           for kv, u in options])


def _max_batch(model, acc, context, dtype, kv_dtype, u):
    """The package's largest batch: `llm.max_batch` on the whole card; under an engine's
    fraction u, `paged_kv.kv_sequences` with one-token blocks (u x memory - weights -
    reserve for the cache, no rounding up to blocks: what the page counts)."""
    if u is None:
        return llm.max_batch(model, acc, context, dtype, kv_dtype=kv_dtype)
    return paged_kv.kv_sequences(model, acc, context, dtype=dtype, kv_dtype=kv_dtype,
                                 block_size=1, gpu_memory_utilization=u)


def test_the_fp8_kv_cache_and_the_memory_fraction_agree_with_the_package(option_results):
    checked = 0
    for acc in devices.names():
        for model in architectures.names():
            for dtype in dtypes.DTYPES:
                b = np.array([c[0] for c in OPTION_CASES])
                c = np.array([c[1] for c in OPTION_CASES])
                try:
                    want = np.atleast_1d(llm.decode_step_s(model, acc, b, c, dtype,
                                                           kv_dtype=KV_FP8))
                except roofline.MissingPeak:
                    want = np.full(len(OPTION_CASES), math.nan)
                for (batch, context), t in zip(OPTION_CASES, want):
                    for u in FRACTIONS:
                        got = option_results[(acc, model, dtype, batch, context, KV_FP8, u)]
                        if math.isnan(t):
                            assert not got["ok"], (acc, model, dtype)
                            continue
                        assert got["ok"], (acc, model, dtype, got)
                        assert got["kv_dtype"] == KV_FP8
                        assert got["kv"] == step_model.kv_cache_bytes_per_token(model, KV_FP8)
                        assert got["step"] == pytest.approx(t, rel=1e-12)
                        assert got["max"] == _max_batch(model, acc, context, dtype, KV_FP8, u)
                        checked += 1
                    for u in FRACTIONS[1:]:
                        got = option_results[(acc, model, dtype, batch, context, None, u)]
                        if got["ok"]:
                            assert got["max"] == _max_batch(model, acc, context, dtype, None, u)
    assert checked > 10000


def test_the_achievable_number_with_an_fp8_kv_cache(option_results):
    for acc in ACHIEVABLE_GPUS:
        for model in architectures.names():
            for dtype in ("fp16", "int4"):
                for batch, context in OPTION_CASES:
                    got = option_results[(acc, model, dtype, batch, context, KV_FP8, None)]
                    if got["ok"]:
                        _check_achievable(got, model, acc, dtype, batch, context, KV_FP8)


def test_the_largest_batch_by_hand(run_calculator):
    """Llama-2-7B, fp16 weights (13,476,831,232 B), the 1 GiB reserve (1,073,741,824 B).
    KV cache a token: 2 x 32 layers x 4,096 x 2 B = 524,288 B in fp16, 262,144 B in fp8.

    A100 80GB (85,100,068,864 B), 4,096 tokens a sequence:
      whole card, fp16 KV: (85,100,068,864 - 1,073,741,824 - 13,476,831,232)
                           / (4,096 x 524,288) = 70,549,495,808 / 2,147,483,648 = 32.9 -> 32
      vLLM's 0.92, fp8 KV: (0.92 x 85,100,068,864 - 13,476,831,232 - 1,073,741,824)
                           / (4,096 x 262,144) = 63,741,490,298.9 / 1,073,741,824 = 59.4 -> 59
    T4 (15,843,721,216 B), 1,024 tokens: the whole card leaves 1,293,148,160 B, 2 sequences
    in fp16 (536,870,912 B each) and 4 in fp8 (268,435,456 B); 0.92 of the card leaves
    0.92 x 15,843,721,216 - 13,476,831,232 - 1,073,741,824 = 25,650,462.7 B, not one."""
    cases = [("A100 80GB", "llama-2-7b", "fp16", 1, 4096, None, None),
             ("A100 80GB", "llama-2-7b", "fp16", 1, 4096, KV_FP8, 0.92),
             ("T4", "llama-2-7b", "fp16", 1, 1024, None, None),
             ("T4", "llama-2-7b", "fp16", 1, 1024, KV_FP8, None),
             ("T4", "llama-2-7b", "fp16", 1, 1024, KV_FP8, 0.92)]
    got = run_calculator(cases)
    assert [got[c]["max"] for c in cases] == [32, 59, 2, 4, 0]
    assert hardware.get("A100 80GB").memory_bytes == 85_100_068_864
    assert hardware.get("T4").memory_bytes == 15_843_721_216
    assert paged_kv.VLLM_GPU_MEMORY_UTILIZATION == 0.92


def test_bad_options_are_refused_with_a_reason(run_calculator):
    cases = [("T4", "llama-2-7b", "fp16", 1, 1024, "int3", None),
             ("T4", "llama-2-7b", "fp16", 1, 1024, None, 1.5),
             ("T4", "llama-2-7b", "fp16", 1, 1024, None, 0)]
    got = run_calculator(cases)
    assert not got[cases[0]]["ok"] and "KV cache" in got[cases[0]]["error"]
    assert "int3" in got[cases[0]]["error"]
    for c in cases[1:]:
        assert not got[c]["ok"] and "fraction in (0, 1]" in got[c]["error"], got[c]

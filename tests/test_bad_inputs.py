"""Each defect the bad-input sweep (tests/bad_input_sweep.py, issue 25) found in these
modules, as a fast check: the call and the error it must now give (type and the words
naming the parameter). Before the fix each of these hung, or returned NaN, inf, a
negative number or nothing at all."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from gpuinfer.predict import batching, expert_parallel, llm, llm_serving, parallel, roofline
from gpuinfer.measure import bench, decoding, lab_measurements, quant
from gpuinfer import dtypes, validate
from gpuinfer.course import exercises, plots
from gpuinfer.measure import environment

NAN, INF = math.nan, math.inf
SERVICE = batching.service_table([1, 8, 32], [0.01, 0.012, 0.02])


def _trace():
    return batching.simulate(batching.poisson_arrivals(50, 200), SERVICE, 8, 0.005)


def _tiny_stack():
    spec = decoding.lab_model("mistral-7b", "cpu", weight_budget_bytes=2e6)
    return decoding.DecodeStack(spec, "fp32", "cpu")


CASES = [
    # batching.capacity with a huge max_batch simulated 200 full batches of a million
    # requests at every rate: it did not return. Now refused at once.
    (lambda: batching.capacity(lambda b: 0.01 + 1e-5 * b, 1 << 20, slo_s=1.0),
     ValueError, r"max_batch must be a whole number >= 1 and <= 4,096"),
    # summarize took NaN or negative latencies and reported NaN/negative percentiles.
    (lambda: batching.summarize(_trace().assign(latency=NAN)), ValueError, r"df\['latency'\]"),
    (lambda: batching.summarize(_trace().assign(latency=-1.0)), ValueError, r"df\['latency'\]"),
    (lambda: batching.summarize(_trace().assign(start=-5.0)), ValueError, r"df\['start'\]"),
    # A device without a peak for the compute format: NaN (or inf) before.
    (lambda: llm.decode_step_s("llama-3-8b", "T4", dtype="bf16"), roofline.MissingPeak,
     r"T4 has no bf16 peak"),
    (lambda: llm.decode_step_s("llama-3-8b", "T4", compute_dtype="int4"),
     roofline.MissingPeak, r"T4 has no int4 peak"),
    (lambda: llm.compute_bound_batch("llama-3-8b", "T4", "bf16"), roofline.MissingPeak,
     r"T4 has no bf16 peak"),
    (lambda: llm.mfu("llama-3-8b", "T4", 50, dtype="bf16"), roofline.MissingPeak, "T4"),
    (lambda: roofline.evaluate({"a": {"flops": 1.0, "bytes": 1.0, "dtype": "bf16"}}, "T4"),
     roofline.MissingPeak, "T4 has no bf16 peak"),
    # A plot on log axes accepted a negative FLOP/s, seconds or bandwidth.
    (lambda: roofline.plot("A100 80GB", points=[{"intensity": 10.0, "flops": -1e12}]),
     ValueError, r"points\[0\]\['flops'\]"),
    (lambda: roofline.plot("A100 80GB", points={"a": NAN}), ValueError, r"\['intensity'\]"),
    (lambda: plots.step_time_vs_batch([{"batch": 1, "seconds": -0.01}]), ValueError,
     r"rows\['seconds'\]"),
    (lambda: plots.bandwidth_vs_size([{"bytes": 1e6, "achieved_gb_per_s": -5.0}]),
     ValueError, r"rows\['achieved_gb_per_s'\]"),
    (lambda: plots.step_time_vs_batch([{"batch": 1, "seconds": 0.01}], floor_s="x"),
     TypeError, "floor_s"),
    (lambda: plots.step_time_vs_batch(None), TypeError, "rows"),
    # quant.pack_int4 on an odd count: the message now names q.
    (lambda: quant.pack_int4([1, 2, 3]), ValueError, r"q must have an even last dimension"),
    # DecodeStack.kv_cache_bytes(-1, ...) returned a negative byte count.
    (lambda: _tiny_stack().kv_cache_bytes(-1, 16), ValueError, "batch"),
    (lambda: _tiny_stack().kv_cache_bytes(2, 2.5), ValueError, "context"),
    (lambda: _tiny_stack().step_flops(2, -1), ValueError, "context"),
    # measured_roofline with negative FLOPs gave a negative peak and ridge.
    (lambda: lab_measurements.measured_roofline([{"flops": -1e9, "bytes": 1e6,
                                                  "seconds": 1e-3}]),
     ValueError, r"rows\['flops'\]"),
    (lambda: lab_measurements.measured_roofline([{"flops": 1e9, "bytes": NAN, "seconds": 1e-3}]),
     ValueError, r"rows\['bytes'\]"),
    # timing and clock helpers returned NaN for impossible inputs.
    (lambda: bench.timing_estimate_s(-1, 0.05), ValueError, "call_s"),
    (lambda: bench.timing_estimate_s(INF, 0.05), ValueError, "call_s"),
    (lambda: bench.timing_estimate_s(1e-3, 0.05, warmup=INF), ValueError, "warmup"),
    (lambda: environment.clock_scaled_peak(-1, {}), ValueError, "peak_flops"),
    (lambda: environment.clock_scaled_peak(None, {}), TypeError, "peak_flops"),
    # decoding.sweep_estimate_s turned every bad size or format into NaN.
    (lambda: decoding.sweep_estimate_s("llama-3-8b", "A100 80GB", [1, -1], 128, "fp16",
                                       "fp16", min_run_s=0.05), ValueError, "batch"),
    (lambda: decoding.sweep_estimate_s("llama-3-8b", "A100 80GB", [1], 2.5, "fp16", "fp16",
                                       min_run_s=0.05), ValueError, "context"),
    # dtypes.formats named `dtype` for a bad kv_dtype or compute_dtype.
    (lambda: dtypes.formats("int4", "nope"), validate.UnknownName, "kv_dtype='nope'"),
    (lambda: dtypes.formats("int4", None, 3), TypeError, "compute_dtype"),
    # The decisions moved into the package (issue 25's last round): lists of options are
    # checked item by item, naming the item; a TP degree is named as the caller's `tp`.
    (lambda: validate.each("degrees", None, validate.count), TypeError, "degrees must be"),
    (lambda: validate.each("degrees", [1, -1], validate.count), ValueError, r"degrees\[1\]"),
    (lambda: parallel.tp_options("llama-2-70b", options=None, prices={"H200": 5.0},
                                 context=1024, tpot_s=0.03),
     TypeError, "options must be a non-empty"),
    (lambda: parallel.tp_options("llama-2-70b", options=[4, 3], prices={"H200": 5.0},
                                 context=1024, tpot_s=0.03),
     ValueError, "devices do not divide"),
    (lambda: expert_parallel.moe_options("qwen3-30b-a3b", options=None,
                                         prices={"H100 SXM": 4.0}, context=1024, tpot_s=0.03,
                                         n_devices=8), TypeError, "options must be"),
    (lambda: expert_parallel.moe_options("qwen3-30b-a3b", prices={"H100 SXM": 4.0},
                                         context=1024, tpot_s=0.03, n_devices=8, formats=[3]), TypeError, r"formats\[0\]"),
    (lambda: expert_parallel.moe_max_batch_within("qwen3-30b-a3b", "H100 SXM", 8, 0, None, achievable=False),
     ValueError, "context=0 with tpot_s=None"),
    (lambda: llm_serving.chunk_step_s("llama-3-8b", "H100 SXM", 512, decodes=32,
                                      decode_context=2048, prompt_tokens=4096, n_devices=0),
     ValueError, "n_devices must be"),
    # A duplicate exercise name is refused when register is called, not only on use.
    (lambda: exercises.register(exercises.names()[0], question="q", unit="u", hint="h",
                                where="w"), ValueError, "registered already"),
]


@pytest.mark.parametrize("call, error, words", CASES)
def test_a_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_documented_nan_stays_nan():
    # NaN in means "unknown" where the docstring says so, and gives NaN out, not an error.
    assert math.isnan(roofline.op_time_s(1e9, 1e6, NAN, 1e11))
    assert math.isnan(bench.timing_estimate_s(NAN, 0.05))
    assert math.isnan(environment.clock_scaled_peak(1e12, {}))
    t4 = roofline.evaluate({"a": {"flops": 1.0, "bytes": 1.0, "dtype": "bf16"}}, "T4",
                           missing="nan")
    assert np.isnan(t4.loc["a", "seconds"]) and t4.loc["a", "bound"] == "unknown"
    # A measured row without a time (a shape that did not run) is skipped, not refused:
    # peak 1e9 FLOP / 1e-3 s = 1e12 FLOP/s, bandwidth 1e6 B / 1e-3 s = 1e9 B/s, ridge 1000.
    got = lab_measurements.measured_roofline(pd.DataFrame(
        [{"flops": 1e9, "bytes": 1e6, "seconds": 1e-3},
         {"flops": 1e9, "bytes": 1e6, "seconds": NAN}]))
    assert got == {"peak_flops": 1e12, "bandwidth": 1e9, "ridge": 1000.0}


def test_checked_keeps_the_body_the_formula():
    # The decorator checks the arguments; the body a page prints holds no check.
    import inspect

    body = inspect.getsource(roofline.op_time_s.__wrapped__)
    assert "_v." not in body.split('"""')[-1]
    with pytest.raises(ValueError, match="flops must be a finite number >= 0"):
        roofline.op_time_s(-1.0, 1.0, 1e12, 1e11)
    with pytest.raises(TypeError, match=r"op_time_s\(\): missing a required argument"):
        roofline.op_time_s(1.0, 1.0, 1e12)
    # max(1e6 B / 1e11 B/s, 1e9 FLOP / 1e12 FLOP/s) = max(1e-5, 1e-3) = 1e-3 s
    assert roofline.op_time_s(1e9, 1e6, 1e12, 1e11) == pytest.approx(1e-3)
    assert isinstance(roofline.op_time_s(1e9, 1e6, 1e12, 1e11), float)

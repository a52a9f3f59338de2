"""The website's calculator (_static/calculator.js) against the package, on the whole grid
of models x devices x formats x (batch, context), from the catalogue the build exports.

The calculator rebuilds a decode step in JavaScript from `llm.step_constants`; this test
runs that file under Node and compares every number with `gpuinfer.llm`, so a change to
either side alone fails here (not only in the browser tests of `make site`)."""

import json
import math
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from gpuinfer import dtypes, hardware, llm, roofline

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
    const r = calc.compute(cat, c[0], c[1], c[2], c[3], c[4]);
    const ops = {};
    Object.keys(r.ops).forEach(function (k) { ops[k] = r.ops[k].seconds; });
    return { ok: true, decode: r.decodeCeiling, step: r.stepS, ops: ops,
             cbb: Number.isFinite(r.computeBoundBatch) ? r.computeBoundBatch : null,
             max: r.maxBatch, wrc: r.weightReadCeiling, weights: r.weightBytes };
  } catch (e) { return { ok: false, error: e.message }; }
});
process.stdout.write(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the calculator's JavaScript cannot run here")
    tmp = tmp_path_factory.mktemp("calc")
    payload = gpuinfer_site.catalogue_payload()
    cases = [(a["name"], m["name"], d, b, c) for a in payload["accelerators"]
             for m in payload["models"] for d in payload["dtypes"] for b, c in CASES]
    (tmp / "cat.json").write_text(json.dumps(payload))
    (tmp / "cases.json").write_text(json.dumps(cases))
    (tmp / "run.js").write_text(RUNNER)
    done = subprocess.run([node, str(tmp / "run.js"), str(ROOT / "_static" / "calculator.js"),
                           str(tmp / "cat.json"), str(tmp / "cases.json")],
                          capture_output=True, text=True, check=True)
    return dict(zip(cases, json.loads(done.stdout)))


def test_the_grid_is_whole(results):
    names = {(a, m, d) for a, m, d, _, _ in results}
    assert len(names) == len(hardware.names()) * len(llm.names()) * len(dtypes.DTYPES)


def _step_time_or_nan(model, acc, batch, context, dtype):
    """The package's step time, NaN where it raises MissingPeak (the page shows "no
    peak" there; the Python API refuses)."""
    try:
        return llm.decode_step_s(model, acc, batch, context, dtype)
    except roofline.MissingPeak:
        return np.full(np.shape(batch), math.nan)


def test_every_case_agrees_with_the_package(results):
    checked = 0
    for acc in hardware.names():
        for model in llm.names():
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
                    assert got["weights"] == llm.weight_bytes(model, dtype)
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
    assert list(got["ops"]) == list(llm.operations(model)) == list(want.index)
    for op in llm.operations(model):
        assert got["ops"][op] == pytest.approx(want[op], rel=1e-12), op


def test_the_grid_covers_the_mixtures_of_experts(results):
    moe = [m for m in llm.names() if llm.get(m).is_moe]
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
    read = llm.step_weight_bytes("mixtral-8x7b", "bf16", 1) / 1e9
    held = llm.weight_bytes("mixtral-8x7b", "bf16") / 1e9
    assert f"{read:.1f} GB of the {held:.1f} GB it holds" in text

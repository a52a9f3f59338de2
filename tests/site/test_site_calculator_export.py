"""The calculator's catalogue is exported from the package at build time
(_ext/gpuinfer_site.py), never copied by hand."""

import json
import math
import sys

import pytest

import sitecheck
from gpuinfer import dtypes, hardware
from gpuinfer.predict import llm
from gpuinfer.hardware import devices
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model

sys.path.insert(0, str(sitecheck.ROOT / "_ext"))
import gpuinfer_site  # noqa: E402


@pytest.fixture(scope="module")
def payload():
    return gpuinfer_site.catalogue_payload()


def test_export_holds_every_device_model_and_dtype(payload):
    assert [a["name"] for a in payload["accelerators"]] == devices.names()
    assert [m["name"] for m in payload["models"]] == architectures.names()
    assert list(payload["dtypes"]) == list(dtypes.DTYPES)


def test_export_numbers_are_the_packages(payload):
    t4 = next(a for a in payload["accelerators"] if a["name"] == "T4")
    assert t4["bandwidth_bytes_per_s"] == 320e9
    assert t4["memory_bytes"] == hardware.get("T4").memory_bytes
    assert "bf16" not in t4["peak_flops"] and t4["peak_flops"]["fp16"] == 65e12  # no bf16 on a T4
    m = next(m for m in payload["models"] if m["name"] == "llama-2-7b")
    assert m["n_params"] == 6_738_415_616
    assert m["kv_cache_bytes_per_token"]["fp16"] == 524_288  # 2 x 32 x 32 x 128 x 2 bytes
    assert m["step"]["fp16"] == step_model.step_constants("llama-2-7b", "fp16")
    # 2 FLOPs per matmul weight per token; 4 x 32 layers x 4096 per (query, key) pair.
    assert m["step"]["fp16"]["linear_flops_per_token"] == 2 * 6_476_005_376
    assert m["step"]["fp16"]["attn_flops_per_pair"] == 4 * 32 * 4096
    assert payload["reserve_bytes"] == llm.DEFAULT_RESERVE_BYTES
    assert payload["operations"] == list(step_model.OPERATIONS)
    assert m["operations"] == list(step_model.OPERATIONS)


def test_export_carries_the_mixtures_of_experts(payload):
    m = next(m for m in payload["models"] if m["name"] == "deepseek-v3")
    assert m["operations"] == ["embedding", "linear", "attention", "router", "shared_experts",
                               "experts", "lm_head"]
    assert m["n_experts"] == 256 and m["experts_per_token"] == 8
    assert m["n_active_params"] == architectures.get("deepseek-v3").n_active_params
    # one expert in each of the 58 MoE layers, fp16: 58 x 3 x 7168 x 2048 x 2 bytes
    assert m["step"]["fp16"]["expert_bytes"] == 58 * 3 * 7168 * 2048 * 2
    assert m["kv_cache_bytes_per_token"]["bf16"] == 61 * (512 + 64) * 2  # MLA's latent


def test_quantised_formats_are_weight_only(payload):
    for name in ("int8", "int4", "fp8_e4m3", "nvfp4"):
        assert payload["dtypes"][name]["kv_dtype"] == "fp16"
        assert payload["dtypes"][name]["compute_dtype"] == "fp16"
    assert payload["dtypes"]["int4"]["bytes_per_element"] == 0.5625  # an fp16 scale per 32
    assert payload["dtypes"]["bf16"] == {"bytes_per_element": 2.0, "kv_dtype": "bf16",
                                         "compute_dtype": "bf16", "peak": "bf16"}


def test_written_script_and_json_hold_the_same_data(tmp_path, payload):
    script = gpuinfer_site.write_catalogue(tmp_path)
    text = script.read_text()
    prefix = f"window.{gpuinfer_site.GLOBAL_NAME} = "
    body = text[text.index(prefix) + len(prefix):].rstrip().removesuffix(";")
    assert json.loads(body) == payload
    assert json.loads((tmp_path / "_static" / "gpuinfer-catalogue.json").read_text()) == payload
    assert "NaN" not in text and "Infinity" not in text
    assert all(math.isfinite(a["bandwidth_bytes_per_s"]) for a in payload["accelerators"])


@pytest.mark.site
def test_built_site_carries_the_current_catalogue(site_dir, payload):
    built = json.loads((site_dir / "_static" / "gpuinfer-catalogue.json").read_text())
    assert built == payload, "the site's catalogue is stale: rebuild with `make book`"
    assert (site_dir / "_static" / "calculator.js").exists()

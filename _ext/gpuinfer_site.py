"""Sphinx extension: export the package's catalogues for the calculator page.

Appendix: *Calculator*. At the end of every HTML build it writes
`_static/gpuinfer-catalogue.js` (and the same data as `_static/gpuinfer-catalogue.json`)
from `gpuinfer.hardware.catalogue()` and `gpuinfer.llm.catalogue()`: one source of truth,
never a hand copy. Units are SI: bytes, bytes/s, FLOP/s, FLOP.

The browser needs only what the roofline of a decode step uses (`gpuinfer.llm`):
weight bytes = parameters x bytes per element; step bytes = weights + batch x context x
KV bytes per token; step FLOPs = batch x (FLOPs per sequence + FLOPs per context token x
context). The per-model FLOP terms are *measured* from `llm.decode_step_flops`, and the
export refuses to write them if that function stops being linear in the context.
"""

from __future__ import annotations

import json
import math
import pathlib

GLOBAL_NAME = "GPUINFER_CATALOGUE"
FILENAME = "gpuinfer-catalogue"


def _clean(value):
    """JSON has no NaN: missing numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return _clean(value.item())
    return value


def catalogue_payload() -> dict:
    """The calculator's data, computed by the package: dtypes, accelerators, models."""
    import gpuinfer
    from gpuinfer import dtypes, hardware, llm

    formats = {}
    for name in dtypes.DTYPES:
        weight, kv, compute = llm._formats(name, None, None)
        formats[name] = {"bytes_per_element": dtypes.bytes_per_element(weight),
                         "kv_dtype": kv, "compute_dtype": compute}

    accelerators = []
    for row in hardware.catalogue().to_dict("records"):
        peaks = {k.removeprefix("peak_").removesuffix("_flops"): _clean(v)
                 for k, v in row.items() if k.startswith("peak_")}
        accelerators.append({
            "name": row["name"], "kind": row["kind"],
            "memory_bytes": _clean(row["memory_bytes"]),
            "bandwidth_bytes_per_s": _clean(row["bandwidth_bytes_per_s"]),
            "peak_flops": {k: v for k, v in peaks.items() if v is not None},
            "source": row["source"], "note": row["note"]})

    models = []
    for row in llm.catalogue().to_dict("records"):
        name = row["name"]
        f0 = llm.decode_step_flops(name, batch=1, context=0)
        f1 = llm.decode_step_flops(name, batch=1, context=1) - f0
        for context in (2, 4096):
            if llm.decode_step_flops(name, batch=1, context=context) != f0 + f1 * context:
                raise ValueError(f"llm.decode_step_flops({name!r}) is no longer linear in the "
                                 "context; the calculator's export must change with it")
        models.append({
            "name": name, "n_params": int(row["n_params"]),
            "attention": row["attention"], "n_layers": int(row["n_layers"]),
            "n_heads": int(row["n_heads"]), "n_kv_heads": int(row["n_kv_heads"]),
            "kv_cache_bytes_per_token": {d: llm.kv_cache_bytes_per_token(name, d)
                                         for d in dtypes.DTYPES},
            "flops_per_sequence": f0, "flops_per_context_token": f1,
            "source": row["source"]})

    return {"version": gpuinfer.__version__, "dtypes": formats,
            "accelerators": accelerators, "models": models}


def write_catalogue(outdir) -> pathlib.Path:
    """Write the payload as a script (works from file:// too) and as JSON; return the script."""
    static = pathlib.Path(outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    text = json.dumps(catalogue_payload(), indent=1, allow_nan=False)
    (static / f"{FILENAME}.json").write_text(text + "\n")
    script = static / f"{FILENAME}.js"
    script.write_text("// Generated at build time from gpuinfer's catalogues "
                      "(_ext/gpuinfer_site.py). Do not edit.\n"
                      f"window.{GLOBAL_NAME} = {text};\n")
    return script


def _on_build_finished(app, exception):
    if exception is None and app.builder.format == "html":
        write_catalogue(app.outdir)


def setup(app):
    app.connect("build-finished", _on_build_finished)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}

// The decode calculator (appendix/calculator.md). No kernel: it runs in the browser on
// the catalogue that _ext/gpuinfer_site.py exports from gpuinfer at build time
// (_static/gpuinfer-catalogue.js). The arithmetic is gpuinfer.llm's, step for step:
// weight_read_ceiling, decode_step_time / decode_ceiling, compute_bound_batch, max_batch.
// SI units throughout (bytes, bytes/s, FLOP, FLOP/s, seconds). The site tests
// (tests/site/test_browser.py) check the page against gpuinfer to three significant digits.
(function () {
  "use strict";

  // This file is loaded on every page (Jupyter Book adds all of _static/*.js); it acts
  // only where the calculator's form is.
  const thisScript = document.currentScript;

  function start() {
    const root = document.getElementById("gpuinfer-calculator");
    if (!root) return;
    if (window.GPUINFER_CATALOGUE) return init(root, window.GPUINFER_CATALOGUE);
    // The catalogue sits beside this script in _static/.
    const src = thisScript ? thisScript.src.replace(/calculator\.js(\?.*)?$/, "gpuinfer-catalogue.js") : null;
    if (!src) return fail(root, "cannot locate the catalogue script");
    const tag = document.createElement("script");
    tag.src = src;
    tag.onload = function () { init(root, window.GPUINFER_CATALOGUE); };
    tag.onerror = function () { fail(root, "the catalogue (_static/gpuinfer-catalogue.js) did not load; build the book with `make book`"); };
    document.head.appendChild(tag);
  }

  function fail(root, message) {
    const out = root.querySelector("[data-role=error]");
    if (out) { out.textContent = "Calculator unavailable: " + message + "."; out.hidden = false; }
  }

  // --- the formulas of gpuinfer.llm -----------------------------------------------------

  function peakFlops(acc, dtype) {
    if (!(dtype in acc.peak_flops)) {
      const have = Object.keys(acc.peak_flops).join(", ") || "none";
      throw new Error(acc.name + " has no " + dtype + " peak in the catalogue; it has: " + have);
    }
    return acc.peak_flops[dtype];
  }

  function positiveInteger(name, value) {
    if (!(Number.isFinite(value) && value > 0 && Math.round(value) === value)) {
      throw new Error(name + " must be a positive whole number");
    }
    return value;
  }

  // Everything the page shows, for one choice of inputs (the package's names in comments).
  function compute(cat, accName, modelName, dtype, batch, context) {
    const acc = cat.accelerators.find(function (a) { return a.name === accName; });
    const model = cat.models.find(function (m) { return m.name === modelName; });
    const fmt = cat.dtypes[dtype];
    if (!acc) throw new Error("unknown device " + accName);
    if (!model) throw new Error("unknown model " + modelName);
    if (!fmt) throw new Error("unknown dtype " + dtype);
    positiveInteger("batch", batch);
    positiveInteger("context", context);
    const bw = acc.bandwidth_bytes_per_s;
    const kvDtype = fmt.kv_dtype, computeDtype = fmt.compute_dtype;
    const peak = peakFlops(acc, computeDtype);
    const weightBytes = model.n_params * fmt.bytes_per_element;            // weight_bytes
    const kvPerToken = model.kv_cache_bytes_per_token[kvDtype];            // kv_cache_bytes_per_token
    const stepBytes = weightBytes + batch * context * kvPerToken;          // decode_step_bytes
    const flopsPerSeq = model.flops_per_sequence + model.flops_per_context_token * context;
    const stepFlops = batch * flopsPerSeq;                                 // decode_step_flops
    const memoryS = stepBytes / bw, computeS = stepFlops / peak;
    const stepS = Math.max(memoryS, computeS);                             // decode_step_time
    // compute_bound_batch
    const margin = flopsPerSeq / peak - context * kvPerToken / bw;
    const computeBoundBatch = margin <= 0 ? Infinity : Math.ceil(weightBytes / bw / margin);
    // max_batch (no reserve)
    const free = acc.memory_bytes - weightBytes;
    const maxBatch = free <= 0 ? 0 : Math.floor(free / (context * kvPerToken));
    return {
      accelerator: acc, model: model, dtype: dtype, kvDtype: kvDtype, computeDtype: computeDtype,
      weightBytes: weightBytes, kvBytesPerToken: kvPerToken,
      memoryBytes: acc.memory_bytes,
      neededBytes: weightBytes + batch * context * kvPerToken,
      weightReadCeiling: batch * bw / weightBytes,                         // weight_read_ceiling
      decodeCeiling: batch / stepS,                                        // decode_ceiling
      perSequence: 1 / stepS,
      stepS: stepS, memoryS: memoryS, computeS: computeS,
      intensity: stepFlops / stepBytes,                                    // decode_intensity
      ridge: peak / bw,
      computeBound: computeS > memoryS,
      computeBoundBatch: computeBoundBatch,
      maxBatch: maxBatch,
      fits: batch <= maxBatch
    };
  }

  // --- formatting -------------------------------------------------------------------------

  const sig3 = new Intl.NumberFormat("en", { maximumSignificantDigits: 3 });
  const whole = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });
  const PREFIXES = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

  function si(value, unit) {  // gpuinfer.book.si: decimal prefixes, 3 significant figures
    for (const [factor, prefix] of PREFIXES) {
      if (Math.abs(value) >= factor) return sig3.format(value / factor) + " " + prefix + unit;
    }
    return sig3.format(value) + " " + unit;
  }

  function count(value) {  // gpuinfer.book.number: whole numbers keep every digit
    if (!Number.isFinite(value)) return "never";
    return Math.abs(value) >= 100 ? whole.format(value) : sig3.format(value);
  }

  // --- the page ---------------------------------------------------------------------------

  function init(root, cat) {
    if (!cat) return fail(root, "the catalogue is empty");
    const $ = function (role) { return root.querySelector("[data-role=" + role + "]"); };
    const form = root.querySelector("form");
    const accSel = form.elements.accelerator, modelSel = form.elements.model;
    const dtypeSel = form.elements.dtype;

    const groups = { gpu: "GPUs", cpu: "CPUs (reference rows)" };
    Object.keys(groups).forEach(function (kind) {
      const group = document.createElement("optgroup");
      group.label = groups[kind];
      cat.accelerators.filter(function (a) { return a.kind === kind; }).forEach(function (a) {
        group.appendChild(new Option(a.name, a.name));
      });
      if (group.children.length) accSel.appendChild(group);
    });
    cat.models.forEach(function (m) { modelSel.appendChild(new Option(m.name, m.name)); });
    Object.keys(cat.dtypes).forEach(function (d) {
      const f = cat.dtypes[d];
      const label = d === f.compute_dtype ? d : d + " (weights only)";
      dtypeSel.appendChild(new Option(label, d));
    });

    // Defaults, then whatever the address says (#accelerator=T4&model=...&batch=8).
    const defaults = { accelerator: "T4", model: "llama-2-7b", dtype: "fp16", batch: "1", context: "1024" };
    const fromHash = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    Object.keys(defaults).forEach(function (key) {
      const el = form.elements[key];
      const wanted = fromHash.get(key) || defaults[key];
      el.value = wanted;
      if (el.tagName === "SELECT" && el.value !== wanted) el.value = defaults[key];
    });

    function show(role, text, value) {
      const el = $(role);
      el.textContent = text;
      if (value === undefined) el.removeAttribute("data-value");
      else el.setAttribute("data-value", String(value));
    }

    function update() {
      const err = $("error");
      const batch = Number(form.elements.batch.value);
      const context = Number(form.elements.context.value);
      let r;
      try {
        r = compute(cat, accSel.value, modelSel.value, dtypeSel.value, batch, context);
      } catch (e) {
        err.textContent = e.message + ".";
        err.hidden = false;
        root.querySelector("[data-role=results]").hidden = true;
        return;
      }
      err.hidden = true;
      root.querySelector("[data-role=results]").hidden = false;
      show("weight-bytes", si(r.weightBytes, "B") + " of " + r.dtype + " weights", r.weightBytes);
      show("kv-bytes-per-token", si(r.kvBytesPerToken, "B") + " per token (" + r.kvDtype + ")", r.kvBytesPerToken);
      show("weight-read-ceiling", count(r.weightReadCeiling) + " tokens/s", r.weightReadCeiling);
      show("decode-ceiling", count(r.decodeCeiling) + " tokens/s in total, " +
           count(r.perSequence) + " per sequence (" + sig3.format(r.stepS * 1e3) + " ms a step)", r.decodeCeiling);
      show("verdict", r.computeBound ? "compute-bound" : "memory-bound", r.computeBound ? 1 : 0);
      show("verdict-why", "intensity " + sig3.format(r.intensity) + " FLOP/byte against a ridge point of " +
           sig3.format(r.ridge) + " FLOP/byte (" + r.computeDtype + " compute)");
      show("compute-bound-batch", Number.isFinite(r.computeBoundBatch)
           ? "from batch " + count(r.computeBoundBatch)
           : "never at this context (KV reads grow as fast as the FLOPs)",
           Number.isFinite(r.computeBoundBatch) ? r.computeBoundBatch : "inf");
      show("max-batch", r.maxBatch === 0 ? "0: the weights alone do not fit"
           : count(r.maxBatch) + " sequences of " + count(context) + " tokens", r.maxBatch);
      show("fits", r.fits ? "fits: " + si(r.neededBytes, "B") + " of " + si(r.memoryBytes, "B")
           : "does not fit: " + si(r.neededBytes, "B") + " needed, " + si(r.memoryBytes, "B") + " on the device",
           r.fits ? 1 : 0);
      const acc = $("accelerator-source"), model = $("model-source");
      acc.href = r.accelerator.source; acc.textContent = r.accelerator.name + " datasheet";
      model.href = r.model.source; model.textContent = r.model.name + " config";
      show("accelerator-note", r.accelerator.note);
      const params = new URLSearchParams({ accelerator: accSel.value, model: modelSel.value,
        dtype: dtypeSel.value, batch: String(batch), context: String(context) });
      history.replaceState(null, "", "#" + params.toString());
    }

    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", function (e) { e.preventDefault(); update(); });
    update();
    root.setAttribute("data-ready", "true");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

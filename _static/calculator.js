// The decode calculator (appendix/calculator.md). No kernel: it runs in the browser on
// the catalogue that _ext/gpuinfer_site.py exports from gpuinfer at build time
// (_static/gpuinfer-catalogue.js): devices, models and, per model and number format, the
// constants of gpuinfer.predict.llm's per-operation decode model (step_model.step_constants), and the
// achievable model's constants with the intervals of its errors. `decodeTerms` mirrors
// step_model.StepModel.decode_terms, `opSeconds` roofline.op_time_s and `achievableStepS`
// achievable.row_rates + achievable.overheads, line for line; tests/test_calculator.py runs
// this file under Node and checks `compute` against the package on every model x device x
// format x (batch, context) of a grid, with the fp8 KV cache and the engines' memory
// fractions.
// SI units throughout (bytes, bytes/s, FLOP, FLOP/s, seconds).
(function (root) {
  "use strict";

  // --- the formulas of gpuinfer.predict.llm and gpuinfer.predict.roofline ---------------------------------

  // roofline.op_time_s: an operation takes the longer of moving its bytes and doing its FLOPs.
  function opSeconds(flops, bytes, peak, bandwidth) {
    return Math.max(bytes / bandwidth, flops / peak);
  }

  // step_model.experts_touched (uniform routing): distinct routed experts a layer reads for
  // `tokens` tokens, E(1 - (1 - k/E)^tokens).
  function expertsTouched(k, tokens) {
    const E = k.n_experts;
    return E * (1 - Math.pow(1 - k.experts_per_token / E, tokens));
  }

  // step_model.StepModel.moe_terms: the router, shared experts and routed experts of `tokens` tokens.
  function moeTerms(k, tokens) {
    const out = { router: [tokens * k.router_flops_per_token,
                           k.router_weight_bytes + tokens * k.router_act_bytes_per_token] };
    if (k.shared_weight_bytes) {
      out.shared_experts = [tokens * k.shared_flops_per_token,
                            k.shared_weight_bytes + tokens * k.shared_act_bytes_per_token];
    }
    out.experts = [tokens * k.expert_flops_per_token,
                   expertsTouched(k, tokens) * k.expert_bytes + tokens * k.expert_act_bytes_per_token];
    return out;
  }

  // step_model.StepModel.decode_terms: {operation: [flops, bytes]} of one decode step.
  function decodeTerms(k, batch, context) {
    const tokens = batch, pairs = batch * (context + 1), cached = batch * context;
    const out = {
      embedding: [0, tokens * k.embed_bytes_per_token],
      linear: [tokens * k.linear_flops_per_token,
               k.linear_weight_bytes + tokens * k.linear_act_bytes_per_token],
      attention: [pairs * k.attn_flops_per_pair,
                  cached * k.kv_per_token + tokens * k.kv_per_token + tokens * k.attn_act_bytes_per_token]
    };
    if (k.n_experts) Object.assign(out, moeTerms(k, tokens));
    out.lm_head = [tokens * k.head_flops_per_row,
                   k.head_weight_bytes > 0 ? k.head_weight_bytes + tokens * k.head_act_bytes_per_row : 0];
    return out;
  }

  // step_model.step_weight_bytes: the weights a step of `tokens` tokens reads (an MoE model: the
  // routed experts those tokens touch, not all of them).
  function stepWeightBytes(k, tokens) {
    let bytes = k.linear_weight_bytes + k.head_weight_bytes;
    if (k.n_experts) {
      bytes += k.router_weight_bytes + k.shared_weight_bytes + expertsTouched(k, tokens) * k.expert_bytes;
    }
    return bytes;
  }

  function peakFlops(acc, dtype, peakName) {
    if (!(peakName in acc.peak_flops)) {
      const have = Object.keys(acc.peak_flops).join(", ") || "none";
      throw new Error(acc.name + " has no " + peakName + " peak in the catalogue (for " + dtype +
                      " compute); it has: " + have);
    }
    return acc.peak_flops[peakName];
  }

  function positiveInteger(name, value) {
    if (!(Number.isFinite(value) && value > 0 && Math.round(value) === value)) {
      throw new Error(name + " must be a positive whole number");
    }
    return value;
  }

  // llm.compute_bound_batch: the first batch at which `linear`, `lm_head` (and an MoE
  // model's shared and routed experts) are all compute-bound. compute_s - memory_s is
  // affine in the batch for all but the routed experts: find where it crosses zero.
  function computeBoundBatch(k, peak, bw) {
    let worst = 0;
    ["linear", "lm_head", "shared_experts"].forEach(function (op) {
      if (op === "lm_head" && !(k.head_weight_bytes > 0)) return;
      if (op === "shared_experts" && !(k.n_experts && k.shared_weight_bytes)) return;
      const f = [1, 2].map(function (b) {
        const t = decodeTerms(k, b, 0)[op];
        return t[0] / peak - t[1] / bw;
      });
      const slope = f[1] - f[0];
      worst = Math.max(worst, slope > 0 ? 1 - f[0] / slope : Infinity);
    });
    const out = Number.isFinite(worst) ? Math.max(1, Math.floor(worst) + 1) : Infinity;
    if (!k.n_experts || !Number.isFinite(out)) return out;
    return Math.max(out, expertsComputeBound(k, peak, bw));
  }

  // llm._experts_compute_bound: the routed experts' bytes grow as E(1 - (1 - k/E)^B), their
  // FLOPs as B: double the batch until they are compute-bound, then bisect.
  function expertsComputeBound(k, peak, bw) {
    const bound = function (b) {
      const t = moeTerms(k, b).experts;
      return t[0] / peak > t[1] / bw;
    };
    if (bound(1)) return 1;
    let hi = 2;
    while (!bound(hi)) {
      hi *= 2;
      if (hi > Math.pow(2, 40)) return Infinity;
    }
    let lo = hi / 2;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (bound(mid)) hi = mid; else lo = mid;
    }
    return hi;
  }

  // achievable.row_rates: the rates a row of the step runs at on the achievable model
  // (`a`: achievable.FITTED as exported): attention at `attention` x the peak (the 16-bit
  // peak when the step computes in fewer bits), a matmul-like row at matmul_scale x the
  // GPU's matmul fraction x the peak and, for weight-only quantised weights, its bandwidth
  // x the format's weight-only factor; a row with no FLOPs (the embedding gather) moves
  // bytes only. Every row's bytes at `bandwidth` x the datasheet's.
  function achievableRowSeconds(a, acc, weightFormat, computeFormat, op, flops, bytes) {
    const w = a.formats[weightFormat], c = a.formats[computeFormat];
    const bw = acc.bandwidth_bytes_per_s * a.bandwidth;
    const kind = op === "attention" ? "attention" : flops === 0 ? "gather" : "matmul";
    let peak = c.peak in acc.peak_flops ? acc.peak_flops[c.peak] : NaN, rowBw = bw;
    if (kind === "attention") {
      if (a.attention_dtype !== null && c.bits < 16) {
        const p = a.formats[a.attention_dtype].peak;
        peak = p in acc.peak_flops ? acc.peak_flops[p] : NaN;
      }
      peak *= a.attention;
    } else if (kind === "matmul") {
      peak *= a.matmul_scale * (a.matmul !== null ? a.matmul : acc.matmul_fraction[c.peak]);
      if (w.quantised && c.peak !== w.peak) rowBw = bw * w.weight_only;  // weight-only
    }
    return opSeconds(flops, bytes, peak, rowBw);
  }

  // achievable.overheads (CUDA graphs): the kernels' seconds, a gap between each two of
  // n_layers x kernels_per_layer kernels, a fixed cost a step and one a sequence.
  function achievableStepS(a, deviceS, nLayers, batch) {
    const kernels = nLayers * a.kernels_per_layer;
    return deviceS + kernels * a.kernel_gap_s + a.step_s + a.sequence_s * batch;
  }

  // validation.interval's regime for a decode step of this model and batch (no tensor
  // parallelism here): batch 1, else dense or mixture-of-experts throughput.
  function intervalRegime(model, batch) {
    return batch === 1 ? "batch-1" : model.n_experts > 0 ? "moe throughput" : "dense throughput";
  }

  // The options beside the five inputs: `kvDtype` (null: the activations' format, or one of
  // cat.kv_dtypes) and `memoryUtilization` (null: the whole card, or an engine's
  // gpu_memory_utilization, paged_kv.kv_cache_budget).
  function readOptions(cat, options) {
    const o = options || {};
    const kv = o.kvDtype === undefined || o.kvDtype === "" ? null : o.kvDtype;
    if (kv !== null && cat.kv_dtypes.indexOf(kv) < 0) {
      throw new Error("the KV cache can be in the activations' format or " + cat.kv_dtypes.join(", ") +
                      ", not " + kv);
    }
    const u = o.memoryUtilization === undefined || o.memoryUtilization === "" ? null : o.memoryUtilization;
    if (u !== null && !(Number.isFinite(u) && u > 0 && u <= 1)) {
      throw new Error("the memory an engine may use must be a fraction in (0, 1], not " + u);
    }
    return { kvDtype: kv, memoryUtilization: u };
  }

  // Everything the page shows, for one choice of inputs (the package's names in comments).
  function compute(cat, accName, modelName, dtype, batch, context, options) {
    const acc = cat.accelerators.find(function (a) { return a.name === accName; });
    const model = cat.models.find(function (m) { return m.name === modelName; });
    const fmt = cat.dtypes[dtype];
    if (!acc) throw new Error("unknown device " + accName);
    if (!model) throw new Error("unknown model " + modelName);
    if (!fmt) throw new Error("unknown dtype " + dtype);
    positiveInteger("batch", batch);
    positiveInteger("context", context);
    const opt = readOptions(cat, options);
    let k = model.step[dtype];                                            // step_model.step_constants
    if (opt.kvDtype !== null) {  // step_constants(..., kv_dtype=): only the KV bytes change
      k = Object.assign({}, k, { kv_dtype: opt.kvDtype,
                                 kv_per_token: model.kv_cache_bytes_per_token[opt.kvDtype] });
    }
    const bw = acc.bandwidth_bytes_per_s;
    const peak = peakFlops(acc, k.compute_dtype, fmt.peak);
    const terms = decodeTerms(k, batch, context);
    const ops = {}; let stepS = 0, stepFlops = 0, stepBytes = 0, deviceS = 0;
    const operations = model.operations || cat.operations;               // step_model.operations
    operations.forEach(function (op) {                                    // roofline.evaluate
      const flops = terms[op][0], bytes = terms[op][1];
      const seconds = opSeconds(flops, bytes, peak, bw);
      const achievableSeconds = achievableRowSeconds(cat.achievable, acc, k.weight_dtype,  // achievable.table_s
                                                     k.compute_dtype, op, flops, bytes);
      ops[op] = { flops: flops, bytes: bytes, seconds: seconds, achievableSeconds: achievableSeconds,
                  bound: flops / peak > bytes / bw ? "compute" : "memory" };
      stepS += seconds; stepFlops += flops; stepBytes += bytes; deviceS += achievableSeconds;
    });
    // achievable.decode_step_s, and validation.interval of its rate (tokens/s) and cost (s).
    const achStepS = achievableStepS(cat.achievable, deviceS, model.n_layers, batch);
    const regime = intervalRegime(model, batch), ratios = cat.achievable.intervals[regime];
    // max_batch with the stated reserve, or with an engine's memory fraction u
    // (paged_kv.kv_cache_budget: u x memory - weights - reserve for the KV cache).
    const u = opt.memoryUtilization;
    const usable = u === null ? acc.memory_bytes : u * acc.memory_bytes;
    const free = u === null ? acc.memory_bytes - cat.reserve_bytes - k.weight_bytes
      : Math.max(0, u * acc.memory_bytes - k.weight_bytes - cat.reserve_bytes);
    const maxBatch = free <= 0 ? 0 : Math.floor(free / (context * k.kv_per_token));
    return {
      accelerator: acc, model: model, dtype: dtype, kvDtype: k.kv_dtype, computeDtype: k.compute_dtype,
      weightBytes: k.weight_bytes, kvBytesPerToken: k.kv_per_token,
      memoryBytes: acc.memory_bytes, reserveBytes: cat.reserve_bytes,
      memoryUtilization: u, usableBytes: usable,
      neededBytes: k.weight_bytes + batch * context * k.kv_per_token,
      operations: operations,
      // Weights only: the bytes of weights one step reads (step_model.step_weight_bytes at this
      // batch: an MoE model's touched experts).
      weightReadBytes: stepWeightBytes(k, batch),
      weightReadCeiling: batch * bw / stepWeightBytes(k, batch),                // weight_read_ceiling
      decodeCeiling: batch / stepS,                                        // decode_ceiling
      perSequence: 1 / stepS,
      stepS: stepS, ops: ops,
      intensity: stepFlops / stepBytes,                                    // decode_intensity
      attentionIntensity: ops.attention.flops / ops.attention.bytes,
      ridge: peak / bw,
      computeBoundBatch: computeBoundBatch(k, peak, bw),                   // compute_bound_batch
      maxBatch: maxBatch,
      fits: batch <= maxBatch,
      // The second number: what an engine reaches (achievable.decode_tokens_per_s), with
      // the central `coverage` of where a measurement falls (validation.interval).
      achievableStepS: achStepS,                                          // achievable.decode_step_s
      achievable: batch / achStepS,                                       // achievable.decode_tokens_per_s
      achievablePerSequence: 1 / achStepS,
      regime: regime, coverage: cat.achievable.coverage,
      achievableInterval: [batch / achStepS * ratios.rate[0], batch / achStepS * ratios.rate[1]],
      achievableStepInterval: [achStepS * ratios.cost[0], achStepS * ratios.cost[1]]
    };
  }

  const api = { compute: compute, decodeTerms: decodeTerms, opSeconds: opSeconds,
                computeBoundBatch: computeBoundBatch, expertsTouched: expertsTouched,
                achievableStepS: achievableStepS, intervalRegime: intervalRegime };
  if (typeof module === "object" && module.exports) {  // Node: the grid test
    module.exports = api;
    return;
  }
  root.GpuinferCalculator = api;

  // This file is loaded on every page (Jupyter Book adds all of _static/*.js); it acts
  // only where the calculator's form is.
  const thisScript = document.currentScript;

  function start() {
    const el = document.getElementById("gpuinfer-calculator");
    if (!el) return;
    if (window.GPUINFER_CATALOGUE) return init(el, window.GPUINFER_CATALOGUE);
    // The catalogue sits beside this script in _static/.
    const src = thisScript ? thisScript.src.replace(/calculator\.js(\?.*)?$/, "gpuinfer-catalogue.js") : null;
    if (!src) return fail(el, "cannot locate the catalogue script");
    const tag = document.createElement("script");
    tag.src = src;
    tag.onload = function () { init(el, window.GPUINFER_CATALOGUE); };
    tag.onerror = function () { fail(el, "the catalogue (_static/gpuinfer-catalogue.js) did not load; build the book with `make book`"); };
    document.head.appendChild(tag);
  }

  function fail(el, message) {
    const out = el.querySelector("[data-role=error]");
    if (out) { out.textContent = "Calculator unavailable: " + message + "."; out.hidden = false; }
  }

  // --- formatting -------------------------------------------------------------------------

  const sig3 = new Intl.NumberFormat("en", { maximumSignificantDigits: 3 });
  const whole = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });
  const PREFIXES = [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];

  function si(value, unit) {  // gpuinfer.course.book.si: decimal prefixes, 3 significant figures
    for (const [factor, prefix] of PREFIXES) {
      if (Math.abs(value) >= factor) return sig3.format(value / factor) + " " + prefix + unit;
    }
    return sig3.format(value) + " " + unit;
  }

  function count(value) {  // gpuinfer.course.book.number: whole numbers keep every digit
    if (!Number.isFinite(value)) return "never";
    return Math.abs(value) >= 100 ? whole.format(value) : sig3.format(value);
  }

  // --- the chart: decode ceiling against the batch (log-log SVG, no library) ----------------

  const SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawChart(svg, cat, acc, model, dtype, batch, context, options, r) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const W = 640, H = 300, L = 64, R = 16, T = 14, B = 46;
    // Batches 1, 2, 4 ... far enough to show the bend and the memory limit.
    const limit = Math.max(batch, Number.isFinite(r.computeBoundBatch) ? 2 * r.computeBoundBatch : 0,
                           Math.min(r.maxBatch, 4096), 64);
    const batches = [];
    for (let b = 1; b < 2 * limit; b *= 2) batches.push(b);
    batches.push(batches[batches.length - 1] * 2);  // one step past the limit
    const rows = batches.map(function (b) {
      const at = compute(cat, acc, model, dtype, b, context, options);
      return { b: b, t: at.decodeCeiling, a: at.achievable };
    });
    const xs = rows.map(function (p) { return p.b; }).concat([batch]);
    const ys = rows.map(function (p) { return p.t; }).concat(rows.map(function (p) { return p.a; }),
                                                               [r.decodeCeiling, r.achievable]);
    const x0 = 1, x1 = Math.max.apply(null, xs);
    const y0 = Math.pow(10, Math.floor(Math.log10(Math.min.apply(null, ys))));
    const y1 = Math.pow(10, Math.ceil(Math.log10(Math.max.apply(null, ys))));
    const X = function (v) { return L + (W - L - R) * Math.log(v / x0) / Math.log(x1 / x0); };
    const Y = function (v) { return H - B - (H - T - B) * Math.log(v / y0) / Math.log(y1 / y0); };
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    const ink = "currentColor";
    svg.appendChild(el("rect", { x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: ink, "stroke-opacity": 0.4 }));
    for (let d = y0; d <= y1 * 1.0001; d *= 10) {  // decades of tokens/s
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: Y(d), y2: Y(d), stroke: ink, "stroke-opacity": 0.15 }));
      svg.appendChild(el("text", { x: L - 6, y: Y(d) + 4, "text-anchor": "end", "font-size": 12, fill: ink }, count(d)));
    }
    for (let b = 1; b <= x1 * 1.0001; b *= (x1 > 256 ? 8 : 4)) {
      svg.appendChild(el("line", { x1: X(b), x2: X(b), y1: T, y2: H - B, stroke: ink, "stroke-opacity": 0.15 }));
      svg.appendChild(el("text", { x: X(b), y: H - B + 16, "text-anchor": "middle", "font-size": 12, fill: ink }, count(b)));
    }
    svg.appendChild(el("text", { x: (L + W - R) / 2, y: H - 8, "text-anchor": "middle", "font-size": 13, fill: ink },
                       "batch (sequences, log scale)"));
    svg.appendChild(el("text", { x: 14, y: (T + H - B) / 2, "text-anchor": "middle", "font-size": 13, fill: ink,
                                 transform: "rotate(-90 14 " + (T + H - B) / 2 + ")" }, "decode tokens/s (log scale)"));
    const fits = rows.filter(function (p) { return p.b <= r.maxBatch; });
    const over = rows.filter(function (p) { return p.b >= (fits.length ? fits[fits.length - 1].b : 1); });
    const line = function (pts, key) { return pts.map(function (p, i) { return (i ? "L" : "M") + X(p.b).toFixed(1) + " " + Y(p[key || "t"]).toFixed(1); }).join(" "); };
    if (fits.length) svg.appendChild(el("path", { d: line(fits), fill: "none", stroke: ink, "stroke-width": 2, "data-role": "chart-fits" }));
    if (over.length > 1) svg.appendChild(el("path", { d: line(over), fill: "none", stroke: ink, "stroke-width": 1.5, "stroke-dasharray": "5 4", "data-role": "chart-does-not-fit" }));
    if (r.maxBatch >= 1 && r.maxBatch <= x1) {
      svg.appendChild(el("line", { x1: X(r.maxBatch), x2: X(r.maxBatch), y1: T, y2: H - B, stroke: ink, "stroke-dasharray": "2 3" }));
      svg.appendChild(el("text", { x: X(r.maxBatch) - 4, y: T + 14, "text-anchor": "end", "font-size": 12, fill: ink }, "memory full"));
    }
    // The achievable model (thin, dotted), its point filled.
    svg.appendChild(el("path", { d: line(rows, "a"), fill: "none", stroke: ink, "stroke-width": 1.2,
                                 "stroke-dasharray": "1 3", "data-role": "chart-achievable" }));
    const last = rows[rows.length - 1];
    svg.appendChild(el("text", { x: X(last.b) - 4, y: Y(last.a) + 16, "text-anchor": "end", "font-size": 12, fill: ink }, "achievable"));
    svg.appendChild(el("circle", { cx: X(batch), cy: Y(r.achievable), r: 4, fill: ink,
                                   "data-role": "chart-achievable-point", "data-value": String(r.achievable) }));
    svg.appendChild(el("circle", { cx: X(batch), cy: Y(r.decodeCeiling), r: 6, fill: "none", stroke: ink, "stroke-width": 2,
                                   "data-role": "chart-point", "data-value": String(r.decodeCeiling) }));
    svg.setAttribute("aria-label", "Decode ceiling in tokens per second against batch size for " + model + " in " + dtype +
                     " on " + acc + " at " + context + " tokens of context: it rises with the batch while the step is " +
                     "memory-bound and levels off once it is compute-bound; the dashed part does not fit in memory. " +
                     "The dotted line below it is the achievable model, what an engine reaches.");
  }

  // --- the page ---------------------------------------------------------------------------

  function init(root, cat) {
    if (!cat) return fail(root, "the catalogue is empty");
    const $ = function (role) { return root.querySelector("[data-role=" + role + "]"); };
    const form = root.querySelector("form");
    const accSel = form.elements.accelerator, modelSel = form.elements.model;
    const dtypeSel = form.elements.dtype, kvSel = form.elements.kv, memorySel = form.elements.memory;

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
      // Quantised formats are weight-only here (W8A16, W4A16): the matmuls run in fp16.
      const bits = Math.floor(8 * f.bytes_per_element);  // int4 with its scales: 4.5 bits, W4
      const label = d === "tf32" ? "fp32 (TF32 matmuls)"
        : d === f.compute_dtype ? d
        : d + " weights (W" + bits + "A16, weight-only)";
      dtypeSel.appendChild(new Option(label, d));
    });

    kvSel.appendChild(new Option("as the activations", ""));
    cat.kv_dtypes.forEach(function (d) {
      kvSel.appendChild(new Option(d.replace("_", " "), d));
    });
    // The engines' memory fractions (paged_kv): the whole card, vLLM's current default, the
    // older default the achievable model's constants were fitted with.
    const memoryLabels = { "whole card": "all, less the reserve",
                           vLLM: "% (vLLM's default)",
                           achievable: "% (vLLM's earlier default)" };
    cat.memory_utilization.forEach(function (m) {
      memorySel.appendChild(m.value === null ? new Option(memoryLabels[m.name], "")
        : new Option(whole.format(100 * m.value) + memoryLabels[m.name], String(m.value)));
    });

    // Defaults, then whatever the address says (#accelerator=T4&model=...&batch=8).
    const defaults = { accelerator: "T4", model: "llama-2-7b", dtype: "fp16", batch: "1", context: "1024",
                       kv: "", memory: "" };
    function applyAddress() {
      const fromHash = new URLSearchParams(window.location.hash.replace(/^#/, ""));
      Object.keys(defaults).forEach(function (key) {
        const el = form.elements[key];
        const wanted = fromHash.get(key) || defaults[key];
        el.value = wanted;
        if (el.tagName === "SELECT" && el.value !== wanted) el.value = defaults[key];
      });
    }
    applyAddress();

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
      const options = { kvDtype: kvSel.value,
                        memoryUtilization: memorySel.value === "" ? null : Number(memorySel.value) };
      let r;
      try {
        r = compute(cat, accSel.value, modelSel.value, dtypeSel.value, batch, context, options);
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
      const moe = r.model.n_experts > 0;
      const k = r.model.step[r.dtype];
      show("weight-read-ceiling", count(r.weightReadCeiling) + " tokens/s (weights only: the " +
           si(r.weightReadBytes, "B") + " of weights a step reads, at " + si(r.accelerator.bandwidth_bytes_per_s, "B/s") +
           (moe ? "; a mixture of experts: this batch touches " + sig3.format(expertsTouched(k, batch)) + " of the " +
                  r.model.n_experts + " routed experts in each MoE layer (" + r.model.experts_per_token +
                  " a token, uniform routing), so a step reads part of the " + si(r.weightBytes, "B") + " held" : "") + ")",
           r.weightReadCeiling);
      show("decode-ceiling", count(r.decodeCeiling) + " tokens/s in total, " +
           count(r.perSequence) + " per sequence (" + sig3.format(r.stepS * 1e3) + " ms a step)", r.decodeCeiling);
      const pct = whole.format(100 * r.coverage) + "%";
      show("achievable", count(r.achievable) + " tokens/s in total (" + pct + " interval " +
           count(r.achievableInterval[0]) + "–" + count(r.achievableInterval[1]) + "), " +
           count(r.achievablePerSequence) + " per sequence (" + sig3.format(r.achievableStepS * 1e3) + " ms a step, " +
           sig3.format(r.achievableStepInterval[0] * 1e3) + "–" + sig3.format(r.achievableStepInterval[1] * 1e3) +
           " ms); " + whole.format(100 * r.achievable / r.decodeCeiling) + "% of the ceiling", r.achievable);
      const ach = $("achievable");
      ach.setAttribute("data-low", String(r.achievableInterval[0]));
      ach.setAttribute("data-high", String(r.achievableInterval[1]));
      show("achievable-why", "the interval is where the central " + pct + " of measured / predicted fell on the " +
           "published measurements of this regime, \u201c" + r.regime + "\u201d (gpuinfer.predict.validation.interval)" +
           (r.accelerator.kind === "cpu" ? "; the model is calibrated on GPU serving engines, not on CPUs" : ""),
           r.regime);
      const opRows = $("ops");
      while (opRows.firstChild) opRows.removeChild(opRows.firstChild);
      r.operations.forEach(function (op) {
        const o = r.ops[op], tr = document.createElement("tr");
        [op.replace("_", " "), sig3.format(o.seconds * 1e3) + " ms",
         whole.format(100 * o.seconds / r.stepS) + "%", o.bound].forEach(function (text) {
          const td = document.createElement("td"); td.textContent = text; tr.appendChild(td);
        });
        tr.setAttribute("data-op", op); tr.setAttribute("data-value", String(o.seconds));
        tr.setAttribute("data-bound", o.bound);
        opRows.appendChild(tr);
      });
      const linearBound = r.ops.linear.bound === "compute";
      show("verdict", linearBound ? "compute-bound" : "memory-bound", linearBound ? 1 : 0);
      show("verdict-why", "their intensity is about 2 × batch / bytes per weight (" + sig3.format(r.ops.linear.flops / r.ops.linear.bytes) +
           " FLOP/byte) against a ridge point of " + sig3.format(r.ridge) + " FLOP/byte (" + r.computeDtype +
           " compute); attention stays at " + sig3.format(r.attentionIntensity) + " FLOP/byte, memory-bound at any batch" +
           (moe ? "; the routed experts are " + r.ops.experts.bound + "-bound (" +
                  sig3.format(r.ops.experts.flops / r.ops.experts.bytes) + " FLOP/byte: each expert sees about batch × " +
                  r.model.experts_per_token + "/" + r.model.n_experts + " tokens)" : ""));
      show("compute-bound-batch", Number.isFinite(r.computeBoundBatch)
           ? "from batch " + count(r.computeBoundBatch) + " (at any context)"
           : "never: this device has no peak for " + r.computeDtype,
           Number.isFinite(r.computeBoundBatch) ? r.computeBoundBatch : "inf");
      const engine = r.memoryUtilization === null ? ""
        : "an engine using " + whole.format(100 * r.memoryUtilization) + "% of the memory, and ";
      show("max-batch", r.maxBatch === 0 ? "0: the weights alone do not fit" + (engine ? " in " + engine.replace(/, and $/, "") : "")
           : count(r.maxBatch) + " sequences of " + count(context) + " tokens (" + engine + si(r.reserveBytes, "B") +
             " held back for the CUDA context and workspace; KV cache in " + r.kvDtype + ")", r.maxBatch);
      const memoryNote = sig3.format(r.memoryBytes / Math.pow(2, 30)) + " GiB" +
        (r.accelerator.memory_cited ? ", what the card reports"
         : "; the datasheet's or an assumed figure: no published count of what this device reports");
      const memory = si(r.memoryBytes, "B") + " (" + memoryNote + ")";
      const usable = r.memoryUtilization === null ? memory
        : si(r.usableBytes, "B") + " an engine may use (" + whole.format(100 * r.memoryUtilization) + "% of " +
          si(r.memoryBytes, "B") + ", " + memoryNote + ")";
      show("fits", r.fits ? "fits: " + si(r.neededBytes, "B") + " of " + usable
           : "does not fit: " + si(r.neededBytes, "B") + " needed, " + usable + (r.memoryUtilization === null ? " on the device" : ""),
           r.fits ? 1 : 0);
      const acc = $("accelerator-source"), model = $("model-source");
      acc.href = r.accelerator.source; acc.textContent = r.accelerator.name + " datasheet";
      model.href = r.model.source; model.textContent = r.model.name + " config";
      show("accelerator-note", r.accelerator.note);
      const params = new URLSearchParams({ accelerator: accSel.value, model: modelSel.value,
        dtype: dtypeSel.value, batch: String(batch), context: String(context) });
      if (kvSel.value) params.set("kv", kvSel.value);
      if (memorySel.value) params.set("memory", memorySel.value);
      history.replaceState(null, "", "#" + params.toString());
      drawChart($("chart"), cat, accSel.value, modelSel.value, dtypeSel.value, batch, context, options, r);
    }

    form.addEventListener("input", update);
    form.addEventListener("change", update);
    form.addEventListener("submit", function (e) { e.preventDefault(); update(); });
    // A link to another case on this page (#accelerator=...&batch=...) changes only the hash.
    window.addEventListener("hashchange", function () { applyAddress(); update(); });
    update();
    root.setAttribute("data-ready", "true");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})(typeof window !== "undefined" ? window : this);

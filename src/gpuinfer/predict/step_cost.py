"""A forward step's time in closed form from a handful of aggregates, for the simulators
that time thousands of steps.

Chapters: *Batching, latency and SLOs*, *Serving LLMs*. A mixed step's operations table
(`step_model.StepModel`, timed row by row by `llm.forward_step_breakdown`) depends on its
sequences only through six sums (`step_aggregates`), so its FLOPs and bytes are a matrix
of coefficients, built once per (model, formats) from the step model's constants (the
ones the website's calculator reads, `step_model.step_constants`), times those sums and
two terms that are not affine in them (`STEP_FEATURES`). A step then costs one matrix
product and the roofline over the rows: `StepCost`, on the datasheet's rates
(`step_timer`) or on others (`achievable.row_rates`). SI units.
"""

from __future__ import annotations

import numpy as np

from gpuinfer import hardware as _hardware
from gpuinfer.predict import roofline as _roofline
from gpuinfer.predict.architectures import get
from gpuinfer.predict.step_model import StepModel, operations, routed_expert_weight_bytes


def step_aggregates(new_tokens, context, logits=None):
    """What a mixed step's operations table depends on (`llm.forward_step_breakdown`), as
    one array `STEP_AGGREGATES` long: 1, new tokens, LM-head rows, causal (query, key) pairs
    (a sequence's q new tokens attend to its c cached ones and to the earlier new ones:
    q c + q (q + 1) / 2), cached tokens, and score-matrix entries q (c + q) (what an
    attention kernel that writes the scores stores: `flash=False`). Per-sequence arrays
    in, no checks (`llm.forward_step_s` checks)."""
    q = np.asarray(new_tokens, dtype=float)
    c = np.asarray(context, dtype=float)
    lg = np.ones_like(q) if logits is None else np.asarray(logits, dtype=float)
    t = q.sum()
    return np.array([1.0, t, lg.sum(), q @ c + (q @ q + t) / 2, c.sum(), q @ c + q @ q])


#: The rows of `step_aggregates`' result.
STEP_AGGREGATES = ("one", "new_tokens", "logits_rows", "pairs", "cached_tokens",
                   "score_entries")
#: What `StepCost` prices: the aggregates, then whether any sequence runs the LM head and
#: the routed-expert weight bytes (the two terms that are not affine in the aggregates).
STEP_FEATURES = STEP_AGGREGATES + ("head_runs", "routed_expert_bytes")

#: `StepCost`'s coefficients by (model, formats, flash): a calibration builds thousands of
#: step costs that differ only in their rates.
_COEFFICIENTS = {}


def _step_coefficients(m, dtype, kv_dtype, compute_dtype, flash):
    """`llm.forward_step_breakdown`'s table in closed form: each row's FLOPs and bytes (in
    `operations(m)` order) as coefficients of `STEP_FEATURES`, from `StepModel`'s
    constants (the calculator's, `step_constants`)."""
    key = (m, dtype, kv_dtype, compute_dtype, bool(flash))
    if key in _COEFFICIENTS:
        return _COEFFICIENTS[key]
    k = StepModel(m, dtype, kv_dtype, compute_dtype, flash)
    kv = k.kv_per_token
    table = {  # row: ({feature: FLOPs coefficient}, {feature: bytes coefficient})
        "embedding": ({}, {"new_tokens": k.embed_bytes_per_token}),
        "linear": ({"new_tokens": k.linear_flops_per_token},
                   {"one": k.linear_weight_bytes,
                    "new_tokens": k.linear_act_bytes_per_token}),
        # the cache read, the new tokens' K and V written, Q/K/V in and O out (and the
        # score matrix written and read back without FlashAttention)
        "attention": ({"pairs": k.attn_flops_per_pair},
                      {"cached_tokens": kv, "new_tokens": kv + k.attn_act_bytes_per_token,
                       "score_entries": 0.0 if flash else k.score_bytes_per_pair}),
        "router": ({"new_tokens": k.router_flops_per_token},
                   {"one": k.router_weight_bytes,
                    "new_tokens": k.router_act_bytes_per_token}),
        "shared_experts": ({"new_tokens": k.shared_flops_per_token},
                           {"one": k.shared_weight_bytes,
                            "new_tokens": k.shared_act_bytes_per_token}),
        "experts": ({"new_tokens": k.expert_flops_per_token},
                    {"routed_expert_bytes": 1.0,
                     "new_tokens": k.expert_act_bytes_per_token}),
        "lm_head": ({"logits_rows": k.head_flops_per_row},
                    {"head_runs": k.head_weight_bytes,
                     "logits_rows": k.head_act_bytes_per_row}),
    }
    rows = list(operations(m))
    col = {f: j for j, f in enumerate(STEP_FEATURES)}
    cf, cb = np.zeros((len(rows), len(col))), np.zeros((len(rows), len(col)))
    for i, name in enumerate(rows):
        for coef, terms in ((cf, table[name][0]), (cb, table[name][1])):
            for f, x in terms.items():
                coef[i, col[f]] = x
    if len(_COEFFICIENTS) > 256:
        _COEFFICIENTS.clear()
    _COEFFICIENTS[key] = out = (cf, cb, rows, k.compute)
    return out


def datasheet_rates(rows, accelerator):
    """(peak FLOP/s, bandwidth bytes/s) per row of a step table on `accelerator`'s
    datasheet roofline: every row at the peak of its format (`roofline.peak`: an error
    when the catalogue has none) and the DRAM bandwidth. `rows` is [(name, FLOPs,
    dtype)]; `achievable.row_rates` is the derated counterpart."""
    acc = _hardware.get(accelerator)
    bw = _roofline.bandwidth(acc)
    return (np.array([_roofline.peak(acc, d) for _, _, d in rows], dtype=float),
            np.full(len(rows), bw))


class StepCost:
    """Seconds of a mixed forward step, the sum of its operations' rooflines (the sum of
    `llm.forward_step_breakdown`'s `seconds`), fast enough for a simulator that times tens
    of thousands of steps: the table is built in closed form from the step model's constants
    (`StepModel`), so a step is one matrix product and `roofline`'s formula over the rows,
    dense and mixture-of-experts models alike.

    A step is described by its aggregates (`step_aggregates`, `STEP_AGGREGATES` rows; a
    column per step to time several at once). Attributes: `names` (the rows,
    `operations(model)`), `cf` and `cb` (FLOPs and bytes per row as coefficients of
    `STEP_FEATURES`), `peaks` and `bandwidths` (each row's rates). `rates(rows)` -> (peaks,
    bandwidths) replaces the datasheet's (`datasheet_rates`), e.g. `achievable.row_rates`
    with an efficiency; `rows` is [(name, does arithmetic, compute dtype)]. Call it as
    `cost(new_tokens, context, logits=None)` -> seconds (per-sequence arrays, unchecked
    for speed: `llm.forward_step_s` checks them)."""

    def __init__(self, model, accelerator, dtype="fp16", *, kv_dtype=None, compute_dtype=None,
                 flash=True, rates=None):
        self.model = m = get(model)
        self.dtype = dtype
        self.cf, self.cb, self.names, self.compute_dtype = _step_coefficients(
            m, dtype, kv_dtype, compute_dtype, flash)
        rows = [(n, f, self.compute_dtype)
                for n, f in zip(self.names, np.abs(self.cf).sum(axis=1))]
        self.peaks, self.bandwidths = (datasheet_rates(rows, accelerator) if rates is None
                                       else rates(rows))

    def features(self, z):
        """`STEP_FEATURES` (8 x k) of steps with aggregates `z` (6 x k)."""
        z = np.asarray(z, dtype=float)
        routed = (np.asarray(routed_expert_weight_bytes(self.model, z[1], self.dtype),
                             dtype=float) if self.model.is_moe else np.zeros(z.shape[1:]))
        return np.vstack([z, (z[2] > 0).astype(float)[None], np.reshape(routed, (1, -1))])

    def flops_bytes(self, z):
        """(FLOPs, bytes) of each row (rows x k) of steps with aggregates `z` (6 x k)."""
        x = self.features(z)
        return self.cf @ x, self.cb @ x

    def rows(self, z):
        """Each row's seconds (rows x k) of steps with aggregates `z` (6 x k)."""
        f, b = self.flops_bytes(z)
        return _roofline.op_time_s_unchecked(f, b, self.peaks[:, None], self.bandwidths[:, None])

    def many(self, z):
        """Seconds of several steps at once: `z` holds one step's aggregates a column."""
        return self.rows(z).sum(axis=0)

    def __call__(self, new_tokens, context, logits=None) -> float:
        z = step_aggregates(new_tokens, context, logits)
        return float(self.many(z[:, None])[0])


def step_timer(model, accelerator, dtype="fp16", *, kv_dtype=None, compute_dtype=None,
               flash=True):
    """A fast function (new_tokens, context, logits=None) -> seconds of a forward step,
    the sum of `llm.forward_step_breakdown`'s rows, for a simulator that times thousands of
    steps: a `StepCost` on the datasheet roofline. The model, device and formats are
    fixed when it is made."""
    return StepCost(model, accelerator, dtype, kv_dtype=kv_dtype,
                    compute_dtype=compute_dtype, flash=flash)


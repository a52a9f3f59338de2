"""Speculative decoding: a small draft model proposes k tokens, the target model checks
them all in one forward step (Leviathan, Kalman & Matias 2023; Chen et al. 2023).

Chapter: *Serving LLMs: prefill, decode and the KV cache*. Times in seconds.

With acceptance rate alpha (each drafted token is accepted with probability alpha,
independently, as the paper assumes), one round of drafting k tokens and verifying them
yields on average

    E = (1 - alpha^(k+1)) / (1 - alpha)          tokens per target step  (k + 1 at alpha = 1)

and, if a draft step costs c target steps, the wall-time improvement over plain decoding
is E / (k c + 1) (the paper's Theorem 3.8 and equation (1); `speedup`).

The paper's c is a constant. On a GPU it is not: verifying k + 1 tokens of `batch`
sequences is a target step over batch x (k + 1) new tokens, which costs about one plain
decode step while the weight matmuls are memory-bound and about k + 1 of them once they
are compute-bound. `decode_speedup` times each part with the per-operation roofline
(`gpuinfer.predict.llm`), so the gain shrinks as the batch grows and vanishes once the target is
compute-bound.

Trees of candidates (Medusa, EAGLE) verify more tokens a round for more accepted ones
(`tree_nodes`, `tree_expected_tokens`, `round_breakdown(..., tree=...)`); engines switch
speculation down and off as the batch grows (`speculation_schedule`, `scheduled_speedup`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpuinfer.predict import achievable as _ach
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.predict import search as _search
from gpuinfer import validate as _v

#: The draft model of the chapter's examples: Llama-3.2-1B, which shares Llama 3's
#: tokenizer (vocabulary 128,256) with Llama-3-8B. Its published config: 16 layers,
#: hidden 2048, 32 heads of 64, 8 KV heads, MLP 8192, tied input and output embeddings.
LLAMA_3_2_1B = architectures.get("llama-3.2-1b")

#: Most drafted tokens per round the functions accept (real systems use 1 to ~10).
MAX_DRAFT = 1024


def _k(k) -> int:
    return _v.count("k", k, minimum=0, maximum=MAX_DRAFT)


def expected_tokens(acceptance, k):
    """Tokens one round yields on average (Leviathan et al. 2023, equation (1)): the
    accepted prefix of the k drafted tokens plus the one the target adds itself,
    (1 - alpha^(k+1)) / (1 - alpha); k + 1 when every draft is accepted (alpha = 1),
    1 when none is (alpha = 0). `acceptance` (alpha) is a fraction in [0, 1], a number
    or an array; `k` drafted tokens per round (0: plain decoding)."""
    a = _v.fraction("acceptance", acceptance, zero_ok=True, array=True)
    k = _k(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.where(a == 1.0, k + 1.0, (1.0 - a ** (k + 1)) / (1.0 - a))
    return _v.scalar_or_array(e)


def _widths(tree):
    w = tuple(_v.count(f"tree[{i}]", x, maximum=MAX_DRAFT) for i, x in enumerate(tree))
    if not w:
        raise ValueError("tree needs at least one depth (a width per drafted position)")
    if tree_nodes(w) > MAX_DRAFT:
        raise ValueError(f"tree {w} has {tree_nodes(w):,} nodes; at most {MAX_DRAFT:,}")
    return w


def tree_nodes(tree) -> int:
    """Draft tokens a tree of candidates holds: `tree[d]` candidates follow each node of
    depth d (depth 0 is the last accepted token), so depth d + 1 holds
    tree[0] x ... x tree[d] nodes; the verify step checks them all, plus the root."""
    return int(sum(math.prod(tree[:d + 1]) for d in range(len(tree))))


def tree_expected_tokens(acceptance, tree):
    """Tokens one round of tree verification yields on average (Medusa, EAGLE): at depth
    d the round goes on if one of the `tree[d]` candidates that follow the accepted path
    is accepted, with probability p_d = 1 - (1 - alpha)^tree[d] when each is accepted
    independently with probability `acceptance` (alpha), so

        E = 1 + p_1 + p_1 p_2 + ... + p_1 ... p_k.

    A chain (every width 1) gives `expected_tokens(alpha, k)`. Independence is the
    optimistic case: siblings are the drafter's top guesses for one position, correlated,
    and the second is accepted less often than the first."""
    a = _v.fraction("acceptance", acceptance, zero_ok=True)
    w = _widths(tree)
    p = 1.0 - (1.0 - a) ** np.asarray(w, dtype=float)
    return float(1.0 + np.cumprod(p).sum())


def speedup(acceptance, k, cost_ratio, *, verify_cost=1.0):
    """Leviathan et al.'s expected wall-time improvement: expected_tokens / (k c + 1),
    with c = `cost_ratio`, the time of a draft step over a target step (>= 0). The 1 is
    the verify step, which their analysis takes as one target step: true only while the
    target is memory-bound (see `decode_speedup`). `verify_cost`: the verify step over a
    plain target step as measured (a lab times both), in place of that 1."""
    c = _v.non_negative("cost_ratio", cost_ratio, array=True)
    r = _v.positive("verify_cost", verify_cost, array=True)
    k = _k(k)
    c, r = _v.same_shape(cost_ratio=c, verify_cost=r)
    return _v.scalar_or_array(np.asarray(expected_tokens(acceptance, k)) / (k * c + r))


def round_breakdown(target, draft, accelerator, *, acceptance, k, batch=1, context=0,
                    dtype="fp16", draft_dtype=None, achievable=True, tree=None) -> dict:
    """One speculative round for `batch` sequences at `context` cached tokens each, on
    the per-operation roofline, against plain decoding of the same batch:

    - `plain_step_s`: a target decode step (`llm.decode_step_s`), one token each;
    - `verify_s`: the target step that checks k + 1 tokens per sequence: its weight
      matmuls, embedding and LM head over batch x (k + 1) tokens (the rows of
      `llm.decode_step_breakdown` at that batch: every position needs its logits), its
      attention per sequence over k + 1 new tokens on `context` cached ones (the row of
      `llm.forward_step_breakdown`);
    - `draft_s`: k draft decode steps at contexts context, ..., context + k - 1;
    - `cost_ratio`: a draft step over a target step (c, at this batch and context);
    - `expected_tokens`, and `speedup` = expected tokens x plain step / (verify + draft);
    - `memory_bytes`: both models' weights, both KV caches at context + k + 1 tokens a
      sequence and `llm.DEFAULT_RESERVE_BYTES`; `fits`: whether that is within the
      device's memory. The times are the roofline's either way: a batch that does not
      fit is a hypothetical, and `fits` says so.

    `dtype` is the target's format, `draft_dtype` the draft's (default the same).

    `tree` (a width per depth, `tree_nodes`): verify a tree of candidates instead of a
    chain (Medusa, EAGLE): k = len(tree) draft steps, the j-th over the batch x the
    nodes of depth j; a verify step over batch x (nodes + 1) tokens, each sequence's
    attention over its nodes + 1 on `context` cached (a tree mask costs no more than
    the chain's causal one); `tree_expected_tokens` a round. `k` must equal len(tree).

    `achievable=True` (or an `achievable.Efficiency`) prices every step on the
    achievable model instead of the ceiling: derated rows, each step's kernel gaps, and
    the fixed per-step cost (`step_s`) once per round (the verify step, and the plain
    step it is compared with). A draft step pays its kernels' gaps whatever its bytes
    (Llama-3.2-1B: 16 layers x 13 kernels), and without CUDA graphs
    (`Efficiency(cuda_graphs=False)`) the host's launches, which for a small draft
    can exceed its weight read (on a B200 a 1B draft reads its weights in ~0.4 ms and
    launches 208 kernels in 0.8 ms): its cost is then not its weight-read ratio."""
    t, d = architectures.get(target), architectures.get(draft)
    acc = _hardware.get(accelerator)
    k = _k(k)
    e = expected_tokens(acceptance, k)
    if np.ndim(e):
        raise TypeError(f"acceptance takes a single number here, got {acceptance!r}")
    if tree is None:
        nodes, width = k, [1] * k          # a chain: one candidate a depth
    else:
        w = _widths(tree)
        if len(w) != k:
            raise ValueError(f"k={k} must equal len(tree)={len(w)} (one depth a draft step)")
        nodes, width = tree_nodes(w), [math.prod(w[:j]) for j in range(k)]
        e = tree_expected_tokens(acceptance, w)
    b = _v.count("batch", batch, maximum=1 << 20)
    c = _v.count("context", context, minimum=0, maximum=1 << 24)
    ddt = dtype if draft_dtype is None else draft_dtype
    wide = _llm.decode_step_breakdown(t, acc, b * (nodes + 1), c, dtype)
    attention = _llm.forward_step_breakdown(t, acc, np.full(b, nodes + 1), np.full(b, c),
                                            dtype)
    if achievable is False:
        plain = _llm.decode_step_s(t, acc, b, c, dtype)
        verify = float(wide["seconds"].drop("attention").sum()
                       + attention.loc["attention", "seconds"])
        steps = np.array([float(_llm.decode_step_s(d, acc, b * width[j], c + j, ddt))
                          for j in range(k)])
    else:
        eff = _ach.as_efficiency(achievable)
        w = _dtypes.formats(dtype)[0]

        def device(table, wf=w):
            return float(_ach.table_s(table, acc, eff, wf).sum())

        plain = float(_ach.overheads(device(_llm.decode_step_breakdown(t, acc, b, c, dtype)),
                                     t.n_layers, eff, sequences=b))
        rows = _ach.table_s(wide, acc, eff, w)
        att = _ach.table_s(attention, acc, eff, w)
        verify_device = float(rows.sum() - rows[list(wide.index).index("attention")]
                              + att[list(attention.index).index("attention")])
        verify = float(_ach.overheads(verify_device, t.n_layers, eff, sequences=b))
        # scheduled once a round: the step's and the sequences' host costs are the verify's
        draft_eff = dataclasses.replace(eff, step_s=0.0, sequence_s=0.0)
        dw = _dtypes.formats(ddt)[0]
        steps = np.array([float(_ach.overheads(device(_llm.decode_step_breakdown(
            d, acc, b * width[j], c + j, ddt), dw), d.n_layers, draft_eff)) for j in range(k)])
    draft_s = float(steps.sum())
    if not (math.isfinite(plain) and math.isfinite(verify) and math.isfinite(draft_s)):
        raise ValueError(f"{acc.name} has no peak for these formats in the catalogue: "
                         f"no roofline time")
    tokens = b * (c + nodes + 1)
    need = (step_model.weight_bytes(t, dtype) + step_model.weight_bytes(d, ddt) + _llm.DEFAULT_RESERVE_BYTES
            + tokens * (step_model.kv_cache_bytes_per_token(t, _dtypes.formats(dtype)[1])
                        + step_model.kv_cache_bytes_per_token(d, _dtypes.formats(ddt)[1])))
    return {"plain_step_s": float(plain), "verify_s": verify, "draft_s": draft_s,
            "cost_ratio": float(steps.mean() / plain) if k else 0.0,
            "verified_tokens": int(nodes + 1),
            "expected_tokens": float(e),
            "speedup": float(e) * float(plain) / (verify + draft_s),
            "memory_bytes": float(need), "fits": bool(need <= acc.memory_bytes)}


def decode_speedup(target, draft, accelerator, *, acceptance, k, batch=1, context=0,
                   dtype="fp16", draft_dtype=None, achievable=True, tree=None) -> float:
    """Decode tokens/s with speculative decoding over tokens/s without, from the
    per-operation roofline (`round_breakdown`): expected tokens per round x a plain
    target step / (the verify step + k draft steps). Near Leviathan et al.'s `speedup`
    at batch 1; below 1 once the target's matmuls are compute-bound (verifying k + 1
    tokens then costs about k + 1 plain steps). It does not check memory: a batch too
    large for the device still gets its roofline ratio; `round_breakdown(...)["fits"]`
    says whether both models and their caches fit. `achievable`, `tree`: see
    `round_breakdown`."""
    return round_breakdown(target, draft, accelerator, acceptance=acceptance, k=k,
                           batch=batch, context=context, dtype=dtype,
                           draft_dtype=draft_dtype, achievable=achievable,
                           tree=tree)["speedup"]


def best_k(target, draft, accelerator, *, acceptance, batch=1, context=0, dtype="fp16",
           draft_dtype=None, max_k=16, achievable=True) -> int:
    """The number of drafted tokens (0..`max_k`) with the highest `decode_speedup`
    (0: speculation does not pay)."""
    top = _v.count("max_k", max_k, minimum=0, maximum=MAX_DRAFT)
    gains = [1.0] + [decode_speedup(target, draft, accelerator, acceptance=acceptance, k=k,
                                    batch=batch, context=context, dtype=dtype,
                                    draft_dtype=draft_dtype, achievable=achievable)
                     for k in range(1, top + 1)]
    return int(np.argmax(gains))


def cutoff_batch(target, draft, accelerator, *, acceptance, k, context=0, dtype="fp16",
                 draft_dtype=None, achievable=True, max_batch=4096, tree=None) -> float:
    """The smallest batch at which speculation stops paying (`decode_speedup` <= 1),
    searched over 1..`max_batch` (`search.largest_meeting` finds the last batch at which
    it pays: the speed-up falls as the batch grows, the verify step turning
    compute-bound); math.inf if it still pays at `max_batch`, 1 if it never pays. Pass
    `max_batch=llm.max_batch(target, accelerator, context)` to search only the batches
    that fit in memory (`decode_speedup` does not check it); `tree`: a tree's round
    (`round_breakdown`)."""
    top = _v.count("max_batch", max_batch, maximum=1 << 20)

    def pays(b):
        return decode_speedup(target, draft, accelerator, acceptance=acceptance, k=k,
                              batch=b, context=context, dtype=dtype,
                              draft_dtype=draft_dtype, achievable=achievable,
                              tree=tree) > 1.0
    last = _search.largest_meeting(pays, 1, top)
    return math.inf if last == top else last + 1


def speculation_schedule(target, draft, accelerator, *, acceptance, batches, context=0,
                         dtype="fp16", draft_dtype=None, max_k=8, achievable=True) -> list:
    """Speculation switched off under load, as engines do it: the drafted tokens k to use
    at each batch size, as vLLM's dynamic speculative decoding takes them
    (`num_speculative_tokens_per_batch_size`: a list of [first batch, last batch, k],
    k = 0 for off; TensorRT-LLM's `max_concurrency` is the two-range case: k up to a
    number of requests, 0 above). At each batch of `batches` (ascending, e.g. a geometric
    grid) k is `best_k` (0..`max_k`, 0 where no k pays), and holds until the next grid
    batch; equal neighbours merge. The last range ends at the last batch given."""
    grid = np.atleast_1d(_v.positive("batches", batches, integer=True, array=True)).astype(int)
    if np.any(np.diff(grid) <= 0):
        raise ValueError("batches must be strictly ascending")
    ranges = []
    for i, b in enumerate(grid):
        k = best_k(target, draft, accelerator, acceptance=acceptance, batch=int(b),
                   context=context, dtype=dtype, draft_dtype=draft_dtype, max_k=max_k,
                   achievable=achievable)
        end = int(grid[i + 1]) - 1 if i + 1 < len(grid) else int(b)
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([int(b), end, k])
    return ranges


def scheduled_speedup(target, draft, accelerator, *, acceptance, schedule, batch, context=0,
                      dtype="fp16", draft_dtype=None, achievable=True) -> float:
    """Decode speed-up at `batch` under a `speculation_schedule` (or a hand-written list of
    [first batch, last batch, k]): `decode_speedup` with the range's k, exactly 1 where
    the range says k = 0 (speculation off: plain decoding). A batch outside every range
    is an error."""
    b = _v.count("batch", batch, maximum=1 << 20)
    for first, last, k in schedule:
        if first <= b <= last:
            if k == 0:
                return 1.0
            return decode_speedup(target, draft, accelerator, acceptance=acceptance, k=k,
                                  batch=b, context=context, dtype=dtype,
                                  draft_dtype=draft_dtype, achievable=achievable)
    raise ValueError(f"batch={b} is in no range of the schedule {schedule}")


#: The speculative-decoding variants engines ship: how each drafts, what a round costs
#: beside the verify step, and what its authors published (the paper's own setting).
#: `vllm_v1`: support in vLLM's docs as read (v0.19.0, docs.vllm.ai/en/v0.19.0/features/
#: speculative_decoding/: EAGLE, MTP, draft model, PARD, MLP speculator, n-gram, suffix
#: decoding; Medusa is not on that page's list, though V1 ships a Medusa proposer,
#: vllm/v1/spec_decode/medusa.py, selected by method "medusa" in its SpeculativeConfig).
VARIANTS = [
    {"variant": "draft model", "drafts_with": "a separate small LM of the same tokenizer",
     "draft_cost": "k full decode steps of the draft (its own KV cache); launch-bound "
                   "when small", "published": "2-3x on T5-XXL (11B), T5-small draft",
                   "acceptance": "alpha 0.5-0.8 by task (the paper's Table 3)",
                   "source": "leviathan2023speculative", "vllm_v1": "yes (v0.19.0 docs)"},
    {"variant": "Medusa", "drafts_with": "extra decoding heads on the target's last hidden "
                                         "state, a tree of candidates",
     "draft_cost": "a few MLP heads: well under one layer's cost; the verify step attends a "
                   "candidate tree", "published": "Medusa-1 over 2.2x, Medusa-2 2.3-3.6x "
                                                  "(Vicuna-7B/13B/33B, batch 1)",
     "acceptance": "", "source": "cai2024medusa",
     "vllm_v1": "in the code (vllm/v1/spec_decode/medusa.py), not in the v0.19.0 docs' list"},
    {"variant": "EAGLE", "drafts_with": "one transformer layer fed the target's features "
                                        "(second-top-layer hidden states) and tokens",
     "draft_cost": "k steps of one layer plus the LM head", "published":
         "2.7-3.5x latency on LLaMA2-Chat 70B; doubles throughput (batch 1)",
     "acceptance": "about 3.5-4 tokens a round (MT-bench)", "source": "li2024eagle",
     "vllm_v1": "yes (v0.19.0 docs)"},
    {"variant": "EAGLE-3", "drafts_with": "one layer fed low, middle and high target "
                                          "features, trained on its own outputs",
     "draft_cost": "as EAGLE", "published": "up to 6.5x (batch 1), about 1.4x over "
                                            "EAGLE-2; 1.38x throughput at batch 64 in SGLang",
     "acceptance": "", "source": "li2025eagle3", "vllm_v1": "yes (v0.19.0 docs)"},
    {"variant": "MTP (DeepSeek-V3)", "drafts_with": "the model's own multi-token-prediction "
                                                    "module (trained with it)",
     "draft_cost": "one extra transformer block a drafted token (k = 1 in the report)",
     "published": "1.8x tokens/s", "acceptance": "85-90% for the second token",
     "source": "deepseek2024v3", "vllm_v1": "yes (v0.19.0 docs)"},
    {"variant": "n-gram / prompt lookup", "drafts_with": "the continuation of the last "
                                                         "n-gram's earlier match in the prompt",
     "draft_cost": "a string search on the host: no GPU work", "published":
         "2-4x on input-grounded tasks (summarisation, document QA); little elsewhere",
     "acceptance": "high where the output copies the input, near 0 otherwise",
     "source": "saxena2023promptlookup", "vllm_v1": "yes (v0.19.0 docs)"},
]


def variants():
    """`VARIANTS` as a DataFrame: each shipped variant's drafter, its cost per round,
    its authors' published speed-up and acceptance, the references.bib key and vLLM
    V1 support as its docs state it. The speed-ups are the papers' (batch 1 unless
    said): `decode_speedup` shows how a batch erodes them."""
    import pandas as pd

    return pd.DataFrame(VARIANTS).set_index("variant")

"""Decisions asked in the labs *Quantised weights* and *Tensor-parallel layers*: which
weight format, or how many GPUs, meets a target. The numbers are the package's models
of catalogue devices (not the learner's measurements), so that everyone gets the same
answer; each question states its units and rounding."""

from .. import achievable as _achievable
from .. import llm, parallel
from . import register

LAB_QUANT = "labs/04_quantised_weights"
LAB_TP = "labs/07_tensor_parallel"

# --- lab 4: the weight format that holds a T4's users ----------------------------------
#: Mistral-7B on one T4, every sequence at this context, the KV cache in fp16.
T4_MODEL, T4_CONTEXT, T4_USERS = "mistral-7b", 4096, 8
#: Weight formats from the most bits (least error) to the fewest.
T4_FORMATS = ("fp16", "int8", "int4")


def t4_batches():
    """The largest batch of `T4_CONTEXT`-token sequences each format holds on one T4
    (`llm.max_batch`: the card's bytes less `llm.DEFAULT_RESERVE_BYTES`)."""
    return {f: llm.max_batch(T4_MODEL, "T4", T4_CONTEXT, f, kv_dtype="fp16")
            for f in T4_FORMATS}


def t4_choice():
    """The format with the most bits that holds `T4_USERS` sequences."""
    batches = t4_batches()
    return next(f for f in T4_FORMATS if batches[f] >= T4_USERS)


@register("lab-quant-t4-format-batch", where=LAB_QUANT,
          question="Mistral-7B on one T4 for 8 users at once, each with 4,096 tokens of "
          "context, the KV cache in fp16. Weights in fp16, int8 (a scale per output "
          "channel) or int4 (an fp16 scale per 32 weights), the embedding table and the "
          "norms staying in fp16 in every case (llm.weight_bytes): take the format with the most "
          "bits that holds all 8 sequences in the T4's memory (hardware.get('T4')"
          ".memory_bytes) less the 1 GiB reserve, and give the largest number of such "
          "sequences it holds.", unit="sequences (a whole number, rounded down)",
          hint="Memory left = the T4's bytes - 1 GiB - the weight bytes "
          "(llm.weight_bytes); each sequence needs 4,096 x its KV bytes per token "
          "(llm.kv_cache_bytes_per_token: Mistral-7B has 8 KV heads, not 32). Try the "
          "formats from fp16 down.",
          rel_tol=0.0,
          slips={
              # int4 (19 sequences) where int8 (13) already holds the 8
              19 / 13: "That is int4's: int8 holds the 8 sequences already, with more bits "
                       "a weight, so it is the choice.",
              # int8 without the reserve: (15.84e9 - 7.37e9) / 536.9e6 = 15.8 -> 15
              15 / 13: "Keep the 1 GiB reserve for the CUDA context and workspace.",
              # the marketing 16 GB, reserve kept: (16e9 - 1.07e9 - 7.37e9) / 536.9e6 -> 14
              # ... and int8 with the embedding table quantised too (7.24e9 B of weights
              # against 7.37e9): 14 as well.
              14 / 13: "Two slips give this: the marketing 16e9 bytes (the T4 has 15.84e9 "
                       "usable, hardware.get('T4').memory_bytes), or the embedding table "
                       "quantised too (it stays in fp16, as llm.weight_bytes counts it); "
                       "or rounding up.",
              # 32 KV heads: 4x the cache per token -> 3
              3 / 13: "Mistral-7B has 8 KV heads (grouped-query attention): its cache is "
                      "131,072 bytes a token in fp16, not 524,288.",
          })
def _():
    return t4_batches()[t4_choice()]


#: Exercise 5: the same users each want this many tokens/s (decode, per sequence).
T4_TOKENS_PER_USER = 25.0


def t4_tokens_per_user(fmt, achievable=True) -> float:
    """Per-sequence decode tokens/s of `T4_USERS` Mistral-7B sequences at `T4_CONTEXT`
    tokens on one T4, weights in `fmt`, the KV cache in fp16: on the achievable model
    (each format at its own efficiency: int8 and int4 weight-only matmuls stream slower
    than dense ones), or at the ceiling (`achievable=False`). A T4 has no calibration
    row: an extrapolation."""
    return _achievable.decode_tokens_per_s(T4_MODEL, "T4", T4_USERS, T4_CONTEXT, fmt,
                                           kv_dtype="fp16", achievable=achievable) / T4_USERS


def t4_speed_choice(achievable=True):
    """The format with the most bits that holds `T4_USERS` sequences and gives each
    `T4_TOKENS_PER_USER` tokens/s (None if none does)."""
    batches = t4_batches()
    return next((f for f in T4_FORMATS if batches[f] >= T4_USERS
                 and t4_tokens_per_user(f, achievable) >= T4_TOKENS_PER_USER), None)


@register("lab-quant-t4-format-speed", where=LAB_QUANT,
          question="The same 8 Mistral-7B users on one T4 (4,096 tokens of context each, the "
          "KV cache in fp16) each want 25 tokens/s. On the achievable model "
          "(achievable.decode_tokens_per_s at batch 8, each format at its own efficiency; "
          "a T4 has no calibration row, so it is an extrapolation), take the format with "
          "the most bits that holds the 8 and meets 25 tokens/s each, and give the tokens/s "
          "each user gets.", unit="tokens/s per user (3 significant figures)",
          hint="achievable.decode_tokens_per_s('mistral-7b', 'T4', 8, 4096, fmt, "
          "kv_dtype='fp16') / 8 for each format that fits; achievable=False gives the "
          "ceiling beside it. Go from the most bits down.",
          rel_tol=0.01,
          slips={
              # the batch's total (decode_tokens_per_s counts all 8 sequences): 212
              float(T4_USERS): "That is the batch's total: decode_tokens_per_s counts all "
                               "8 sequences; divide by 8 for one user's tokens/s.",
              # int8 achievable: 20.3 a user (misses 25); int4 achievable: 26.5
              t4_tokens_per_user("int8") / t4_tokens_per_user("int4"): "That is int8's: on "
              "the achievable model it misses 25 tokens/s a user (its ceiling would pass).",
              t4_tokens_per_user("int8", False) / t4_tokens_per_user("int4"): "That is "
              "int8's ceiling: an engine does not reach it. Decide on the achievable number.",
              t4_tokens_per_user("int4", False) / t4_tokens_per_user("int4"): "That is "
              "int4's ceiling; give what the achievable model says a user gets.",
              # one fraction for every format: gpt-fast's bf16 0.68 of int4's ceiling
              0.68 * t4_tokens_per_user("int4", False) / t4_tokens_per_user("int4"): "That "
              "applies bf16's fraction (0.68) to int4: each format reaches its own fraction "
              "(int4's weight-only kernels stream slower).",
          })
def _():
    return t4_tokens_per_user(t4_speed_choice())


# --- lab 7: the fewest T4s that meet a time per output token over PCIe ------------------
#: Llama-2-13B in fp16 at batch 1 and this context, on T4s that talk over PCIe Gen3 x16
#: (a server of up to 8, as AWS's multi-T4 instances are): TP degrees considered and the
#: time-per-output-token objective, seconds.
TP_MODEL, TP_CONTEXT, TP_LINK = "llama-2-13b", 4096, "PCIe Gen3 x16"
TP_DEGREES = (1, 2, 4, 8)
TP_TPOT_S = 0.030


def tp_options():
    """Per TP degree: whether one sequence fits (`parallel.tp_max_batch` >= 1) and the
    batch-1 step time (`parallel.tp_decode_step_time`, NaN where it does not fit)."""
    rows = {}
    for n in TP_DEGREES:
        fits = parallel.tp_max_batch(TP_MODEL, "T4", n, TP_CONTEXT) >= 1
        step = (parallel.tp_decode_step_time(TP_MODEL, "T4", n, 1, TP_CONTEXT,
                                             interconnect=TP_LINK) if fits else float("nan"))
        rows[n] = {"fits": fits, "step_s": step}
    return rows


_TP_WEIGHT_GB = llm.weight_bytes(TP_MODEL, "fp16") / 1e9
_TP2_MS = 1e3 * tp_options()[2]["step_s"]


@register("lab-tp-t4-fewest-for-tpot", where=LAB_TP,
          question="Llama-2-13B in fp16, one sequence of 4,096 tokens of context, on T4s "
          "joined by PCIe Gen3 x16 (tensor parallelism over 1, 2, 4 or 8 of them; NCCL's "
          "fastest all-reduce). Every T4 costs the same per hour. Which TP degree holds the "
          "model and meets a time per output token of 30 ms at the lowest cost? Give the "
          "number of T4s.", unit="devices (a whole number)",
          hint="For each degree N: does tp_max_batch(..., N, 4096) reach 1, and is "
          "tp_decode_step_time('llama-2-13b', 'T4', N, 1, 4096, interconnect='PCIe Gen3 "
          f"x16') within 0.030 s? The weight read alone is {_TP_WEIGHT_GB:.0f} GB / N over "
          "320 GB/s; the all-reduces (2 x 40 layers + 1) add to it. Take the smallest N "
          "that passes both.",
          rel_tol=0.0,
          slips={0.5: "Two T4s hold the model and one sequence, but a token takes about "
                      f"{_TP2_MS:.0f} ms there: the objective, not the memory, decides.",
                 0.25: f"One T4 cannot hold {_TP_WEIGHT_GB:.0f} GB of fp16 weights.",
                 2.0: "Eight meet the objective too, at twice the cost: fewer already do."})
def _():
    opts = tp_options()
    return next(n for n in TP_DEGREES if opts[n]["fits"] and opts[n]["step_s"] <= TP_TPOT_S)

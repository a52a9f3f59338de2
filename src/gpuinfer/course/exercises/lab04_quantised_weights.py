"""The exercises asked in `labs/04_quantised_weights` (every registration here has
`where="labs/04_quantised_weights"`) and the helpers only they use."""

from gpuinfer.predict import achievable as _achievable
from gpuinfer.measure import decoding
from gpuinfer import dtypes
from gpuinfer.predict import llm
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import published

QUANT = "labs/04_quantised_weights"


# --- lab: quantised weights ------------------------------------------------------------------

@register("lab-quant-dequant-traffic", where=QUANT,
          question="DRAM bytes per weight of an int4 weight (two packed in a byte, its "
          "scales left out) dequantised to fp16 in one temporary and then multiplied (eager "
          "PyTorch): the int8 kernel's traffic model, which the lab prints, applied to int4",
          unit="bytes per weight (exact)",
          hint="Count every pass over the weight: the packed int4 read, the fp16 temporary "
          "written, and the temporary read again by the matmul.", rel_tol=0.0,
          slips={
              # the int8 kernel's figure, 1 + 2 + 2 = 5, which the lab prints on a GPU
              5 / 4.5: "That is the int8 weight's traffic: an int4 weight is half a byte.",
              # the temporary counted once: 0.5 + 2
              2.5 / 4.5: "The matmul reads the temporary back: count it written and read."})
def _():
    # The int8-dequant traffic model with the int4 read in place of the int8 one.
    int8 = decoding.weight_traffic_bytes_per_weight("int8-dequant", "fp16")
    return int8 - dtypes.bytes_per_element("int8") + dtypes.get("int4").bits / 8


@register("lab-quant-int4-group-bytes", where=QUANT,
          question="Bytes per weight of int4 weights with one fp16 scale per group of 32",
          unit="bytes per weight (exact)", hint="Half a byte per weight, plus the scale's "
          "bytes shared by its group.", rel_tol=0.0, slips={0.5 / 0.5625: "That is the int4 values alone: "
                                         "add each weight's share of its group's scale.",
                                         0.625 / 0.5625: "That adds a zero point per group "
                                         "too (gpt-fast's asymmetric int4); this int4 is "
                                         "symmetric: a scale only."})
def _():
    int4 = dtypes.get("int4")
    return int4.bits / 8 + dtypes.bytes_per_element("fp16") / int4.block_size


@register("lab-quant-gptfast-int4-share", where=QUANT,
          question="gpt-fast's measured int4 speed-up over bf16 (A100, Llama-2-7B, batch 1, "
          "groups of 32 with a bf16 scale and a bf16 zero point each) as a fraction of what "
          "the bytes ratio promises", unit="fraction (0 to 1), two significant figures",
          hint="Speed-up is int4 tokens/s over bf16 tokens/s; divide it by the bytes "
          "ratio, 2 bytes against half a byte plus the group's scale and zero point "
          "shared by 32 weights (dtypes.bytes_per_element('int4-g32-zp')).",
          rel_tol=0.02, slips={
              # 0.5625 B: the scale counted, the zero point forgotten
              0.5625 / 0.625: "Count the zero point too: gpt-fast's int4 is asymmetric, "
                              "a bf16 scale and a bf16 zero point per 32 weights.",
              # 0.5 B: neither counted
              0.5 / 0.625: "Count the group's scale and zero point: gpt-fast's int4 stores "
                           "more than half a byte a weight."})
def _():
    speedup = (published("quantised", "gpt-fast int4")
               / published("decode", "gpt-fast, torch.compile"))
    return speedup / (dtypes.bytes_per_element("bf16") / dtypes.bytes_per_element("int4-g32-zp"))

LAB_QUANT = "labs/04_quantised_weights"

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

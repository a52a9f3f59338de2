"""Exercises of the labs *fp16 matmuls on the roofline*, *A decode step, batched* and
*Quantised weights*. Every answer is computed with the package."""

from .. import decoding, dtypes, hardware, llm, reference, roofline  # noqa: F401
from . import register

MATMUL = "labs/02_matmul_roofline"
DECODE = "labs/03_decode_batching"
QUANT = "labs/04_quantised_weights"


def _published(experiment, what_starts, entry="A100 80GB"):
    for p in reference.PUBLISHED:
        if (p["experiment"] == experiment and p["catalogue_entry"] == entry
                and p["what"].startswith(what_starts)):
            return p["value"]
    raise KeyError(f"no published {experiment} figure starting {what_starts!r} for {entry}")


# --- lab: fp16 matmuls on the roofline --------------------------------------------------------

@register("lab-matmul-batch64-intensity", where=MATMUL,
          question="Arithmetic intensity of [64, 8192] @ [8192, 8192] in fp16 "
          "(64 sequences through one weight matrix)", unit="FLOP/byte",
          hint="FLOPs are 2*m*n*k; bytes are A, B and C once each at 2 bytes. The weight "
          "dominates the bytes, so the answer is a little under the batch.")
def _():
    return roofline.matmul_intensity(64, 8192, 8192, "fp16")


@register("lab-matmul-ridge-batch-a100", where=MATMUL,
          question="Smallest m at which [m, 8192] @ [8192, 8192] in fp16 is compute-bound "
          "on an A100 80GB (its intensity reaches the fp16 ridge point)", unit="rows",
          hint="The ridge is the dense fp16 peak over the bandwidth; the intensity is "
          "about m * 8192 / (2m + 8192). Solve for m, round up.", rel_tol=0.02)
def _():
    return roofline.ridge_rows(8192, 8192, "A100 80GB", "fp16")


@register("lab-matmul-mamf-fraction-h100", where=MATMUL,
          question="Published maximum achievable matmul throughput (MAMF) of an H100 SXM as "
          "a fraction of its dense bf16 datasheet peak", unit="fraction (0 to 1)",
          hint="Divide the MAMF figure by the dense peak (half the datasheet's sparse "
          "figure).", rel_tol=0.01)
def _():
    return _published("matmul", "MAMF", "H100 SXM") / hardware.get("H100 SXM").peak_flops("bf16")


# --- lab: a decode step, batched ------------------------------------------------------------

@register("lab-decode-kv-bytes-per-sequence", where=DECODE,
          question="KV-cache bytes one Mistral-7B sequence of 4,096 tokens holds in fp16",
          unit="bytes (exact)", hint="2 (K and V) x layers x KV heads x head_dim x 2 bytes, "
          "per token, times the tokens.", rel_tol=0.0,
          slips={
              # 32 KV heads (the query heads): 4x the cache
              4.0: "Mistral-7B has 8 KV heads (grouped-query attention), not its 32 query "
                   "heads.",
              # 4 bytes a value: fp32, not fp16 (tried before the common 2x slip)
              2.0: "Twice the answer: 4 bytes a value is fp32; fp16 takes 2.",
              # K or V alone
              0.5: "Half the answer: count both the keys and the values."})
def _():
    return 4096 * llm.kv_cache_bytes_per_token("mistral-7b", "fp16")


@register("lab-decode-compute-bound-batch-h200", where=DECODE,
          question="Smallest batch at which a Mistral-7B fp16 decode step's weight matmuls "
          "are compute-bound on an H200 (at any context: attention stays memory-bound)",
          unit="sequences",
          hint="The matmuls do 2 FLOPs per 2-byte weight per sequence, so their intensity "
          "is about the batch: start from the fp16 ridge point (dense peak / bandwidth); "
          "the activations each matmul reads and writes push it a few percent higher.",
          rel_tol=0.05,
          slips={
              # The ridge itself, 989e12 / 4.8e12 = 206 FLOP/byte, against the answer 221.
              hardware.get("H200").ridge_point("fp16") / llm.compute_bound_batch(
                  "mistral-7b", "H200"):
                  "That is the ridge point itself, the first estimate: the activations "
                  "each matmul reads and writes add bytes, so the intensity is a little "
                  "under the batch and the batch must be a few percent higher "
                  "(llm.compute_bound_batch counts them)."})
def _():
    return llm.compute_bound_batch("mistral-7b", "H200")


@register("lab-decode-gptfast-fraction", where=DECODE,
          question="Fraction of the batch-1 weight-read ceiling that gpt-fast's compiled "
          "Llama-2-7B reached on an A100 80GB (the reference.PUBLISHED row whose 'what' is "
          "'gpt-fast, torch.compile')", unit="fraction (0 to 1)",
          hint="The ceiling is the bandwidth over the weight bytes (parameters x 2 bytes); "
          "divide the published tokens/s by it.", rel_tol=0.02)
def _():
    tokens_per_s = _published("decode", "gpt-fast, torch.compile")
    ceiling = llm.weight_read_ceiling(llm.get("llama-2-7b").n_params, 2,
                                      hardware.get("A100 80GB").bandwidth)
    return tokens_per_s / ceiling


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
    speedup = (_published("quantised", "gpt-fast int4")
               / _published("decode", "gpt-fast, torch.compile"))
    return speedup / (dtypes.bytes_per_element("bf16") / dtypes.bytes_per_element("int4-g32-zp"))

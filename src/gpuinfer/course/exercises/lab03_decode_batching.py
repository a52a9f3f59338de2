"""The exercises asked in `labs/03_decode_batching` (every registration here has
`where="labs/03_decode_batching"`) and the helpers only they use."""

from gpuinfer import hardware
from gpuinfer.predict import llm, speculative
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import published

DECODE = "labs/03_decode_batching"


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
    return 4096 * step_model.kv_cache_bytes_per_token("mistral-7b", "fp16")


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
    tokens_per_s = published("decode", "gpt-fast, torch.compile")
    ceiling = llm.weight_read_ceiling(architectures.get("llama-2-7b").n_params, 2,
                                      hardware.get("A100 80GB").bandwidth)
    return tokens_per_s / ceiling


# --- lab 3: the batch above which speculative decoding stops paying ---------------------------
SPEC_TARGET, SPEC_DRAFT, SPEC_GPU = "llama-3-8b", "llama-3.2-1b", "H100 SXM"
SPEC_ACCEPTANCE, SPEC_K, SPEC_CONTEXT = 0.7, 4, 1024
SPEC_BATCHES = (1, 16, 64, 128, 256, 512)


def spec_speedups(achievable=True) -> dict:
    """{batch: speculative.decode_speedup} for the exercise's settings, on the achievable
    model (default) or the ceiling (`achievable=False`)."""
    return {b: speculative.decode_speedup(SPEC_TARGET, SPEC_DRAFT, SPEC_GPU,
                                          acceptance=SPEC_ACCEPTANCE, k=SPEC_K, batch=b,
                                          context=SPEC_CONTEXT, achievable=achievable)
            for b in SPEC_BATCHES}


@register("lab-decode-speculation-largest-batch", where=DECODE,
          question="Llama-3-8B in fp16 on an H100 SXM, drafted by Llama-3.2-1B with k = 4 "
          "tokens a round and acceptance 0.7, at a context of 1,024 tokens: of the batches 1, "
          "16, 64, 128, 256 and 512, what is the largest at which speculative decoding still "
          "speeds decoding up on the achievable model (speculative.decode_speedup with "
          "achievable=True above 1)?",
          unit="sequences (one of the batches listed)",
          hint="Compute speculative.decode_speedup(target, draft, 'H100 SXM', acceptance=0.7, "
          "k=4, batch=b, context=1024, achievable=True) for each batch; the verify step costs "
          "more plain steps once the target's matmuls turn compute-bound, and the draft's "
          "steps pay an engine's fixed cost each.",
          slips={
              2.0: "At that batch the verify step of 5 tokens a sequence is compute-bound and "
              "costs about two plain steps: the speed-up is below 1.",
              0.5: "Speculation still pays at the next batch up: check it.",
          })
def _():
    return max(b for b, s in spec_speedups().items() if s > 1)

"""Decisions asked in the measuring labs *Weight reads*, *fp16 matmuls on the roofline* and
*A decode step, batched*: which GPU, or whether to speculate, meets a target at the lowest
cost. The inputs are fixed here (published figures and example prices, not the learner's
measurements), so that everyone gets the same answer; each answer is computed with the
package."""

from .. import achievable as _achievable
from .. import cost, hardware, llm, speculative
from . import register
from .roofline import GPT_FAST_A100_BYTES_PER_S

WEIGHT_READS = "labs/01_weight_reads"
MATMUL = "labs/02_matmul_roofline"
DECODE = "labs/03_decode_batching"


def _price(name):
    return cost.example_price(name).price_per_hour


#: USD/h of one GPU: AWS g4dn.xlarge (1 T4), g5.xlarge (1 A10G), and an eighth of a
#: p5.48xlarge Capacity Block (8 H100 SXM) (cost.EXAMPLE_PRICES).
GPU_PRICES = {"T4": _price("AWS g4dn.xlarge"), "A10G": _price("AWS g5.xlarge"),
              "H100 SXM": _price("AWS p5.48xlarge (Capacity Block)") / 8}


# --- lab 1: the cheapest GPU that decodes fast enough at batch 1 ------------------------------
STREAM_TOKENS_PER_S = 20.0  # the target for one stream of Llama-2-7B at batch 1
STREAM_MODEL, STREAM_CONTEXT = "llama-2-7b", 0


def gpt_fast_fraction() -> float:
    """gpt-fast's weight bandwidth over the A100 80GB's datasheet bandwidth."""
    return GPT_FAST_A100_BYTES_PER_S / hardware.get("A100 80GB").bandwidth


def stream_tokens_per_s(gpu, fraction=None, *, achievable=True) -> float:
    """Batch-1 Llama-2-7B fp16 decode tokens/s on `gpu`. Default: what an engine achieves
    (`achievable.decode_tokens_per_s`, the fitted model); `achievable=False`: the
    ceiling. With `fraction`: that fraction of the datasheet bandwidth over every weight
    read once (the exercise's former one-number rule, kept for its slips)."""
    if fraction is not None:
        return fraction * hardware.get(gpu).bandwidth / llm.weight_bytes(STREAM_MODEL, "fp16")
    return _achievable.decode_tokens_per_s(STREAM_MODEL, gpu, 1, STREAM_CONTEXT, "fp16",
                                           achievable=achievable)


@register("lab-weight-reads-cheapest-gpu", where=WEIGHT_READS,
          question="One stream of Llama-2-7B in fp16 must decode at batch 1 at 20 tokens/s or "
          "more, on a T4 (USD 0.526/h), an A10G (USD 1.006/h) or an H100 SXM (an eighth of "
          "USD 39.33/h), each at what an engine achieves by the course's achievable model "
          "(achievable.decode_tokens_per_s, batch 1, context 0), the ceiling beside it. "
          "What does the cheapest that meets the target cost per hour?",
          unit="USD per hour (to the cent)",
          hint="achievable.decode_tokens_per_s('llama-2-7b', gpu, 1, 0, 'fp16') for each GPU "
          "(achievable=False gives the ceiling). Keep the GPUs that reach 20 tokens/s on the "
          "achievable model, not the ceiling; pick the cheapest per hour.",
          slips={
              # the T4: 24.2 tokens/s at the ceiling, 19.8 achievable (an extrapolation:
              # no T4 row in the calibration)
              GPU_PRICES["T4"] / GPU_PRICES["A10G"]: "That is the T4: its ceiling is about "
              "24 tokens/s, but an engine achieves about 19.8 by the achievable model (an "
              "extrapolation: no T4 measurement calibrates it), short of 20. Decide on the "
              "achievable number.",
              GPU_PRICES["H100 SXM"] / GPU_PRICES["A10G"]: "The H100 meets the target, but "
              "it is not the cheapest that does.",
              8 * GPU_PRICES["H100 SXM"] / GPU_PRICES["A10G"]: "That is the whole 8-GPU "
              "instance, and not the cheapest GPU that meets the target.",
          })
def _():
    meets = [g for g in GPU_PRICES if stream_tokens_per_s(g) >= STREAM_TOKENS_PER_S]
    return min(GPU_PRICES[g] for g in meets)


# --- lab 2: the cheapest GPUs for a compute-bound batch job -----------------------------------
JOB_FLOPS = 1e18  # large fp16 matmuls, compute-bound; split evenly over the GPUs rented


def job_cost_usd(gpu, flops_per_s=None) -> float:
    """USD to run `JOB_FLOPS` on `gpu` at `flops_per_s` (default its published achievable
    fp16 matmul rate, `hardware.achievable`), paying `GPU_PRICES[gpu]` an hour."""
    rate = hardware.achievable(gpu)["matmul_fp16_flops"] if flops_per_s is None else flops_per_s
    return JOB_FLOPS / rate / 3600 * GPU_PRICES[gpu]


@register("lab-matmul-cheapest-job", where=MATMUL,
          question="A batch job runs 1e18 FLOP of large fp16 matmuls (compute-bound), split "
          "evenly over as many GPUs as you rent. T4s cost USD 0.526/h each; H100 SXMs cost "
          "USD 39.33/h for 8. Each runs at its published achievable fp16 matmul rate "
          "(hardware.achievable). What does the job cost on the cheaper kind?",
          unit="USD (to 3 significant figures)",
          hint="Hours = 1e18 / achievable FLOP/s / 3600, for one GPU (more GPUs divide the "
          "hours and multiply the price: the cost is the same). Cost = hours x price of one "
          "GPU. Compare the two kinds.",
          slips={
              job_cost_usd("T4") / job_cost_usd("H100 SXM"): "That is the T4s: cheaper per "
              "hour, but the H100 does more FLOPs per dollar.",
              job_cost_usd("H100 SXM", hardware.get("H100 SXM").peak_flops("fp16"))
              / job_cost_usd("H100 SXM"): "That uses the datasheet's dense peak; real "
              "matmuls reach the achievable rate (hardware.achievable).",
              job_cost_usd("H100 SXM", 2 * hardware.get("H100 SXM").peak_flops("fp16"))
              / job_cost_usd("H100 SXM"): "That uses the datasheet's sparse figure (twice the "
              "dense peak), and the peak rather than the achievable rate.",
              8.0: "That prices each H100 at the whole 8-GPU instance: one GPU costs an eighth.",
          })
def _():
    return min(job_cost_usd(g) for g in ("T4", "H100 SXM"))


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

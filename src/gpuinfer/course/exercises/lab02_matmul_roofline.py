"""The exercises asked in `labs/02_matmul_roofline` (every registration here has
`where="labs/02_matmul_roofline"`) and the helpers only they use."""

from gpuinfer import hardware
from gpuinfer.predict import roofline
from gpuinfer.hardware import measured_rates
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import GPU_PRICES, published

MATMUL = "labs/02_matmul_roofline"


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
    return published("matmul", "MAMF", "H100 SXM") / hardware.get("H100 SXM").peak_flops("bf16")


# --- lab 2: the cheapest GPUs for a compute-bound batch job -----------------------------------
JOB_FLOPS = 1e18  # large fp16 matmuls, compute-bound; split evenly over the GPUs rented


def job_cost_usd(accelerator, flops_per_s=None) -> float:
    """USD to run `JOB_FLOPS` on `accelerator` at `flops_per_s` (default its published achievable
    fp16 matmul rate, `hardware.achievable`), paying `GPU_PRICES[gpu]` an hour."""
    rate = measured_rates.achievable(accelerator)["matmul_fp16_flops"] if flops_per_s is None else flops_per_s
    return JOB_FLOPS / rate / 3600 * GPU_PRICES[accelerator]


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

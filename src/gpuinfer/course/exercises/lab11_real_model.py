"""The exercises asked in `labs/11_real_model` (every registration here has
`where="labs/11_real_model"`) and the helpers only they use."""

from gpuinfer.predict import achievable as _achievable
from gpuinfer import hardware
from gpuinfer.predict import speculative
from gpuinfer.predict import step_model
from gpuinfer.measure.real_model import SPEC
from gpuinfer.course.exercises import register

LAB = "labs/11_real_model"


def weight_read_s(accelerator, dtype="fp16"):
    """Seconds to read SmolLM2-135M's decode-step weights once at `accelerator`'s datasheet
    bandwidth (every linear layer and the tied LM head)."""
    return step_model.step_weight_bytes(SPEC, dtype) / hardware.get(accelerator).bandwidth


#: SmolLM2-135M's linear layers alone over the step's weights (the LM head left out).
_NO_HEAD = 1 - SPEC.vocab_size * SPEC.d_model / (step_model.step_weight_bytes(SPEC, "fp16") / 2)


@register("lab-real-weight-read-us-t4", where=LAB,
          question="A batch-1 decode step of SmolLM2-135M in fp16 reads every linear layer's "
          "weights and the LM head (tied to the embedding) once. How long does that read take "
          "at a T4's datasheet bandwidth (320 GB/s)? Microseconds, 3 significant figures.",
          unit="us",
          hint="Per layer: Q and O are 576 x 576, K and V 192 x 576, gate, up and down "
          "1,536 x 576; 30 layers, then the 49,152 x 576 head; 2 bytes each, over 320e9 B/s.",
          slips={2.0: "That is 4 bytes a weight (fp32): the question asks about fp16, 2.",
                 _NO_HEAD: "That leaves out the LM head: the tied embedding is read whole "
                           "as the head every step.",
                 1 + (1 - _NO_HEAD): "That counts the embedding table and the head twice: "
                                     "they are one table, and the embedding only gathers a row."})
def _():
    return weight_read_s("T4") * 1e6


@register("lab-real-launches-per-read-h100", where=LAB,
          question="On an H100 SXM (3.35 TB/s), reading SmolLM2-135M's fp16 decode-step "
          "weights once takes as long as how many kernel launches of 3.8 us each, NVIDIA's "
          "back-to-back figure from C++ (achievable.EAGER_LAUNCH_S: the pace of launches of a "
          "2.9 us kernel, an upper bound on C++'s own cost a launch; PyTorch's dispatch from "
          "Python costs more)? Compare with the launches a step torch.profiler "
          "counted in the lab. Launches, 3 significant figures.", unit="launches",
          hint="The weight read in seconds (the bytes of the first exercise over 3.35e12 B/s) "
          "divided by 3.8e-6 s.",
          slips={3.35e12 / 320e9: "That uses a T4's bandwidth: this question is about an "
                                  "H100 SXM."})
def _():
    return weight_read_s("H100 SXM") / _achievable.EAGER_LAUNCH_S


@register("lab-real-spec-speedup", where=LAB,
          question="Prompt-lookup decoding drafts k = 4 tokens a round for free (a string "
          "search on the host). Each drafted token is accepted with probability 0.7, and the "
          "verify step of 5 tokens costs 1.2 plain decode steps. What speed-up over plain "
          "decoding does `speculative.speedup` predict? A ratio, 3 significant figures.",
          unit="ratio",
          hint="Expected tokens a round, (1 - alpha^(k+1)) / (1 - alpha), over the round's "
          "cost in plain steps: k x 0 for the drafts plus 1.2 for the verify step.",
          slips={1.2: "That takes the verify step as one plain step: here it costs 1.2.",
                 (1 + 4 * 0.7) / (1 - 0.7**5) * 0.3: "That is 1 + k alpha tokens a round: a "
                 "rejection ends the round, so later drafts count only if all before them "
                 "were accepted."})
def _():
    return speculative.speedup(0.7, 4, 0.0, verify_cost=1.2)

"""The exercises asked in `chapters/05_serving` (every registration here has
`where="chapters/05_serving"`) and the helpers only they use."""

from gpuinfer import hardware
from gpuinfer.predict import llm, mig_sizing, validation
from gpuinfer.hardware import mig_slices
from gpuinfer.predict import step_model
from gpuinfer.predict import colocation
from gpuinfer.measure import fusion
from gpuinfer.course.exercises import register

WHERE = "chapters/05_serving"

#: The decision exercise: serve this model, format and batch on a MIG slice of this GPU,
#: every sequence at this context, each decode step within this time per output token
#: (`mig_sizing.smallest_mig_profile` decides, on the achievable model by default). The
#: format is FP8 W8A8 (weights and activations in fp8, the matmuls at the fp8 peak), what
#: an H100 deployment uses (chapter 4), not int8 weight-only.
DECISION = {"model": "llama-3-8b", "dtype": "fp8", "compute_dtype": "fp8", "gpu": "H100 SXM",
            "batch": 8, "context": 4096, "tpot_s": 0.015}
#: The validation rows whose errors bound the decision's steps (`validation.interval`):
#: batched decode of a dense model.
DECISION_REGIME = "dense throughput"


def decision_intervals():
    """The decision's profiles within the achievable model's error in `DECISION_REGIME`:
    `mig_sizing.mig_options` for `DECISION` (rows that hold the batch), with the step's
    interval (tpot_low_s, tpot_high_s: `validation.interval` per="cost", 80% of published
    measurements) and two flags: could_meet (the interval's low end meets the objective)
    and could_miss (its high end misses it). The choice could flip where a smaller
    profile could meet the objective or the chosen one could miss it."""
    d = DECISION
    t = mig_sizing.mig_options(d["model"], accelerator=d["gpu"], batch=d["batch"],
                               context=d["context"], dtype=d["dtype"],
                               compute_dtype=d["compute_dtype"])
    t = t[t["max_batch"] >= d["batch"]].copy()
    bounds = [validation.interval(s, DECISION_REGIME, per="cost") for s in t["tpot_s"]]
    t["tpot_low_s"], t["tpot_high_s"] = [b[0] for b in bounds], [b[1] for b in bounds]
    t["could_meet"] = t["tpot_low_s"] <= d["tpot_s"]
    t["could_miss"] = t["tpot_high_s"] > d["tpot_s"]
    return t


@register("serving-gelu-unfused-bytes", where=WHERE,
          question="DRAM bytes the unfused tanh-GELU chain (serving.gelu_tanh_unfused, 8 "
          "ops) moves over 1,000,000 fp16 elements. Bytes, exact.", unit="bytes",
          hint="Each op reads its tensor inputs and writes one output; two of the eight "
          "ops read x a second time (serving.GELU_TANH_OP_INPUTS). Count tensors of n "
          "elements at 2 bytes each.",
          slips={16 / 18: "16 tensors: the second reads of x (ops 3 and 7 read x and y) "
                          "are missing.",
                 2.0: "Twice the answer: fp16 is 2 bytes an element, not 4.",
                 2 / 18: "That is the fused kernel (read x once, write once); the "
                         "question asks for the unfused chain of 8 kernels."})
def _():
    return fusion.elementwise_chain_bytes(1_000_000, fusion.GELU_TANH_OP_INPUTS, "fp16")


def _h200_instances(backend):
    """Instances of the Llama-2-7B deployment of the two H200 exercises."""
    return colocation.max_instances(colocation.deployment("chat", "llama-2-7b", workspace_bytes=2e9,
                                                    backend=backend), "H200")


#: The two backends' answers, and the TensorRT answer with the shared copy forgotten
#: (the usable bytes divided by the workspace alone).
_PT, _TRT = _h200_instances("pytorch"), _h200_instances("tensorrt")
_TRT_NO_WEIGHTS = int((hardware.get("H200").memory_bytes - llm.DEFAULT_RESERVE_BYTES) // 2e9)


@register("serving-h200-instances", where=WHERE,
          question="Instances of Llama-2-7B (fp16 weights, llm.weight_bytes; 2e9 bytes of "
          "workspace each, no KV cache) that fit on an H200 served by Triton's PyTorch "
          "backend (a copy of the weights per instance). The card has "
          f"{hardware.get('H200').memory_bytes:,.0f} B; hold back llm.DEFAULT_RESERVE_BYTES "
          "(1 GiB = 2**30 B). Whole instances: round down.", unit="instances",
          hint="(memory - reserve) // (weights + workspace), with the card's bytes as "
          "given (not the marketing 141e9) and the reserve held back.", rel_tol=0.0,
          slips={(_PT + 1) / _PT: "Rounded up: round down, a partial instance does not "
                                  "run.",
                 _TRT / _PT: "That shares one copy of the weights among the instances (the "
                         "TensorRT backend); the PyTorch backend loads a copy per "
                         "instance."})
def _():
    return _h200_instances("pytorch")


@register("serving-h200-instances-tensorrt", where=WHERE,
          question="The same Llama-2-7B deployment (fp16, 2e9 bytes of workspace per "
          "instance, no KV cache) on the same H200, now served by Triton's TensorRT "
          "backend, which shares one engine (one copy of the weights) among the "
          "instances on a GPU. Instances that fit, reserve held back; round down.",
          unit="instances",
          hint="The weights are paid once; each instance adds only its workspace: "
          "(memory - reserve - weights) // workspace.", rel_tol=0.0,
          slips={_PT / _TRT: "That pays a copy of the weights per instance (the PyTorch "
                         "backend); here one engine is shared.",
                 _TRT_NO_WEIGHTS / _TRT: "The one shared copy of the weights still takes memory: "
                          "subtract it before dividing by the workspace.",
                 (_TRT + 1) / _TRT: "Rounded up: round down, a partial instance does not run."})
def _():
    return _h200_instances("tensorrt")


#: Llama-3-8B's fp16 weights and the KV cache of 16 x 4,096 tokens (bytes), for the slips.
_W8 = step_model.weight_bytes("llama-3-8b")
_KV16 = 16 * 4096 * step_model.kv_cache_bytes_per_token("llama-3-8b")


@register("serving-kv-instance-bytes", where=WHERE,
          question="Memory of one Llama-3-8B fp16 instance holding a KV cache for 16 "
          "sequences of 4,096 tokens (weights + KV cache, no workspace). Bytes; 3 "
          "significant figures are enough.", unit="bytes",
          hint="Weights: llm.weight_bytes (parameters x 2 bytes). KV per token: 2 x "
          "layers x KV heads x head_dim x 2 bytes, times 16 x 4,096 tokens.",
          slips={(_W8 + 4 * _KV16) / (_W8 + _KV16): "The KV cache is 4x too big: "
                 "Llama-3-8B has 8 KV heads, not its 32 query heads.",
                 _W8 / (_W8 + _KV16): "Only the weights: add the KV cache of the 16 sequences.",
                 _KV16 / (_W8 + _KV16): "Only the KV cache: add the weights.",
                 (_W8 + _KV16 / 2) / (_W8 + _KV16): "The KV cache is half what it should "
                 "be: count K and V (the factor 2)."})
def _():
    return colocation.deployment("chat", "llama-3-8b", batch=16, context=4096).total_bytes


def _mig_answer(achievable):
    d = DECISION
    choice = mig_sizing.smallest_mig_profile(d["model"], d["gpu"], d["batch"], d["context"],
                                             d["tpot_s"], d["dtype"],
                                             compute_dtype=d["compute_dtype"],
                                             achievable=achievable)
    return float(mig_slices.mig_profiles(d["gpu"]).loc[choice, "max_instances"])


#: The decision's answer on the achievable model, and the ceiling's (a slip).
_MIG_ACH, _MIG_CEIL = _mig_answer(True), _mig_answer(False)


@register("serving-decision-mig-profile", where=WHERE,
          question="Decision: serve Llama-3-8B in FP8 (W8A8: fp8 weights and activations, "
          "compute_dtype='fp8'), 8 "
          f"sequences at 4,096 tokens of context each, every decode step within "
          f"{DECISION['tpot_s'] * 1e3:g} ms (TPOT) on the achievable model, on one MIG "
          "slice of an H100 SXM (hardware.mig_slice; llm.max_batch on the slice, the "
          "default reserve held back; the step from achievable.decode_step_s on the "
          "slice, mig_sizing.mig_options). Pick the smallest profile that "
          "holds the batch and meets the TPOT (fewest compute slices, then fewest memory "
          "slices). Answer with how many instances of that profile one H100 holds "
          "(max_instances in hardware.mig_profiles): a whole number.",
          unit="instances of the chosen profile",
          hint="Check memory first (weights, KV cache of 8 x 4,096 tokens and the reserve "
          "against the slice's bytes), then the TPOT on the achievable model on the "
          "slice's own bandwidth: a slice gets its memory slices' share of the bandwidth "
          "(m/8), not the whole card's, an engine reaches only part of it and adds a fixed "
          "cost a step, and a compute slice more does not speed up a memory-bound step.",
          rel_tol=0.0,
          # (7, 1g.10gb's count, is left to the hint: it checks memory first.)
          slips={_MIG_CEIL / _MIG_ACH: "That is the roofline's answer: on the ceiling that "
                 "slice meets the target, but an engine's step on it (the achievable model) "
                 "does not. Time the step with achievable.decode_step_s.",
                 3 / _MIG_ACH: "2g.20gb has the same memory slices, hence the same "
                               "bandwidth and TPOT, as 1g.20gb: both miss the target on "
                               "the achievable model.",
                 1 / _MIG_ACH: "That is a whole GPU's worth (4g.40gb or 7g.80gb): a "
                               "smaller slice meets the target."})
def _():
    return _MIG_ACH

"""The exercises asked in `chapters/10_mixture_of_experts` (every registration here has
`where="chapters/10_mixture_of_experts"`) and the helpers only they use."""

from .. import cost, expert_parallel, llm
from . import register
from .common import DS

WHERE = "chapters/10_mixture_of_experts"

#: The decision exercise: Qwen3-235B-A22B on one HGX server of 8 GPUs, every sequence at
#: this context, each decode step within the time-per-output-token objective.
DECISION_MODEL, DECISION_CONTEXT, DECISION_TPOT_S, DECISION_GPUS = (
    "qwen3-235b-a22b", 4096, 0.030, 8)
#: The GPUs and the example instances that price them (`gpuinfer.cost.EXAMPLE_PRICES`: AWS
#: EC2 Capacity Blocks, eight GPUs an instance). Inputs to edit, not facts about your bill.
DECISION_INSTANCES = {"H100 SXM": "AWS p5.48xlarge (Capacity Block)",
                      "H200": "AWS p5e.48xlarge (Capacity Block)"}
#: Weight formats: bf16/fp16 as Qwen publishes the model, fp8 weights (Qwen also ships an
#: fp8 checkpoint with 128 x 128 block scales; here its bytes, the matmuls at the 16-bit peak).
DECISION_FORMATS = ("fp16", "fp8")
#: The layouts compared: all three of `expert_parallel.moe_layouts`.
DECISION_LAYOUTS = expert_parallel.LAYOUTS


#: USD per GPU-hour of each decision GPU: its instance's price over its GPUs.
DECISION_PRICES = {gpu: cost.price_per_gpu_hour(instance)
                   for gpu, instance in DECISION_INSTANCES.items()}


@register("moe-active-fraction-deepseek", where=WHERE,
          question="What fraction of DeepSeek-V3's parameters does one token use "
          "(llm.get('deepseek-v3').n_active_params over n_params)? A fraction between 0 and "
          "1, three significant figures.", unit="fraction",
          hint="Active: every weight but the routed experts a token is not sent to; each of "
          "the 58 MoE layers keeps its shared expert and 8 of its 256 routed experts "
          "(3 x 7168 x 2048 weights each). The embedding and the LM head count in both.",
          slips={(DS.experts_per_token / DS.n_experts)
                 / (DS.n_active_params / DS.n_params): "That is k/E, the routed experts' share alone: "
                 "attention, the dense layers, the shared expert and the embeddings are "
                 "active for every token too."})
def _():
    m = llm.get("deepseek-v3")
    return m.n_active_params / m.n_params


@register("moe-experts-touched-deepseek-64", where=WHERE,
          question="Under uniform routing, how many distinct routed experts does one "
          "DeepSeek-V3 MoE layer (256 experts, top-8) read for a decode batch of 64 "
          "tokens? Expected value, one decimal.", unit="experts",
          hint="A given expert is missed by one token with probability 1 - 8/256, by all 64 "
          "with that to the 64th power: E (1 - (1 - k/E)^64).",
          slips={min(256, 64 * 8) / llm.experts_touched(DS, 64):
                 "That is 64 x 8 capped at E: tokens share experts; count each expert once.",
                 8 / llm.experts_touched(DS, 64): "That is k, the batch-1 count."})
def _():
    return llm.experts_touched("deepseek-v3", 64)


@register("moe-step-gb-deepseek-64", where=WHERE,
          question="How many GB of weights does one DeepSeek-V3 decode step of 64 tokens read "
          "in fp8 (llm.step_weight_bytes(model, 'fp8', 64): the layers' matmul weights, the "
          "touched experts, the routers in bf16, the LM head)? GB (1e9 bytes), three "
          "significant figures.", unit="GB",
          hint="Attention, the 3 dense MLPs, the 58 shared experts and the LM head are read "
          "whatever the batch; add 58 layers x the experts touched at 64 tokens x 3 x 7168 "
          "x 2048 bytes, and the routers (7168 x 256 a layer, 2 bytes).",
          slips={llm.step_weight_bytes(DS, "fp8", 1 << 20)
                 / llm.step_weight_bytes(DS, "fp8", 64): "That is every weight once: at 64 tokens a step has not "
                 "yet touched every expert.",
                 llm.step_weight_bytes(DS, "fp8", 1)
                 / llm.step_weight_bytes(DS, "fp8", 64): "That is the batch-1 (active) read: 64 tokens touch far "
                 "more than 8 experts a layer."})
def _():
    return llm.step_weight_bytes("deepseek-v3", "fp8", 64) / 1e9


@register("moe-compute-bound-mixtral-h100", where=WHERE,
          question="From which batch are Mixtral-8x7B's expert matmuls compute-bound in an "
          "fp16 decode step on an H100 SXM (llm.compute_bound_batch, datasheet peaks)? "
          "Sequences, a whole number.", unit="sequences", abs_tol=1,
          hint="Once a batch touches all 8 experts, their matmuls read all 8 experts to do "
          "2 x k x B x expert weights FLOPs: intensity about B x k/E FLOP a byte of fp16 "
          "weights, so about ridge x E/k; the activations each routed token reads and "
          "writes push it a little higher.",
          slips={0.25: "That is a dense model's: the ridge alone. Each expert sees only k/E "
                 "of the batch."})
def _():
    return llm.compute_bound_batch("mixtral-8x7b", "H100 SXM", "fp16")


@register("moe-dispatch-bytes-ep32", where=WHERE,
          question="With DP attention and EP over 32 GPUs, how many bytes does one GPU send "
          "in one DeepSeek-V3 MoE layer's dispatch all-to-all for its 128 decode tokens "
          "(fp8 dispatch, one copy per (token, expert) pair, uniform routing; scales not "
          "counted)? Bytes, exact.", unit="bytes",
          hint="tokens x k x d_model x 1 byte, of which (N - 1)/N leave the GPU.",
          slips={32 / 31: "That counts the pairs whose expert is on the sending GPU too: "
                 "(N - 1)/N leave it.",
                 2.0: "That is the combine in bf16: the dispatch goes in fp8."})
def _():
    return expert_parallel.moe_all_to_all_bytes("deepseek-v3", 128, 32)["dispatch_sent_bytes"]


@register("moe-decision-qwen3-235b", where=WHERE,
          question="Decision: serve Qwen3-235B-A22B on one server of 8 GPUs, every sequence "
          "at 4,096 tokens of context, each decode step within 30 ms on the achievable model "
          "(expert_parallel.moe_layouts(..., achievable=True): each GPU's operations as "
          "engines reach them, the all-to-alls at their ceiling). Choose the GPU (H100 SXM at "
          f"{DECISION_PRICES['H100 SXM']:g} or H200 at {DECISION_PRICES['H200']:g} "
          "USD per GPU-hour), the weight format (fp16, or fp8 weights with the matmuls at "
          "the 16-bit peak) and the layout (TP, EP + TP attention, EP + DP attention); run "
          "the largest batch that fits (memory less the 1 GiB reserve) and meets 30 ms, "
          "fully busy. What do a million output tokens cost "
          "with the cheapest choice? USD per million tokens, two significant figures.",
          unit="USD per million tokens", rel_tol=0.03,
          hint="For each of the 12 choices: the largest batch B with fits and ms_per_step <= "
          "30 on the achievable model (bisect on B); cost = 8 x price / (3,600 x tokens/s) x 1e6. Memory sets the "
          "batch for some choices, the 30 ms for others: check both.",
          slips={8.0: "Eight times too much: the prices are per GPU-hour, not per instance."})
def _():
    table = expert_parallel.moe_options(DECISION_MODEL, DECISION_PRICES, DECISION_CONTEXT,
                                        DECISION_TPOT_S, DECISION_GPUS,
                                        formats=DECISION_FORMATS, layouts=DECISION_LAYOUTS)
    return float(table["usd_per_million"].iloc[0])

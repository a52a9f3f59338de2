"""The exercises asked in `chapters/10_mixture_of_experts` (every registration here has
`where="chapters/10_mixture_of_experts"`) and the helpers only they use."""

import dataclasses
import math

from gpuinfer.predict import achievable, cost, expert_parallel, llm
from gpuinfer import hardware
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import MX

QW235 = architectures.get("qwen3-235b-a22b")

WHERE = "chapters/10_mixture_of_experts"

#: The decision exercise: Qwen3-235B-A22B on one HGX server of 8 GPUs, every sequence at
#: this context, each decode step within the time-per-output-token objective.
DECISION_MODEL, DECISION_CONTEXT, DECISION_TPOT_S, DECISION_GPUS = (
    "qwen3-235b-a22b", 4096, 0.030, 8)
#: The GPUs and the example instances that price them (`gpuinfer.predict.cost.EXAMPLE_PRICES`: AWS
#: EC2 Capacity Blocks, eight GPUs an instance). Inputs to edit, not facts about your bill.
DECISION_INSTANCES = {"H100 SXM": "AWS p5.48xlarge (Capacity Block)",
                      "H200": "AWS p5e.48xlarge (Capacity Block)"}
#: Weight formats: bf16/fp16 as Qwen publishes the model, fp8 weights (Qwen also ships an
#: fp8 checkpoint with 128 x 128 block scales; here its bytes, the matmuls at the 16-bit peak).
DECISION_FORMATS = ("fp16", "fp8")
#: The layouts compared: all three of `expert_parallel.moe_layouts`.
DECISION_LAYOUTS = expert_parallel.LAYOUTS
#: The model the decision rests on: the achievable model (`achievable.FITTED`) with the
#: all-to-alls at DeepEP's measured time scaled to the bytes sent: the link model
#: (`expert_parallel.all_to_all_s`, bandwidth plus NCCL's latency) over
#: `expert_parallel.deepep_fraction` (0.28 at EP8), not at the link model itself.
DECISION_EFFICIENCY = dataclasses.replace(achievable.FITTED, all_to_all="measured")


#: USD per GPU-hour of each decision GPU: its instance's price over its GPUs.
DECISION_PRICES = {gpu: cost.price_per_gpu_hour(instance)
                   for gpu, instance in DECISION_INSTANCES.items()}


# Each exercise asks for a step the page taught, on inputs the page does not print: the
# page works DeepSeek-V3 and Mixtral on the H100 and H200; these ask the same reasoning of
# another batch, another model or another GPU.

#: Mixtral-8x7B in fp16: the bytes a batch-1 step reads (the active weights) and the bytes
#: once every expert is touched (the page's table prints both), for the slips.
_MX_B1 = step_model.step_weight_bytes(MX, "fp16", 1)
_MX_EVERY = step_model.step_weight_bytes(MX, "fp16", 1 << 30)


@register("moe-b1-step-ms-mixtral-h200", where=WHERE,
          question="Mixtral-8x7B in fp16 decodes one sequence (batch 1) on an H200 "
          "(4.8 TB/s). Counting only the weights the step reads (the KV cache left out), "
          "what is the shortest its decode step can take at the datasheet bandwidth? "
          "Milliseconds, three significant figures.", unit="ms",
          hint="A batch-1 step reads the active weights, not every expert: the page's "
          "batch-1 read for Mixtral in fp16 (llm.step_weight_bytes(model, 'fp16', 1)), "
          "over 4.8e12 B/s.",
          slips={_MX_EVERY / _MX_B1: "That reads every expert: one token runs through 2 "
                 "of the 8 experts in each layer, and a step reads only those."})
def _():
    return step_model.step_weight_bytes("mixtral-8x7b", "fp16", 1) / hardware.get("H200").bandwidth * 1e3


@register("moe-experts-touched-qwen3-235b-32", where=WHERE,
          question="Under uniform routing, how many distinct routed experts does one "
          "Qwen3-235B-A22B MoE layer (128 experts, top-8) read for a decode batch of 32 "
          "tokens? Expected value, one decimal.", unit="experts", rel_tol=0.005,
          hint="A given expert is missed by one token with probability 1 - k/E, by all B "
          "tokens with that to the B-th power: E (1 - (1 - k/E)^B).",
          slips={128 / step_model.experts_touched(QW235, 32): "That is 32 x 8 = 256 capped at E: "
                 "tokens share experts; count each expert once, with the chance it is missed.",
                 8 / step_model.experts_touched(QW235, 32): "That is k, one token's count.",
                 256 / step_model.experts_touched(QW235, 32): "That is 32 x 8, every (token, "
                 "expert) pair: a layer has only 128 experts, and tokens share them."})
def _():
    return step_model.experts_touched("qwen3-235b-a22b", 32)


@register("moe-step-gb-mixtral-4", where=WHERE,
          question="Mixtral-8x7B in fp16: the page's table gives the GB of weights a decode "
          "step reads at batch 1 and once every expert is touched. Under uniform routing, "
          "how many GB does a step of 4 tokens read? GB (1e9 bytes), three significant "
          "figures.", unit="GB",
          hint="Only the experts' bytes grow with the batch, in proportion to the experts "
          "touched: k = 2 a layer at batch 1, all 8 for every weight, and 8 (1 - (6/8)^4) "
          "for 4 tokens. Interpolate between the two printed reads.",
          slips={_MX_B1 / step_model.step_weight_bytes(MX, "fp16", 4): "That is the batch-1 read: "
                 "4 tokens touch more than 2 experts a layer.",
                 _MX_EVERY / step_model.step_weight_bytes(MX, "fp16", 4): "That is every weight: 4 "
                 "tokens share experts, so they touch fewer than 8 a layer on average.",
                 4 * _MX_B1 / step_model.step_weight_bytes(MX, "fp16", 4): "Four times the batch-1 "
                 "read: attention and the LM head are read once a step, whatever the batch, "
                 "and tokens share experts."})
def _():
    return step_model.step_weight_bytes("mixtral-8x7b", "fp16", 4) / 1e9


@register("moe-rule-batch-mixtral-a100", where=WHERE,
          question="By the page's rule of thumb (ridge x E/k), from which batch do "
          "Mixtral-8x7B's expert matmuls turn compute-bound in fp16 on an A100 80GB (its "
          "datasheet: 312 | 624* TFLOP/s of fp16, the asterisk with sparsity; 2,039 GB/s)? "
          "Sequences, a whole number, rounded up.", unit="sequences (a whole number, "
          "rounded up)", rel_tol=0, abs_tol=1,
          hint="Ridge = dense peak / bandwidth; each expert sees only k/E = 2/8 of the "
          "batch, so the experts need E/k = 4 times the dense threshold.",
          slips={0.25: "That is a dense model's threshold, the ridge alone: each expert sees "
                 "only k/E of the batch, so multiply by E/k.",
                 2.0: "Twice the answer: that is the sparse (2:4) peak; ordinary matmuls get "
                 "the dense 312 TFLOP/s.",
                 llm.compute_bound_batch(MX, "A100 80GB", "fp16") / math.ceil(
                     hardware.get("A100 80GB").ridge_point("fp16") * 4):
                 "That is llm.compute_bound_batch's search, which also counts the routed "
                 "tokens' activations: the question asks for the rule."})
def _():
    a100 = hardware.get("A100 80GB")
    m = architectures.get("mixtral-8x7b")
    return math.ceil(a100.ridge_point("fp16") * m.n_experts / m.experts_per_token)


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
          "(expert_parallel.moe_layouts(..., achievable=DECISION_EFFICIENCY): each GPU's "
          "operations as engines reach them, the all-to-alls at DeepEP's measured EP8 "
          "time scaled to the bytes sent, expert_parallel.deepep_fraction). Choose the GPU (H100 SXM at "
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
    table = expert_parallel.moe_options(DECISION_MODEL, options=DECISION_LAYOUTS,
                                        prices=DECISION_PRICES, context=DECISION_CONTEXT,
                                        tpot_s=DECISION_TPOT_S, n_devices=DECISION_GPUS,
                                        formats=DECISION_FORMATS,
                                        achievable=DECISION_EFFICIENCY)
    return float(table["usd_per_million"].iloc[0])


#: Node-limited routing (the page works DeepSeek-V3 on 8 nodes, one expert group a node;
#: the exercise asks 16 nodes of 16 experts, each token on at most 4 of them).
_NODE_COPIES = expert_parallel.nodes_touched(256, 8, 16, 4) * 15 / 16


@register("moe-node-limited-copies-16", where=WHERE,
          question="DeepSeek-V3 (256 routed experts, top-8) with its experts spread evenly "
          "over 16 nodes (16 experts a node) and node-limited routing: each token's 8 "
          "experts lie on at most M = 4 nodes, chosen by the router, and are uniform among "
          "those 4 nodes' experts. The dispatch sends one copy of a token's hidden state to "
          "each *other* node that holds one of its experts (forwarding over NVLink inside "
          "it). How many network copies does a token send, in expectation? Nodes, two "
          "decimals.", unit="nodes (expected copies a token sends over the network)",
          rel_tol=0.005,
          hint="On its M nodes a token's 8 experts are 8 of M x 16; a node is missed with "
          "probability C((M - 1) x 16, 8) / C(M x 16, 8), so M (1 - that) nodes are touched "
          "(expert_parallel.nodes_touched); each node is the token's own with chance 1/16.",
          slips={16 / 15: "That counts the token's own node too: only the other nodes' "
                 "copies cross the network, (N - 1)/N of them.",
                 7.5 / _NODE_COPIES: "That is one copy a (token, expert) pair, 8 x 15/16: "
                 "the dispatch sends one copy a node, and the 4-node limit caps the nodes.",
                 4 / _NODE_COPIES: "That is the cap M itself: 8 experts on 4 nodes of 16 "
                 "experts each sometimes miss a node, and one node may be the token's own.",
                 expert_parallel.nodes_touched(256, 8, 16) * 15 / 16 / _NODE_COPIES:
                 "That is routing without the node limit: each token may use at most 4 "
                 "nodes."})
def _():
    return expert_parallel.nodes_touched(256, 8, 16, 4) * 15 / 16

"""The exercises asked in `chapters/08_multi_gpu` (every registration here has
`where="chapters/08_multi_gpu"`) and the helpers only they use."""

from gpuinfer.predict import achievable as _achievable
from gpuinfer.predict import cost, parallel
from gpuinfer import hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import collectives
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import costs, ll_slip

WHERE = "chapters/08_multi_gpu"

#: The chapter's model and context.
MODEL, CONTEXT = "llama-2-70b", 4096

#: The decision exercise's GPUs and the example instances that price them
#: (`gpuinfer.predict.cost.EXAMPLE_PRICES`: AWS EC2 Capacity Blocks for ML, eight GPUs an
#: instance; references.bib: aws_capacity_blocks). Inputs to edit, not facts about your bill.
DECISION_INSTANCES = {"H100 SXM": "AWS p5.48xlarge (Capacity Block)",
                      "H200": "AWS p5e.48xlarge (Capacity Block)"}
#: Time-per-output-token objective (s) every decode step must meet, and the TP degrees
#: considered (one HGX server at most).
DECISION_TPOT_S = 0.025
DECISION_DEGREES = (1, 2, 4, 8)
#: USD per GPU-hour of each decision GPU: its instance's price over its GPUs.
DECISION_PRICES = {gpu: cost.price_per_gpu_hour(instance)
                   for gpu, instance in DECISION_INSTANCES.items()}


def _decision(achievable=True):
    """The decision exercise's options, cheapest first (`parallel.tp_options`)."""
    return parallel.tp_options(MODEL, options=DECISION_DEGREES, prices=DECISION_PRICES,
                               context=CONTEXT, tpot_s=DECISION_TPOT_S,
                               achievable=achievable)


def _ceiling_over_achievable() -> float:
    """The decision exercise's ceiling slip: the cheapest choice's USD per million tokens
    on the ceiling (`tp_options(achievable=False)`) over the achievable model's, from the
    options as they stand (not a typed ratio, which would go stale whenever
    achievable.FITTED or NCCL's model moved)."""
    ceiling = _decision(achievable=False)["usd_per_million"].iloc[0]
    return float(ceiling / _decision()["usd_per_million"].iloc[0])


#: NCCL's cap on LL's bandwidth on one node, GB/s, for the hints.
_LL_MAX_GBS = {arch: bw / 1e9 for arch, bw in device_links.NCCL_LL_MAX_BUS_BANDWIDTH.items()}
#: NVLink in NCCL's topology (GB/s a direction: links x NCCL's figure a link) and on the
#: datasheet, for the questions (one source for the numbers).
_NV4, _NV5 = device_links.get_interconnect("NVLink 4"), device_links.get_interconnect("NVLink 5")
_NV4_NCCL_GBS = _NV4.nccl_bus_bandwidth_bytes_per_s / 1e9
_NV4_LINK_GBS = device_links.NCCL_NVLINK_GB_PER_S["hopper"]
_NV5_NCCL_GBS = _NV5.nccl_bus_bandwidth_bytes_per_s / 1e9


@register("parallel-allreduce-batch64", where=WHERE,
          question="Time of one all-reduce of Llama-2-70B's fp16 activations at batch 64 "
          "([64, 8192] x 2 bytes = 1,048,576 B) across 8 H100 SXM on NVLink 4 "
          f"({_NV4.bandwidth_bytes_per_s / 1e9:.0f} GB/s each way on the datasheet, "
          f"{_NV4_NCCL_GBS:.1f} GB/s in NCCL's topology: 18 links x {_NV4_LINK_GBS:g}), with "
          "NCCL's ring cost model: the fastest of its LL, LL128 and Simple "
          "protocols. Seconds, three significant figures.", unit="seconds",
          hint="Per protocol: base + 2(N-1) x step latency + 2(N-1)/N x bytes / "
          f"({_NV4_NCCL_GBS:.1f}e9 x "
          f"fraction). {costs('NVLink 4')}; on one node LL's bandwidth is also capped at "
          f"NCCL's llMaxBw, {_LL_MAX_GBS['hopper']:.0f} GB/s on Hopper. Take the smallest.",
          slips={ll_slip(2**20, 8, "NVLink 4"):
                 "That is LL's latency with the link's full bandwidth: LL sends 4 bytes of "
                 "flag with every 4 bytes of data, so it reaches half of it at most, and on "
                 f"one Hopper node no more than {_LL_MAX_GBS['hopper']:.0f} GB/s.",
                 ll_slip(2**20, 8, "NVLink 4", 0.5):
                 f"That is LL at half of NCCL's {_NV4_NCCL_GBS:.1f} GB/s: on one node NCCL caps "
                 "LL at its "
                 f"llMaxBw, {_LL_MAX_GBS['hopper']:.0f} GB/s for Hopper."})
def _():
    m = architectures.get(MODEL)
    return collectives.interconnect_allreduce_s(64 * m.d_model * 2, 8, "NVLink 4")


@register("parallel-fewest-h100", where=WHERE,
          question="Fewest H100 SXM (a valid tensor-parallel degree: 1, 2, 4, 8, ...) that "
          "hold Llama-2-70B in fp16 plus the KV cache of 32 sequences of 4,096 tokens, each "
          "card giving the bytes it has (hardware.get('H100 SXM').memory_bytes) less "
          "llm.DEFAULT_RESERVE_BYTES (1 GiB). A whole number of devices.", unit="devices",
          hint="Each device holds weights / N plus its KV heads' cache for every sequence "
          "(327,680 B a token for the whole model, / N up to 8 devices); try N = 1, 2, 4 "
          "and compare with the memory less the reserve.",
          slips={0.5: "Half: that many devices hold the weights, but not 32 sequences' "
                      "cache as well."})
def _():
    return parallel.min_tp_degree(MODEL, "H100 SXM", CONTEXT, batch=32)


@register("parallel-crossover-batch1", where=WHERE,
          question="Smallest tensor-parallel degree (a valid one: 2, 4, 8, 16, ...) at which "
          "Llama-2-70B's batch-1 decode at 4,096 tokens of context spends at least as long "
          "in all-reduces as in its shard, both on the achievable model (one "
          "parallel.tp_step_s(..., parts=True): comm_s against shard_s), on B200s "
          f"({hardware.get('B200').bandwidth / 1e12:.1f} TB/s of HBM; NVLink 5 in "
          "a server of 8, NCCL's ring LL protocol; InfiniBand beyond). A whole number of "
          "devices.", unit="devices",
          hint="The chapter's closed form: 2 alpha N^2 + (t0 - 2 alpha + 2S/beta - O/K) N - "
          "(T1/K + 2S/beta) = 0, with T1 = one B200's kernels on the achievable model "
          "(achievable.step_breakdown(model, 'B200', 1, 4096).seconds.sum()), O = the "
          f"overheads every shard pays (80 x {_achievable.FITTED.kernels_per_layer} kernels x "
          f"{_achievable.FITTED.kernel_gap_s * 1e6:g} us + "
          f"{_achievable.FITTED.step_s * 1e3:g} ms), "
          "K = 161, S = 16,384 B and LL's t0 and alpha on NVLink 5, beta its bandwidth: "
          f"half of NVLink 5's {_NV5_NCCL_GBS:.1f} GB/s in NCCL's topology (18 links x "
          f"{device_links.NCCL_NVLINK_GB_PER_S['blackwell']:g}; the datasheet says "
          f"{_NV5.bandwidth_bytes_per_s / 1e9:.0f}), but at most NCCL's llMaxBw on one node, "
          f"{_LL_MAX_GBS['blackwell']:.0f} GB/s for Blackwell; take the first valid degree "
          "at or above the root. Compare one model with itself: the roofline's shard against "
          "NCCL's all-reduces (latency included) is a mix of two models.",
          slips={2.0: "That is the H100's answer: a B200 reads its shard faster, so the "
                      "all-reduces catch up at fewer devices.",
                 0.5: "Half: that compares the roofline's shard with NCCL's all-reduces, two "
                      "models; on the achievable model the shard carries its overheads "
                      "too, and at that degree it is still the longer term."})
def _():
    return parallel.crossover_devices(MODEL, "B200", batch=1, context=CONTEXT)


@register("parallel-kv-per-device-16", where=WHERE,
          question="KV-cache bytes one token costs each device when Llama-2-70B (80 layers, "
          "8 KV heads of 128) is sharded by heads over 16 devices, in fp16. An exact whole "
          "number of bytes.", unit="bytes",
          hint="A KV head cannot be split: with more devices than KV heads, each device "
          "still holds one head for every layer, K and V: 2 x 80 x 1 x 128 x 2 bytes.",
          slips={0.5: "Half: that splits each KV head across two devices, which tensor "
                      "parallelism cannot do; each device holds a whole head.",
                 8.0: "That is the whole model's cache per token: each device holds only "
                      "its own KV heads."})
def _():
    return parallel.tp_kv_cache_bytes_per_token(MODEL, 16, "fp16")


@register("parallel-launch-breakeven", where=WHERE,
          question="Llama-2-70B fp16 on 4 H200 (tensor parallel), batch 1, 4,096 tokens of "
          "context: the shard's roofline time (tp_step_s(..., achievable=False, "
          "parts=True)['shard_s']) spread "
          "over the step's kernels (80 layers x parallel.KERNELS_PER_LAYER = 13) is the GPU "
          "time each kernel has. A host that spends longer than that on each kernel (the "
          "framework's dispatch, then the launch) leaves the GPU waiting. What is it? "
          "Microseconds, two significant figures.",
          unit="microseconds",
          hint="shard_s / (80 x 13), in microseconds. Divide the shard's roofline time, not "
          "the whole step (total_s): the all-reduces are among the 13 kernels, and the "
          "question asks for the GPU's own work per kernel. Four H200s, not eight H100s.",
          slips={0.5: "Half: that is eight H200s' shard; the question has four.",
                 2.0: "Twice: that is two H200s' shard; the question has four."})
def _():
    parts = parallel.tp_step_s(MODEL, "H200", 4, 1, CONTEXT, achievable=False, parts=True)
    kernels = architectures.get(MODEL).n_layers * parallel.KERNELS_PER_LAYER
    return parts["shard_s"] / kernels * 1e6


@register("parallel-decision-gpu-tp", where=WHERE,
          question="Decision: serve Llama-2-70B fp16, every sequence at 4,096 tokens of "
          f"context, with a time per output token of at most {DECISION_TPOT_S * 1e3:g} ms, on "
          "the achievable model (parallel.tp_step_s: the shard's "
          "operations on achievable.FITTED, NCCL's all-reduces, "
          f"{_achievable.FITTED.kernel_gap_s * 1e6:g} us a kernel and "
          f"{_achievable.FITTED.step_s * 1e3:g} ms a step). "
          "Choose the GPU (H100 SXM at "
          f"{DECISION_PRICES['H100 SXM']:.2f} USD or H200 at {DECISION_PRICES['H200']:.2f} "
          "USD per GPU-hour) and the TP degree (1, 2, 4 or 8); each TP group "
          "runs the largest batch that fits (memory less the 1 GiB reserve) and meets the "
          "objective, fully busy; assume CUDA graphs (no launch floor) and decode steps "
          "that no prefill chunk shares. What do a million output tokens cost with the "
          "cheapest choice? USD per million tokens, two significant figures.",
          unit="USD per million tokens",
          hint="For each (GPU, N): the largest batch B with parallel.tp_step_s <= "
          f"{DECISION_TPOT_S * 1e3:g} ms and "
          "B <= tp_max_batch (bisect on B); tokens/s = B / step; cost = N x price / (3,600 x "
          "tokens/s) x 1e6. Compare all eight and take the smallest. Below the answer: "
          f"the batch that memory allows misses {DECISION_TPOT_S * 1e3:g} ms somewhere, so cap "
          "it by the objective "
          "too; or the ceiling's steps (parallel.tp_step_s(..., achievable=False): the roofline "
          "and each all-reduce at its bandwidth floor), which no engine reaches. Above it: compare both GPUs and every degree, not only the H100s or "
          "only N = 8.",
          rel_tol=0.03,
          slips={8.0: "Eight times too much: the prices are per GPU-hour, not per 8-GPU "
                      "instance-hour.",
                 _ceiling_over_achievable(): "That is the ceiling's answer (the roofline, each all-reduce "
                         "at its bandwidth floor, no overheads): an engine's steps are slower, so fewer sequences meet "
                         f"{DECISION_TPOT_S * 1e3:g} ms. Time the steps on the achievable "
                         "model."})
def _():
    return float(_decision()["usd_per_million"].iloc[0])

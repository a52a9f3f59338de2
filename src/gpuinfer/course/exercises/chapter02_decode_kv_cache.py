"""The exercises asked in `chapters/02_decode_kv_cache` (every registration here has
`where="chapters/02_decode_kv_cache"`) and the helpers only they use."""

import dataclasses

from gpuinfer.predict import achievable, llm, validation
from gpuinfer import hardware
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register

WHERE = "chapters/02_decode_kv_cache"

#: The decision exercise: Llama-3-8B fp16 on an A100 80GB, every sequence at this
#: context, and the time-per-output-token objective each decode step must meet.
DECISION_MODEL, DECISION_GPU = "llama-3-8b", "A100 80GB"
DECISION_CONTEXT = 4096
DECISION_TPOT_S = 0.035
#: The validation rows whose errors bound the decision's answer (`validation.interval`):
#: batched decode of a dense model.
DECISION_REGIME = "dense throughput"
#: The fitted constants the hand estimate of the decision uses (its hint and slip).
_FIT, _N_LAYERS = achievable.FITTED, architectures.get(DECISION_MODEL).n_layers


def _ratio(wrong, right) -> float:
    """A slip's factor: the answer a slip gives over the right one."""
    return float(wrong) / float(right)


@register("decode-kv-bytes-llama3-70b", where=WHERE,
          question="KV-cache bytes one token adds to Llama-3-70B in fp16 (80 layers, 8 KV "
          "heads, head_dim 128). An exact whole number of bytes.",
          unit="bytes", hint="2 (K and V) x layers x KV heads x head_dim x 2 bytes.",
          slips={8.0: "Eight times too many: that counts the 64 query heads, not the 8 KV "
                      "heads.",
                 0.5: "Half: the cache holds a key and a value for every KV head."})
def _():
    return step_model.kv_cache_bytes_per_token("llama-3-70b", "fp16")


@register("decode-query-head-bug-llama3-70b", where=WHERE,
          question="KV-cache bytes a calculator that counts query heads (64) claims for one "
          "8,192-token Llama-3-70B sequence in fp16. Bytes, not GB or GiB.", unit="bytes",
          hint="Redo the per-token formula with the 64 query heads in place of the 8 KV "
          "heads, then multiply by the context.",
          slips={1 / 2**30: "That is in GiB: give bytes.",
                 1 / 8: "That is the true cache (8 KV heads); the question asks what the "
                        "buggy calculator claims with 64."})
def _():
    wrong = dataclasses.replace(architectures.get("llama-3-70b"), n_kv_heads=architectures.get("llama-3-70b").n_heads)
    return 8192 * step_model.kv_cache_bytes_per_token(wrong, "fp16")


@register("decode-max-batch-h200-llama3-8b-8k", where=WHERE,
          question="Most Llama-3-8B sequences of 8,192 tokens an H200 holds in fp16: it has "
          f"{hardware.get('H200').memory_bytes:,.0f} B for CUDA; hold back "
          "llm.DEFAULT_RESERVE_BYTES (1 GiB = 2**30 B); weights llm.weight_bytes"
          "('llama-3-8b'); 131,072 cache bytes per token. Round down.", unit="sequences",
          hint="(memory - reserve - weights) / (8,192 x 131,072), rounded down.",
          rel_tol=0.0, abs_tol=0.5,
          slips={_ratio((141e9 - llm.DEFAULT_RESERVE_BYTES - step_model.weight_bytes("llama-3-8b"))
                        // (8192 * 131072), llm.max_batch("llama-3-8b", "H200", 8192)):
                 "That takes the card as 141e9 B, its marketing gigabytes: use the bytes it "
                 "has for CUDA, as the question gives them.",
                 _ratio(llm.max_batch(dataclasses.replace(architectures.get("llama-3-8b"), n_kv_heads=32),
                                      "H200", 8192),
                        llm.max_batch("llama-3-8b", "H200", 8192)):
                 "A quarter of the answer: that counts the 32 query heads, not the 8 KV heads."})
def _():
    return llm.max_batch("llama-3-8b", "H200", context=8192)


@register("decode-mbu-llama3-8b-h100", where=WHERE,
          question="MBU of a server measuring 1,600 tokens/s in total for Llama-3-8B fp16 "
          "at batch 32, context 2,048, on an H100 SXM (3.35 TB/s), counting the bytes a step "
          "reads (the weight matmuls, the caches, the activations; the embedding table is "
          "gathered one row a token, not read whole). A fraction between 0 and 1, three "
          "decimals.", unit="fraction (0-1)",
          hint="Steps/s = tokens/s / batch; each step moves the weight matmuls' bytes plus "
          "32 sequences' caches (llm.decode_step_bytes); divide the bytes/s by the datasheet "
          "bandwidth.",
          slips={_ratio(llm.mbu("llama-3-8b", "H100 SXM", 1600, batch=32, context=0),
                        llm.mbu("llama-3-8b", "H100 SXM", 1600, batch=32, context=2048)):
                 "That leaves out the KV cache: 32 sequences x 2,048 tokens x 131,072 B "
                 "are read every step too."})
def _():
    return llm.mbu("llama-3-8b", "H100 SXM", 1600, batch=32, context=2048)


@register("decode-attention-dominant-context-13b-a100", where=WHERE,
          question="At the batch where its weight matmuls turn compute-bound on an A100 80GB "
          "(llm.compute_bound_batch), beyond what context does Llama-2-13B fp16 decode "
          "spend more time in attention than in the matmuls? Tokens per sequence; within "
          "5% is accepted (the hand estimate leaves out the activations).", unit="tokens",
          hint="At that batch B the matmuls take about their bytes / bandwidth; attention "
          "reads B x context x 819,200 bytes of cache. Set the two equal and solve for the "
          "context.", rel_tol=0.05,
          slips={llm.compute_bound_batch("llama-2-13b", "A100 80GB"):
                 "That is one sequence's cache against the weights: at batch B, B caches "
                 "are read."})
def _():
    return llm.attention_dominant_context("llama-2-13b", "A100 80GB")


def decision_batch_range() -> dict:
    """The decision's batch within the achievable model's error: engines' measured steps
    fall within (low, high) times the model's rate in `DECISION_REGIME`
    (`validation.interval` of 1.0: 80% of published measurements), so a step the model
    puts at t takes t / ratio, and a batch meets the objective when its modelled step is
    at most the objective x ratio. Returns {"low", "high"}: `achievable.max_batch_within`
    at the objective x the low and x the high ratio (the batch a slower and a faster
    engine meet it with); "fits": the batch memory holds (`llm.max_batch`);
    "memory_binds": True when memory, not the objective, caps the high end (the binding
    constraint could flip); "ceiling" (the ceiling's batch) and "ceiling_inside"."""
    args = (DECISION_MODEL, DECISION_GPU, DECISION_CONTEXT)
    ratio_low, ratio_high = validation.interval(1.0, DECISION_REGIME)
    low = achievable.max_batch_within(*args, DECISION_TPOT_S * ratio_low)
    high = achievable.max_batch_within(*args, DECISION_TPOT_S * ratio_high)
    fits = llm.max_batch(*args)
    ceiling = achievable.max_batch_within(*args, DECISION_TPOT_S, achievable=False)
    return {"low": low, "high": high, "fits": fits, "memory_binds": high >= fits,
            "ceiling": ceiling, "ceiling_inside": low <= ceiling <= high}


@register("decode-decision-batch-tpot", where=WHERE,
          question="Decision: Llama-3-8B fp16 on an A100 80GB, every sequence at 4,096 "
          f"tokens of context, time per output token at most {DECISION_TPOT_S * 1e3:.0f} ms "
          "as an engine would run it: on the achievable model "
          "(achievable.decode_step_s; its ceiling, llm.decode_step_s, beside it). "
          "The largest batch that meets the objective and fits in memory serves the most "
          "tokens per GPU-hour, the lowest cost. What batch is it? A whole number of "
          "sequences; within 3% is accepted.", unit="sequences",
          hint="Well below the compute-bound batch every operation is memory-bound: on the "
          "achievable model a step takes about (weight bytes + batch x 4,096 x 131,072) / "
          f"({_FIT.bandwidth:.2f} x bandwidth) + {_N_LAYERS} layers x "
          f"{_FIT.kernels_per_layer} kernels x {_FIT.kernel_gap_s * 1e6:g} us + "
          f"{_FIT.step_s * 1e3:g} ms (achievable.FITTED). Solve for the batch, round down, "
          "and check it fits (llm.max_batch).", rel_tol=0.03,
          slips={_ratio(llm.max_batch(DECISION_MODEL, DECISION_GPU, DECISION_CONTEXT),
                        achievable.max_batch_within(DECISION_MODEL, DECISION_GPU,
                                                    DECISION_CONTEXT, DECISION_TPOT_S)):
                 "That is the most that fits in memory; its step takes longer than the "
                 "objective allows.",
                 _ratio(llm.max_batch_within(DECISION_MODEL, DECISION_GPU, DECISION_CONTEXT,
                                            DECISION_TPOT_S),
                        achievable.max_batch_within(DECISION_MODEL, DECISION_GPU,
                                                    DECISION_CONTEXT, DECISION_TPOT_S)):
                 "That is the ceiling's batch (the roofline's step time): an engine moves "
                 f"its bytes at {_FIT.bandwidth:.2f} of the datasheet bandwidth and pays a "
                 "fixed cost every step, so fewer sequences meet the objective."})
def _():
    return achievable.max_batch_within(DECISION_MODEL, DECISION_GPU, DECISION_CONTEXT,
                                       DECISION_TPOT_S)

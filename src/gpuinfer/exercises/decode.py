"""Exercises of the chapter *Decoding is a weight read; the KV cache*."""

import dataclasses

from .. import llm
from . import register

WHERE = "chapters/02_decode_kv_cache"


@register("decode-kv-bytes-llama3-70b", where=WHERE,
          question="KV-cache bytes one token adds to Llama-3-70B in fp16",
          unit="bytes", hint="2 (K and V) x layers x KV heads x head_dim x bytes per "
          "element; take the KV heads from the config, not the query heads.")
def _():
    return llm.kv_cache_bytes_per_token("llama-3-70b", "fp16")


@register("decode-query-head-bug-llama3-70b", where=WHERE,
          question="KV-cache bytes a calculator that counts query heads claims for one "
          "8,192-token Llama-3-70B sequence in fp16", unit="bytes",
          hint="Redo the per-token formula with the 64 query heads in place of the KV "
          "heads, then multiply by the context.")
def _():
    wrong = dataclasses.replace(llm.get("llama-3-70b"), n_kv_heads=llm.get("llama-3-70b").n_heads)
    return 8192 * llm.kv_cache_bytes_per_token(wrong, "fp16")


@register("decode-max-batch-h200-llama3-8b-8k", where=WHERE,
          question="Most Llama-3-8B sequences of 8,192 tokens an H200 holds in fp16 "
          "(weights + KV cache, nothing reserved)", unit="sequences",
          hint="Subtract the weights from the memory, divide by context x KV bytes per "
          "token, round down.", rel_tol=0.0, abs_tol=0.5)
def _():
    return llm.max_batch("llama-3-8b", "H200", context=8192)


@register("decode-mbu-llama3-8b-h100", where=WHERE,
          question="MBU of a server measuring 1,600 tokens/s in total for Llama-3-8B fp16 "
          "at batch 32, context 2,048, on an H100 SXM", unit="fraction (0-1)",
          hint="Steps/s = tokens/s / batch; each step moves the weights plus 32 "
          "sequences' KV caches; divide the bytes/s by the datasheet bandwidth.")
def _():
    return llm.mbu("llama-3-8b", "H100 SXM", 1600, batch=32, context=2048)


@register("decode-context-limit-llama3-8b-a100", where=WHERE,
          question="Context beyond which no batch makes Llama-3-8B fp16 decode "
          "compute-bound on an A100 80GB", unit="tokens",
          hint="Per sequence, the FLOPs over the peak must outlast the KV bytes over the "
          "bandwidth; solve for the context.", rel_tol=0.03)
def _():
    return llm.compute_bound_context_limit("llama-3-8b", "A100 80GB")

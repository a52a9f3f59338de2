"""Every path that prices a forward step takes its overheads from one place,
`achievable.overheads`: a per-sequence cost added to the achievable model's Efficiency
(`sequence_s`) lengthens each path's step by sequence_s x its sequences, and nothing else.
Adding another such term is one field and one line in `overheads` (and, if it is to be
fitted, its column in `validation.Decomposition`)."""

import dataclasses

import numpy as np
import pytest

from gpuinfer.predict import achievable as A
from gpuinfer.predict import engine_step, llm_serving, speculative, step_cost

SEQ_S = 10e-6   # 10 us of host work a sequence a step: an assumed value, for the test
EXTRA = dataclasses.replace(A.FITTED, sequence_s=SEQ_S)


def test_the_per_operation_decode_step_pays_it_for_each_sequence():
    base = A.decode_step_s("llama-3-8b", "H100 SXM", 16, 512, achievable=A.FITTED)
    more = A.decode_step_s("llama-3-8b", "H100 SXM", 16, 512, achievable=EXTRA)
    assert more - base == pytest.approx(16 * SEQ_S, rel=1e-9)       # 16 x 10 us = 160 us


def test_the_engines_step_pays_it_for_each_sequence_that_samples():
    # A mixed step: 8 decodes at context 1,000 and a 256-token chunk that does not sample
    # (logits 0): its sequences are the 8 that sample, 8 x 10 us = 80 us.
    q = np.array([1] * 8 + [256])
    c = np.array([1000] * 8 + [0])
    lg = np.array([1] * 8 + [0])
    z = step_cost.step_aggregates(q, c, lg)[:, None]
    base = engine_step.EngineStep("llama-3-8b", "H100 SXM", achievable=A.FITTED).many(z)[0]
    more = engine_step.EngineStep("llama-3-8b", "H100 SXM", achievable=EXTRA).many(z)[0]
    assert more - base == pytest.approx(8 * SEQ_S, rel=1e-9)


def test_offline_throughput_pays_it_once_a_sequence_a_step():
    kw = dict(input_tokens=1000, output_tokens=200, dtype="fp8", kv_dtype="fp8",
              compute_dtype="fp8")
    base = llm_serving.offline_throughput("llama-3-8b", "H100 SXM", achievable=A.FITTED, **kw)
    more = llm_serving.offline_throughput("llama-3-8b", "H100 SXM", achievable=EXTRA, **kw)
    assert more["batch"] == base["batch"]
    assert more["step_s"] - base["step_s"] == pytest.approx(base["batch"] * SEQ_S, rel=1e-9)


def test_a_speculative_round_pays_it_once_in_the_verify_not_in_the_drafts():
    kw = dict(acceptance=0.7, k=4, batch=8, context=1000)
    base = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                       achievable=A.FITTED, **kw)
    more = speculative.round_breakdown("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                       achievable=EXTRA, **kw)
    for key in ("plain_step_s", "verify_s"):
        assert more[key] - base[key] == pytest.approx(8 * SEQ_S, rel=1e-9), key
    assert more["draft_s"] == pytest.approx(base["draft_s"], rel=1e-12)


def test_the_tensor_parallel_step_pays_it_for_each_sequence():
    from gpuinfer.predict import parallel
    base = parallel.tp_step_s("llama-3-70b", "H100 SXM", 8, 16, 512, achievable=A.FITTED)
    more = parallel.tp_step_s("llama-3-70b", "H100 SXM", 8, 16, 512, achievable=EXTRA)
    assert more - base == pytest.approx(16 * SEQ_S, rel=1e-9)       # 16 x 10 us


def test_an_expert_parallel_step_pays_it_for_each_of_a_gpus_sequences():
    from gpuinfer.predict import expert_parallel
    kw = dict(batch=64, context=1024, attention="dp")
    base = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, achievable=A.FITTED, **kw)
    more = expert_parallel.ep_decode_breakdown("deepseek-v3", "H200", 8, achievable=EXTRA, **kw)
    # data-parallel attention: each GPU runs ceil(64 / 8) = 8 sequences, 8 x 10 us
    assert more["total_s"] - base["total_s"] == pytest.approx(8 * SEQ_S, rel=1e-9)

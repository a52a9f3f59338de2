"""Chapter 10's problems (Mixtures of experts), each answer reached by hand from the
published configs and datasheets (arithmetic in the comments), not by calling the function
the exercise registers; and each one asks a step the page taught on inputs the page does
not print (issue 33: "exercises do not merely repeat printed numbers")."""

import json
import math
import pathlib
import re

import pytest

from gpuinfer.course import exercises

NOTEBOOK = pathlib.Path(__file__).parent.parent / "chapters" / "10_mixture_of_experts.ipynb"

# Mixtral-8x7B's config.json: hidden 4096, 32 layers, 8 experts of width 14336, top-2,
# 32 query heads and 8 KV heads of 128, vocab 32000. fp16: 2 bytes a weight.
D, L, FF, V = 4096, 32, 14336, 32000
EXPERT = 3 * D * FF                                 # 176,160,768 weights
ATTN = D * (32 * 128) + 2 * D * (8 * 128) + (32 * 128) * D   # 41,943,040 a layer
ROUTER = D * 8                                      # 32,768 a layer
ALWAYS = L * (ATTN + ROUTER) + V * D                # the layers' attention and routers, LM head


def mixtral_step_bytes(touched):
    """fp16 bytes a step reads with `touched` experts a layer (the embedding is gathered)."""
    return 2 * (ALWAYS + L * touched * EXPERT)


def test_b1_step_of_mixtral_on_an_h200():
    # Batch 1 touches k = 2 experts a layer: 2 x (32 x (41,943,040 + 32,768) + 131,072,000
    # + 32 x 2 x 176,160,768) = 25,497,174,016 B; / 4.8e12 B/s = 5.312 ms.
    b1 = mixtral_step_bytes(2)
    assert b1 == 25_497_174_016
    assert exercises.get("moe-b1-step-ms-mixtral-h200").answer() == pytest.approx(
        b1 / 4.8e12 * 1e3, rel=1e-12)
    # Every expert (8 a layer): 93.14 GB, 19.4 ms: its own slip.
    assert "every expert" in repr(exercises.check("moe-b1-step-ms-mixtral-h200",
                                                  mixtral_step_bytes(8) / 4.8e12 * 1e3))


def test_experts_touched_qwen3_235b_at_32_tokens():
    # 128 x (1 - (120/128)^32): 0.9375^32 = exp(32 ln 0.9375) = exp(-2.0653) = 0.12677
    expected = 128 * (1 - (120 / 128) ** 32)
    assert expected == pytest.approx(111.77, abs=0.01)
    assert exercises.get("moe-experts-touched-qwen3-235b-32").answer() == pytest.approx(expected)
    assert "capped" in repr(exercises.check("moe-experts-touched-qwen3-235b-32", 128))
    assert exercises.check("moe-experts-touched-qwen3-235b-32", 111.8)


def test_step_gb_of_mixtral_at_4_tokens_interpolates_the_two_printed_reads():
    # 4 tokens touch 8 (1 - 0.75^4) = 8 x 0.68359 = 5.46875 experts a layer; the read is
    # linear in that count, between batch 1 (2 experts) and every weight (8).
    touched = 8 * (1 - 0.75 ** 4)
    assert touched == 5.46875
    b1, every = mixtral_step_bytes(2), mixtral_step_bytes(8)
    by_interpolation = b1 + (touched - 2) / 6 * (every - b1)
    assert by_interpolation == pytest.approx(mixtral_step_bytes(touched), rel=1e-12)
    assert exercises.get("moe-step-gb-mixtral-4").answer() == pytest.approx(
        by_interpolation / 1e9, rel=1e-12)                  # 64.60 GB
    assert "batch-1 read" in repr(exercises.check("moe-step-gb-mixtral-4", b1 / 1e9))
    assert "every weight" in repr(exercises.check("moe-step-gb-mixtral-4", every / 1e9))


def test_rule_batch_of_mixtral_on_an_a100():
    # 312e12 / 2.039e12 = 153.016 FLOP/byte; x E/k = 4 -> 612.06 -> 613 rounded up.
    assert math.ceil(312e12 / 2.039e12 * 4) == 613
    name = "moe-rule-batch-mixtral-a100"
    assert exercises.get(name).answer() == 613
    assert "dense model" in repr(exercises.check(name, 153))          # the ridge alone
    assert "sparse" in repr(exercises.check(name, 2 * 612.06))        # 624 TFLOP/s
    assert "activations" in repr(exercises.check(name, 641))          # the search's answer


def test_node_limited_copies_on_16_nodes():
    # 16 experts a node, at most M = 4 nodes: the 8 experts are 8 of 64, a node missed
    # with C(48,8)/C(64,8) = prod_{i<8} (48 - i)/(64 - i) = 0.085255; 4 x 0.914745 =
    # 3.65898 nodes, of which 15/16 are other nodes: 3.43030 copies.
    miss = 1.0
    for i in range(8):
        miss *= (48 - i) / (64 - i)
    expected = 4 * (1 - miss) * 15 / 16
    assert expected == pytest.approx(3.4303, abs=1e-4)
    name = "moe-node-limited-copies-16"
    assert exercises.get(name).answer() == pytest.approx(expected, rel=1e-12)
    assert exercises.check(name, 3.43)
    assert "own node" in repr(exercises.check(name, expected * 16 / 15))
    assert "(token, expert) pair" in repr(exercises.check(name, 8 * 15 / 16))
    assert "cap M" in repr(exercises.check(name, 4))


def _page_text():
    nb = json.loads(NOTEBOOK.read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"])


def test_the_questions_are_not_the_numbers_the_page_prints():
    # What the page works through: DeepSeek-V3's and Mixtral's experts touched at 8, 64 and
    # 1,024 tokens, reads at batches 1, 8, 64, 1,024, compute-bound batches on the H100 and
    # H200. The problems ask the same steps elsewhere: Qwen3-235B at 32 tokens, Mixtral at
    # 4 tokens, the A100, the H200's batch-1 step time.
    text = _page_text()
    mine = [n for n in exercises.names()
            if exercises.get(n).where == "chapters/10_mixture_of_experts"]
    assert len(mine) == 7
    for name in mine:
        assert f'check("{name}"' in text, name
    # No problem is one the page's previous registrations asked (each repeated a number
    # the page prints: the active share, 222 experts, 584 GB, batch 1,292).
    for old in ("moe-active-fraction-deepseek", "moe-experts-touched-deepseek-64",
                "moe-step-gb-deepseek-64", "moe-compute-bound-mixtral-h100"):
        assert old not in mine and old not in text
    # The batches and GPUs the problems use are not among those the page's tables print.
    assert re.search(r"\[1, 8, 64, 1024\]", text) and "np.array([1, 8, 64, 1024])" in text
    assert '"A100 80GB"' not in text.split("## Problems to work")[0]


def test_the_answers_are_computed_below_the_problems():
    # Opened in Jupyter or Colab the page shows its hidden cells: the cell that computes and
    # asserts the answers comes after the problems and the check cell.
    nb = json.loads(NOTEBOOK.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    problems = next(i for i, s in enumerate(sources) if "```{exercise}" in s)
    answers = next(i for i, s in enumerate(sources) if "_NAMES = [" in s)
    checker = next(i for i, s in enumerate(sources) if s.startswith("your_answers = {"))
    assert problems < checker < answers

"""The chapter *Quantisation*'s synthetic tensors: weights with per-row scales and heavy
tails, activations with outlier feature channels, keys with outlier channels. Reproducible
(seeded), labelled synthetic: not a real model's.
"""

from __future__ import annotations

import numpy as np

from gpuinfer import validate as _v


def example_weights(d_out=512, d_in=256, *, tails="gaussian", seed=0):
    """A synthetic weight matrix [d_out, d_in] for the chapter's comparisons: each row
    (output channel) has its own scale, spread log-normally (sigma 1), and its entries are
    Gaussian or, with `tails="heavy"`, Student-t with 5 degrees of freedom (rare large
    weights); divided by sqrt(d_in), as an initialised layer is. Not a real model's."""
    d_out = _v.count("d_out", d_out, maximum=1 << 16)
    d_in = _v.count("d_in", d_in, maximum=1 << 16)
    tails = _v.choice("tails", tails, ("gaussian", "heavy"))
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    row_scale = np.exp(rng.normal(0.0, 1.0, size=(d_out, 1)))
    entries = rng.normal(size=(d_out, d_in)) if tails == "gaussian" else \
        rng.standard_t(5, size=(d_out, d_in))
    return entries * row_scale / np.sqrt(d_in)


def example_activations(n_tokens=256, d_in=256, *, outliers=(3, 77, 140, 201),
                        outlier_gain=20.0, seed=0):
    """Synthetic activations [n_tokens, d_in]: Gaussian entries, each token's magnitude
    varying log-normally (sigma 0.5), and a few feature channels (`outliers`)
    `outlier_gain` times larger in every token: the pattern of outlier features that
    LLM.int8() (Dettmers et al. 2022) reports in large transformers. Not a real model's."""
    n_tokens = _v.count("n_tokens", n_tokens, maximum=1 << 20)
    d_in = _v.count("d_in", d_in, maximum=1 << 16)
    outlier_gain = _v.positive("outlier_gain", outlier_gain)
    idx = [_v.count("outlier channel", i, minimum=0, maximum=d_in - 1) for i in outliers]
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    x = rng.normal(size=(n_tokens, d_in)) * np.exp(rng.normal(0.0, 0.5, size=(n_tokens, 1)))
    x[:, idx] *= outlier_gain
    return x


def example_kv(n_tokens=4096, head_dim=128, *, outlier_channels=(5, 40, 99),
               outlier_gain=15.0, seed=0):
    """Synthetic keys and values of one attention head, (K, V), each [n_tokens, head_dim]:
    Gaussian, with a few key channels `outlier_gain` times larger in every token (KIVI,
    Liu et al. 2024, finds such fixed outlier channels in keys and none in values).
    Not a real model's cache."""
    n_tokens = _v.count("n_tokens", n_tokens, maximum=1 << 22)
    head_dim = _v.count("head_dim", head_dim, maximum=1 << 12)
    outlier_gain = _v.positive("outlier_gain", outlier_gain)
    idx = [_v.count("outlier channel", i, minimum=0, maximum=head_dim - 1)
           for i in outlier_channels]
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    keys, values = rng.normal(size=(n_tokens, head_dim)), rng.normal(size=(n_tokens, head_dim))
    keys[:, idx] *= outlier_gain
    return keys, values

"""Serving systems: what an inference compiler saves, and what fits on one GPU.

Chapter: *Serving systems and sharing a GPU*. This module was named after the chapter and
held four ideas; each now has a module named after it:

- `gpuinfer.fusion`: layer fusion (`elementwise_chain_bytes`, `gelu_tanh_unfused`,
  `gelu_tanh_fused`, `GELU_TANH_OP_INPUTS`);
- `gpuinfer.tuning`: kernel auto-tuning (`autotune`);
- `gpuinfer.colocation`: several models on one GPU (`Deployment`, `deployment`,
  `MemoryPlan`, `memory_plan`, `max_instances`, `BACKENDS`);
- `gpuinfer.mig_sizing`: which MIG slice a model needs (`mig_options`,
  `smallest_mig_profile`).

The names stay importable from here for one release, since the chapter's and the labs'
notebooks call `serving.<name>`; new code imports the modules above.
"""

from .colocation import BACKENDS, Deployment, MemoryPlan, deployment, max_instances, memory_plan
from .fusion import (GELU_TANH_OP_INPUTS, elementwise_chain_bytes, gelu_tanh_fused,
                     gelu_tanh_unfused)
from .mig_sizing import mig_options, smallest_mig_profile
from .tuning import autotune

__all__ = ["BACKENDS", "Deployment", "MemoryPlan", "deployment", "max_instances",
           "memory_plan", "GELU_TANH_OP_INPUTS", "elementwise_chain_bytes", "gelu_tanh_fused",
           "gelu_tanh_unfused", "mig_options", "smallest_mig_profile", "autotune"]

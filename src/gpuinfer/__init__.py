"""gpuinfer: the package behind the course *GPU inference performance*.

Every value is in SI base units: bytes, bytes/s, FLOP, FLOP/s, seconds.
Bandwidth is decimal (1 GB/s = 1e9 B/s); memory is the bytes a card really has.

The folders are the layers; a module imports only from its own layer and the ones above
it in this list (`tests/test_layers.py` reads the paths, and finds no cycle and no name
with two import paths):

    validate.py, dtypes.py   the vocabulary: one policy for checking arguments, and the
                             number formats (bits, block scales, bytes per element)
    hardware/    data: the cited catalogue of devices, MIG slices, measured rates, links
    predict/     formulas: the roofline, the models, the step, serving, parallelism, cost
                 (no torch, nothing that measures)
    measure/     what runs on the machine: the timer, torch devices, real models, the
                 quantisers, ONNX Runtime and Triton; imports torch at the top
    course/      the pages' plumbing: numbers in prose, figures, the sentences pages print
                 about their own run, the exercises, the command line's reports, releases

Each layer's `__init__` lists its modules by topic. Import a name from the module that
defines it: `from gpuinfer.predict import roofline`, `from gpuinfer.hardware import get`.
"""

__version__ = "0.2.0"  # pyproject.toml's version (tests/test_release.py keeps them equal)

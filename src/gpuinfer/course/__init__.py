"""The course's presentation code: what the pages, the workshop and the command line use
to show the layers above. Nothing in `predict` or `measure` imports from here.

    book           numbers in prose (myst-nb glue), SI formatting, where a notebook runs
    plots          figures that put a measurement beside its ceiling
    findings, quality_findings
                   the sentences chapters print about their own run, branching on it
    exercises      one module per page: its questions and self-check answers
    bench_suite, gpu_check
                   `python -m gpuinfer bench` and `gpu-check` (the workshop's dry run)
    release        the version a room is taught from, and the install line pinned to it
"""

"""Names vulture (min_confidence 60, `make unit`) would call unused, and why each is not.

vulture reads src/ and tests/, not the pages: a name only a chapter, lab or workshop page
uses looks dead to it. Each name here is in one list by its reason;
`tests/test_vulture_whitelist.py` checks every list (a name in `_PAGES` must appear on a
page, an alias must be the same object as its new name, a source must be a citation), so
an entry that stops being true fails the suite instead of hiding dead code.
Remove an entry when its reason goes; never add one to quiet vulture about code nothing uses.
"""

from gpuinfer.course import exercises
from gpuinfer.measure import onnx_runtime, quality, triton_server
from gpuinfer.predict import tabular
from gpuinfer.hardware import device_links

#: Used only by pages (chapters, labs, workshop).
_PAGES = [
    onnx_runtime.TENSORRT_PUBLISHED, onnx_runtime.level_table, onnx_runtime.fusion_savings,
    onnx_runtime.tensorrt_comparison, onnx_runtime.environment_note,
    triton_server.Server.rss_by_process, quality.Published.claim,
]

#: Citations kept beside the constants they source (read in the code, shown by no page).
_SOURCES = [
    device_links.NCCL_TREE_CORRECTION_SOURCE, onnx_runtime.TENSORRT_DOCS,
    tabular.CUDA_GRAPHS_BLOG_URL, tabular.HOST_COPY_SOURCE,
]

#: Names another library calls or reads: IPython's rich display, ONNX Runtime's session
#: options and calibration-reader protocol, PyTriton's server, http.server, HTMLParser,
#: pytest's hooks and marks. A lambda so that importing this file evaluates none of them.
_PROTOCOLS = lambda o: (  # noqa: E731
    o._repr_markdown_, o.graph_optimization_level, o.intra_op_num_threads,
    o.log_severity_level, o.optimized_model_filepath, o.get_next, o._verbose,
    o.log_message, o.daemon_threads, o.handle_starttag, o.pytest_configure,
    o.pytest_runtest_makereport, o.pytest_runtest_setup, o.pytest_runtest_teardown,
    o.pytestmark,
)

#: Fields of a result a caller reads (dataclass fields, checked by name).
_FIELDS = lambda o: (o.http_url,)  # noqa: E731  triton_server.Server: the HTTP address

assert exercises  # imported for _repr_markdown_'s owner (exercises.Result)

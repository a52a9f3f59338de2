"""Issue 32: one name per thing. The package's public signatures follow one convention,
read from the source with `ast` (no import, so a module that needs torch is read too):

- `achievable` defaults to True: the course decides on the achievable model, and
  `achievable=False` asks for the ceiling;
- one name per concept: `model`, `accelerator`, `n_devices` (the devices a model is
  sharded over), times in seconds end in `_s` (never `_time`, `_seconds`, or a bare `slo`);
- `efficiency` (an `achievable.Efficiency` record, required) only in the low-level helpers
  that take one; everywhere else the switch is `achievable`;
- `model` before `accelerator`;
- a decision function `*_options` takes (model, options, *, ...): the candidates it
  compares second, everything after keyword-only.
Each check has a planted violation below, so that it can fail."""
import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "gpuinfer"

FORBIDDEN = {"model_": "model", "accelerator_": "accelerator", "gpu": "accelerator",
             "n_gpus": "n_devices", "tp": "n_devices", "slo": "slo_s",
             "tpot_slo": "tpot_slo_s", "ttft_slo": "ttft_slo_s"}
# Helpers that need an Efficiency record itself (not True/False): they may call it so.
EFFICIENCY_ALLOWED = {"row_rates", "overheads"}
# fleet_options compares machines, each carrying its own service model: no `model` first.
OPTIONS_WITHOUT_MODEL = {"fleet_options"}


def public_functions(tree):
    """(name, FunctionDef) of every public function and public method of a public class,
    the class's constructor under the class's own name."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for n in node.body:
                if isinstance(n, ast.FunctionDef) and (n.name == "__init__"
                                                       or not n.name.startswith("_")):
                    yield (node.name if n.name == "__init__" else f"{node.name}.{n.name}"), n


def parameters(fn):
    """[(name, default node or None, keyword_only)] of a FunctionDef."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    return ([(p.arg, d, False) for p, d in zip(pos, defaults)]
            + [(p.arg, d, True) for p, d in zip(a.kwonlyargs, a.kw_defaults)])


def violations(tree, where="<ast>"):
    """Every break of the convention in a module's tree, as sentences."""
    bad = []
    for name, fn in public_functions(tree):
        here = f"{where}:{name}"
        short = name.split(".")[-1]
        if short.endswith(("_time", "_seconds")):
            bad.append(f"{here}: a time ends in _s")
        params = parameters(fn)
        names = [p for p, _, _ in params]
        for p, default, _ in params:
            if p == "achievable" and default is not None and not (
                    isinstance(default, ast.Constant) and default.value is True):
                bad.append(f"{here}: achievable defaults to {ast.unparse(default)}, not True")
            if p in FORBIDDEN:
                bad.append(f"{here}: parameter {p} is called {FORBIDDEN[p]}")
            if p.endswith(("_time", "_seconds")):
                bad.append(f"{here}: parameter {p} is a time: name it ..._s")
            if p == "efficiency" and short not in EFFICIENCY_ALLOWED:
                bad.append(f"{here}: parameter efficiency is called achievable "
                           f"(True, False or an achievable.Efficiency)")
        positional = [p for p, _, kw in params if not kw and p not in ("self", "cls")]
        if ("model" in positional and "accelerator" in positional
                and positional.index("model") > positional.index("accelerator")):
            bad.append(f"{here}: model comes before accelerator")
        if short.endswith("_options"):
            want = ["options"] if short in OPTIONS_WITHOUT_MODEL else ["model", "options"]
            if positional != want or names[:len(want)] != want:
                bad.append(f"{here}: a decision function takes ({', '.join(want)}, *, ...), "
                           f"not ({', '.join(positional)}, ...)")
    return bad


def package_trees():
    for path in sorted(SRC.rglob("*.py")):
        yield str(path.relative_to(SRC)), ast.parse(path.read_text(), str(path))


def test_the_package_follows_one_convention():
    bad = [v for where, tree in package_trees() for v in violations(tree, where)]
    assert not bad, "\n".join(bad)


def test_no_function_is_bound_under_two_names():
    # One function, one name: no module keeps an old name as an alias (`old = new`
    # at module level, a public name bound to a public function defined elsewhere).
    bad = []
    for where, tree in package_trees():
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                    and node.value.id in defined):
                for t in node.targets:
                    if isinstance(t, ast.Name) and not t.id.startswith("_"):
                        bad.append(f"{where}: {t.id} = {node.value.id}")
    assert not bad, bad


def _one(src):
    return violations(ast.parse(src))


@pytest.mark.parametrize("src, words", [
    ("def f(model, accelerator, achievable=False): pass", "achievable defaults to False"),
    ("def f(model, *, achievable=None): pass", "achievable defaults to None"),
    ("def f(model_, accelerator): pass", "model_ is called model"),
    ("def f(model, accelerator_): pass", "accelerator_ is called accelerator"),
    ("def f(model, gpu): pass", "gpu is called accelerator"),
    ("def f(model, n_gpus=1): pass", "n_gpus is called n_devices"),
    ("def f(model, tp=1): pass", "tp is called n_devices"),
    ("def f(df, slo=0.1): pass", "slo is called slo_s"),
    ("def f(df, *, tpot_slo=0.1): pass", "tpot_slo is called tpot_slo_s"),
    ("def f(df, ttft_slo=0.1): pass", "ttft_slo is called ttft_slo_s"),
    ("def f(service_time): pass", "service_time is a time"),
    ("def f(warmup_seconds=1): pass", "warmup_seconds is a time"),
    ("def step_time(model): pass", "a time ends in _s"),
    ("def table(efficiency=None): pass", "efficiency is called achievable"),
    ("def f(accelerator, model): pass", "model comes before accelerator"),
    ("def tp_options(model, prices, context): pass", "decision function"),
    ("def moe_options(model, options, context): pass", "decision function"),
    ("def mig_options(options, model): pass", "decision function"),
    ("def fleet_options(machines, *, slo_s): pass", "decision function"),
    ("class Step:\n    def __init__(self, model, tp=1): pass", "Step: parameter tp"),
    ("class Step:\n    def predict(self, efficiency): pass", "Step.predict: parameter efficiency"),
])
def test_each_check_catches_a_planted_violation(src, words):
    assert any(words in v for v in _one(src)), _one(src)


@pytest.mark.parametrize("src", [
    "def f(model, accelerator, n_devices=1, *, slo_s=0.1, achievable=True): pass",
    "def row_rates(rows, accelerator, efficiency, weight_format): pass",
    "def tp_options(model, options=(1, 2), *, tpot_s, prices, achievable=True): pass",
    "def fleet_options(options, *, demand_per_s, slo_s): pass",
    "def _private(model_, gpu, tp, achievable=False): pass",
    "def predict(self_table, achievable): pass",     # required: no default to hold
    "class _Hidden:\n    def __init__(self, gpu): pass",
])
def test_what_follows_the_convention_passes(src):
    assert _one(src) == []


def test_a_planted_alias_is_caught():
    tree = ast.parse("def tp_step_s(): pass\ntp_decode_step_s = tp_step_s\n")
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    aliases = [t.id for n in tree.body if isinstance(n, ast.Assign)
               and isinstance(n.value, ast.Name) and n.value.id in defined for t in n.targets]
    assert aliases == ["tp_decode_step_s"]

"""gpu-check: everything a lent GPU should run, in one go, and the dry-run report.

On a machine with an NVIDIA GPU, `run` measures `bench` (full) into a run of its own
(`--out-dir`, default `gpu-check-out/`: never over the package's shipped reference runs),
runs every lab of the checkout (each in a fresh kernel, `run_labs`, with the lab's
Colab/Kaggle install cell skipped: it would install GitHub's package over the checkout
being measured), checks the targets (`check_targets`) and writes the dry-run report
(`dry_run_report`, read back by `read_report`: the package version and git commit measured,
each lab's wall time, the key numbers `LAB_KEY_NUMBERS` names, and failures). Without a
GPU: the tiny plan on the CPU; with a report asked for, every lab on the CPU too, the report
headed as a CPU run."""

from __future__ import annotations

import math
import pathlib
import re
import subprocess
import time

from gpuinfer.course import release as _release
from gpuinfer.course.bench_suite import (bench_plan, measure_plan, print_device,
                                         print_estimate, summary, tidy_stages)
from gpuinfer.hardware import measured_rates

#: The whole check must fit in 8 minutes on an H200.
GPU_CHECK_BUDGET_S = 480
#: Per-lab limit under nbval, seconds: a lab that takes longer has a problem worth seeing.
LAB_TIMEOUT_S = 300

#: The three targets, by the bench stage each reads.
TARGET_STAGES = {"weight read, largest": "weight_read", "fp16 matmul, largest square": "matmul",
                 "decode batch 1 (CUDA graph), of weight-read ceiling": "decode"}
#: A healthy card reaches at least this share of what the same card was published to reach:
#: the published figures are a best size from a search (MAMF) or a best run, this is one run.
HEALTHY_SHARE = 0.9
#: Where the catalogue has no measured figure for a card, the low end of the published
#: ranges (shares of the datasheet): copies reach 75-90% of the memory bandwidth (V100
#: 83-88%, A100 83%: the hardware reference), the best matmuls 78-87% of the dense peak on
#: NVIDIA data-centre GPUs (MAMF: B200 78%, H100 SXM 80%, A100 SXM 87%).
UNPUBLISHED_SHARE = {"weight read, largest": 0.75, "fp16 matmul, largest square": 0.78}


def _published_decode_share() -> float:
    """gpt-fast's batch-1 decode as a share of what its A100 80GB's copies reach: the
    weights it read a second (llama-2-7b, bf16, 104.9 tokens/s: ~1,413 GB/s) over the
    ~1,700 GB/s measured on that card."""
    from gpuinfer.hardware import measured_rates
    from gpuinfer.predict import step_model
    from gpuinfer.measure import reference as _reference

    read = step_model.weight_bytes("llama-2-7b", "bf16") * _reference.GPT_FAST_TOKENS_PER_S["bf16"]
    return read / float(measured_rates.achievable("A100 80GB")["bandwidth_bytes_per_s"])


def card_targets(entry=None) -> dict:
    """Each target's goal for the card `entry` (a catalogue name; None or unknown: the
    unpublished ranges), as {target: (goal, basis)}: `HEALTHY_SHARE` of what the catalogue's
    measured figures say the same card reaches (`hardware.achievable`): its measured copy
    bandwidth over its datasheet's, its best measured 16-bit matmul over its dense fp16 peak
    (a T4 ~64%, an H100 PCIe ~61%); the batch-1 decode's goal is gpt-fast's share of its
    card's copies (`_published_decode_share`) times the card's read goal. Where the card has
    no such figure, `UNPUBLISHED_SHARE` (said in the basis)."""
    from gpuinfer import hardware as _hardware

    try:
        acc = _hardware.get(entry) if entry else None
    except (KeyError, ValueError):
        acc = None
    pub = measured_rates.achievable(acc.name) if acc is not None else None
    out = {}

    def published(key, datasheet, what):
        value = math.nan if pub is None else float(pub[key])
        if not (value == value and datasheet and datasheet > 0):
            return None, None
        shown = f"{value / 1e12:,.4g} TFLOP/s" if "flops" in key else f"{value / 1e9:,.4g} GB/s"
        return value / datasheet, (f"{HEALTHY_SHARE:.0%} of the {shown} {what} measured on the "
                                   f"{acc.name} ({value / datasheet:.0%} of its datasheet)")

    read_share, basis = published("bandwidth_bytes_per_s", acc.bandwidth if acc else None,
                                 "copy")
    if read_share is None:
        read_share = UNPUBLISHED_SHARE["weight read, largest"]
        basis = (f"{HEALTHY_SHARE:.0%} of {read_share:.0%} of the datasheet, the low end of "
                 "published copies (no measured copy for this card in the catalogue)")
    out["weight read, largest"] = (HEALTHY_SHARE * read_share, basis)
    fp16_peak = acc.peaks.get("fp16") if acc is not None else None
    mm_share, basis = published("matmul_fp16_flops", fp16_peak, "fp16 matmul")
    if mm_share is None:
        mm_share, basis = published("matmul_bf16_flops", fp16_peak, "bf16 matmul (MAMF)")
    if mm_share is None:
        mm_share = UNPUBLISHED_SHARE["fp16 matmul, largest square"]
        basis = (f"{HEALTHY_SHARE:.0%} of {mm_share:.0%} of the dense peak, the low end of "
                 "MAMF on NVIDIA data-centre GPUs (no measured matmul for this card)")
    out["fp16 matmul, largest square"] = (HEALTHY_SHARE * mm_share, basis)
    decode = _published_decode_share()
    out["decode batch 1 (CUDA graph), of weight-read ceiling"] = (
        decode * out["weight read, largest"][0],
        f"gpt-fast's {decode:.0%} of its card's copies, times this card's read goal")
    return out


#: A card whose power limit is at most this (W) cannot hold its boost clock under
#: sustained matmuls (a 70 W T4 drops toward its 585 MHz base): its peak is out of reach.
LOW_POWER_W = 75
#: What a miss the card does not explain asks the instructor to look at.
UNEXPLAINED_MISS = ("not explained by this card's figures: look for another process on the GPU "
                    "(nvidia-smi), thermal throttling, a lowered power limit or clocks, then "
                    "rerun; a second miss is worth reporting")


def _why_missed(name, stage, entry) -> str:
    """Why a missed target missed: the stage's sampled clocks (a power cap held during the
    work), the catalogue (a low-power card), or else `UNEXPLAINED_MISS`: never empty."""
    from gpuinfer import hardware as _hardware

    clk = getattr(stage, "clocks", None) or {}
    share = (clk.get("throttle_shares") or {}).get("software power cap", 0.0)
    sm, top = clk.get("sm_clock_mhz", math.nan), clk.get("sm_clock_max_mhz", math.nan)
    if share >= 0.5:
        return (f"power-capped card: software power cap in {share:.0%} of the samples, median "
                f"SM clock {sm:,.0f} of {top:,.0f} MHz; expected, not a fault")
    try:
        acc = _hardware.get(entry) if entry else None
    except (KeyError, ValueError):
        acc = None
    if (acc is not None and "weight" in name and "ECC" in (acc.memory_source or "")
            and math.isnan(float(measured_rates.achievable(acc.name)["bandwidth_bytes_per_s"]))):
        return ("ECC is on by default on this card (its catalogue entry) and takes part of its "
                "memory bandwidth; no copy was published for it, so its goal is the generic "
                "one: compare with its reference run before calling it a fault")
    if acc is not None and acc.tdp_w and acc.tdp_w <= LOW_POWER_W and "matmul" in name:
        return (f"a {acc.tdp_w:.0f} W card cannot hold its boost clock under sustained "
                f"matmuls (the published figure may be a burst's); expected, not a fault")
    return UNEXPLAINED_MISS


def check_targets(stages, entry=None) -> list[dict]:
    """The targets against a bench run's raw stages: one dict per target with the measured
    fraction, this card's goal and how it was derived (`card_targets(entry)`, `basis`),
    whether it was met (None when the run has no such row) and, for every miss, why
    (`_why_missed`: a power cap seen while the stage ran, a card of at most `LOW_POWER_W`
    W such as the 70 W T4, or what to look at)."""
    out = []
    goals = card_targets(entry)

    def add(name, value, what):
        target, basis = goals[name]
        ok = None if value is None or value != value else bool(value >= target)
        why = _why_missed(name, stages.get(TARGET_STAGES[name]), entry) if ok is False else ""
        out.append({"target": name, "measured": value, "goal": target, "met": ok, "row": what,
                    "why": why, "basis": basis})

    reads = stages["weight_read"].rows if "weight_read" in stages else None
    if reads is not None and len(reads):
        flushed = reads[reads["flush_cache"]] if "flush_cache" in reads else reads
        row = flushed.loc[flushed["bytes"].idxmax()] if len(flushed) else None
        add("weight read, largest", None if row is None else float(row["fraction_of_peak"]),
            "" if row is None else f"{row['bytes'] / 1e9:.2f} GB")
    mm = stages["matmul"].rows if "matmul" in stages else None
    if mm is not None and len(mm):
        sq = mm[(mm["m"] == mm["n"]) & (mm["n"] == mm["k"]) & (mm["dtype"] == "fp16")]
        row = sq.loc[sq["flops"].idxmax()] if len(sq) else None
        held = math.nan if row is None else float(row.get("sustained_fraction_of_peak", math.nan))
        add("fp16 matmul, largest square", None if row is None else float(row["fraction_of_peak"]),
            "" if row is None else f"{int(row['m'])}^3" + (
                f", sustained {held:.0%} after running back to back" if held == held else ""))
    dec = stages["decode"].rows if "decode" in stages else None
    if dec is not None and len(dec):
        b1 = dec[(dec["batch"] == 1) & dec["cuda_graph"]]
        row = b1.iloc[0] if len(b1) else None
        add("decode batch 1 (CUDA graph), of weight-read ceiling",
            None if row is None else float(row["fraction_of_weight_read_ceiling"]),
            "" if row is None else str(row["model"]))
    return out


def repo_root() -> pathlib.Path | None:
    """The checkout this package runs from (labs/ beside src/), if it is one."""
    root = pathlib.Path(__file__).resolve().parents[3]
    return root if (root / "labs").is_dir() else None


def _lab10_ms(rows, tokens) -> str:
    """Lab 10's measured milliseconds for one layer kind at a token count (an expression)."""
    return f"float(sweep.query(\"{rows} and tokens == {tokens}\")['measured ms'].iloc[0])"


_MIXTRAL_MOE = "kind == 'MoE' and layer == 'Mixtral-8x7B layer'"
_MIXTRAL_DENSE = "kind == 'dense' and layer == 'Mixtral-8x7B layer'"

#: What the dry-run report reads from each lab once it has run: (row label, expression
#: evaluated in the lab's own namespace, unit). Labels are stable: the instructor notes
#: quote them. A lab that did not reach a number reports why in its row.
LAB_KEY_NUMBERS = {
    "01_weight_reads": [
        ("weight read, largest, cache flushed", "measured_bandwidth / 1e9", "GB/s"),
        ("weight read, fraction of the ceiling", "share.median", "fraction"),
        ("decode chain, batch 1", "step['tokens_per_s']", "tokens/s"),
        ("decode chain, batch 1, of the measured read's ceiling", "reached.median", "fraction"),
    ],
    "02_matmul_roofline": [
        ("matmul, best measured", "measured['peak_flops'] / 1e12", "TFLOP/s"),
        ("matmul, fraction of the dense peak", "peak_share", "fraction"),
        ("ridge, measured", "measured['ridge']", "FLOP/byte"),
        ("ridge, datasheet", "acc.ridge_point(dtype)", "FLOP/byte"),
        ("median SM clock during the sweep", "sampled.summary()['sm_clock_mhz']", "MHz"),
    ],
    "03_decode_batching": [
        ("decode, batch 1", "float(sweep['tokens_per_s'].iloc[0])", "tokens/s"),
        ("decode, largest batch", "float(sweep['tokens_per_s'].iloc[-1])", "tokens/s"),
        ("largest batch", "int(sweep['batch'].iloc[-1])", "sequences"),
        ("batch 1, of the achievable ceiling", "reached", "fraction"),
    ],
    "04_quantised_weights": [
        ("dense step, batch 1", "speed.loc['dense', 'ms']", "ms"),
        ("speed-up, int8-dequant", "speed.loc['int8-dequant', 'speedup']", "x"),
        ("speed-up, int8-pack", "speed.loc['int8-pack', 'speedup']", "x"),
        ("speed-up, int4-unpack", "speed.loc['int4-unpack', 'speedup']", "x"),
    ],
    "05_cpu_vs_gpu": [
        ("CPU, batch 1", "cpu_b1.median * 1e3", "ms"),
        ("CPU, best throughput", "cpu_best", "predictions/s"),
        ("GPU, best throughput",
         "sweep[sweep.device == 'cuda'].predictions_per_s.max()", "predictions/s"),
    ],
    "06_batching_under_load": [
        ("decode step, batch 1", "first.seconds * 1e3", "ms"),
        ("decode step, largest batch", "int(last.batch)", "sequences"),
        ("throughput gain, largest batch over batch 1", "gain", "x"),
        ("best policy's capacity", "float(best['capacity_per_s'])", "requests/s"),
    ],
    "07_tensor_parallel": [
        ("all-reduce latency (fit)", "fit_lat * 1e6", "us"),
        ("all-reduce bandwidth (fit)", "fit_bw / 1e9", "GB/s"),
        ("sharded step, speed-up at the largest N",
         "float(step_table['speed-up vs N = 1'].iloc[-1])", "x"),
    ],
    "08_triton_dynamic_batching": [
        ("served through Triton", "int(SERVED)", "1 = yes"),
        ("service time, batch 1", "float(table['seconds'].iloc[0]) * 1e3", "ms"),
        ("service time, batch 32", "float(table['seconds'].iloc[-1]) * 1e3", "ms"),
    ],
    "09_compile_fuse_calibrate": [
        ("fp32 ONNX Runtime, batch 256", "fp32.median_s * 1e3", "ms"),
        ("int8, best speed-up", "best", "x"),
    ],
    "10_moe_experts": [
        ("MoE layer (Mixtral shape), 1 token",
         _lab10_ms(_MIXTRAL_MOE, 1), "ms"),
        ("MoE layer (Mixtral shape), 16 tokens",
         _lab10_ms(_MIXTRAL_MOE, 16), "ms"),
        ("dense twin (Mixtral shape), 16 tokens",
         _lab10_ms(_MIXTRAL_DENSE, 16), "ms"),
        ("MoE layer, best fraction of its roofline",
         "float(sweep[sweep.kind == 'MoE']['of ceiling'].max())", "fraction"),
    ],
    # Lab 11 runs a real model (SmolLM2-135M); where the model is not installed its cells
    # skip, and these rows say "not reached".
    "11_real_model": [
        ("TTFT (prefill)", "float(table.loc['TTFT (prefill)', 'measured ms'])", "ms"),
        ("TPOT (decode), batch 1", "tpot_ms", "ms"),
        ("decode, of the ceiling", "of_ceiling", "fraction"),
        ("CUDA graph gain", "graph_gain", "x"),
        ("decode, largest batch", "float(sweep['tokens/s'].iloc[-1])", "tokens/s"),
    ],
}
_KEY_MARK = "@@gpuinfer-key-numbers@@"


def _collector_source(keys) -> str:
    """A cell that evaluates each key expression in the lab's namespace and prints them."""
    return ("import json as _gj\n_gk = {}\n"
            f"for _gl, _ge in {[(label, expr) for label, expr, _ in keys]!r}:\n"
            "    try:\n        _gk[_gl] = float(eval(_ge))\n"
            "    except Exception as _gx:\n"
            "        _gk[_gl] = f'not reached ({type(_gx).__name__}: {_gx})'\n"
            f"print({_KEY_MARK!r} + _gj.dumps(_gk))\n")


#: What runs in place of a lab's Colab/Kaggle install cell under gpu-check: on Kaggle (the
#: environment variable reaches the kernel) and Colab (its launcher imports google.colab)
#: the cell would pip-install GitHub's package over the checkout, so the report would
#: measure other code (and lab 8's cell can restart its own kernel).
SKIPPED_SETUP = ("# gpu-check: this lab's Colab/Kaggle install cell is skipped: the checkout's "
                 "own package is measured\n")


def skip_setup_cells(nb, n_cells=None) -> list[int]:
    """Replace each Colab/Kaggle install cell (`release.is_setup_cell`) among the first
    `n_cells` cells of notebook `nb` (nbformat) with `SKIPPED_SETUP`; their indices."""
    skipped = []
    for i, cell in enumerate(nb.cells[:n_cells]):
        if cell.cell_type == "code" and _release.is_setup_cell(cell.source):
            cell.source = SKIPPED_SETUP
            skipped.append(i)
    return skipped


def run_lab(path, timeout_s=LAB_TIMEOUT_S, cwd=None) -> dict:
    """Run one lab notebook top to bottom in a fresh kernel (nbclient; a failing cell is
    recorded and the rest still run, as under nbval), its install cell skipped
    (`skip_setup_cells`), and read its key numbers (`LAB_KEY_NUMBERS`): {lab, passed,
    seconds, detail, failures, numbers, skipped_setup (cell indices)}."""
    import json

    import nbformat
    from nbclient import NotebookClient

    path = pathlib.Path(path)
    keys = LAB_KEY_NUMBERS.get(path.stem, [])
    nb = nbformat.read(path, as_version=4)
    n_cells = len(nb.cells)
    skipped = skip_setup_cells(nb, n_cells)
    nb.cells.append(nbformat.v4.new_code_cell(_collector_source(keys)))
    start = time.perf_counter()
    failures, stopped = [], None
    try:
        NotebookClient(nb, timeout=timeout_s, allow_errors=True, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd or path.parent)}}).execute()
    except Exception as exc:  # a cell past its timeout, a kernel that died
        stopped = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    seconds = time.perf_counter() - start
    found = {}
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error" and i < n_cells:
                failures.append(f"cell {i}: {out.get('ename')}: {out.get('evalue', '')}")
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            if i == n_cells and _KEY_MARK in text:
                found = json.loads(text.split(_KEY_MARK, 1)[1].splitlines()[0])
    if stopped:
        failures.append(f"stopped: {stopped}")
    numbers = [(label, found.get(label, "not reached (the lab stopped first)"), unit)
               for label, _, unit in keys]
    passed = not failures
    detail = "passed" if passed else f"{len(failures)} failure(s)"
    return {"lab": path.name, "passed": passed, "seconds": seconds, "detail": detail,
            "failures": failures, "numbers": numbers, "skipped_setup": skipped}


def lab_notebooks(root) -> list[pathlib.Path]:
    """The labs gpu-check runs from the checkout at `root`: each lab `LAB_KEY_NUMBERS`
    names, in order (one whose notebook is not in this checkout is skipped, with a line
    saying so), then any other notebook in labs/ (run, with no key numbers)."""
    folder = pathlib.Path(root) / "labs"
    found = []
    for stem in LAB_KEY_NUMBERS:
        path = folder / f"{stem}.ipynb"
        if path.is_file():
            found.append(path)
        else:
            print(f"  {stem}.ipynb: not in this checkout, skipped")
    return found + sorted(p for p in folder.glob("*.ipynb") if p.stem not in LAB_KEY_NUMBERS)


def provenance(root=None) -> dict:
    """What the report measured: {'gpuinfer': the package version (`release.package_version`),
    'commit': the checkout's git commit ('unknown: ...' outside a git checkout), 'dirty':
    whether tracked files differ from it (None when unknown)}."""
    root = repo_root() if root is None else pathlib.Path(root)
    out = {"gpuinfer": _release.package_version(root) if root else _release.package_version(),
           "commit": "unknown: not a git checkout", "dirty": None}
    if root is None:
        return out

    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()

    try:
        out["commit"] = git("rev-parse", "HEAD")
        out["dirty"] = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError) as exc:
        out["commit"] = f"unknown: git failed ({type(exc).__name__})"
    return out


def describe_commit(prov) -> str:
    """The commit row of the report: the hash, and a warning when the tree was dirty."""
    commit = prov.get("commit", "unknown")
    if prov.get("dirty"):
        return (f"{commit} plus uncommitted changes (the labs ran with them: commit, then "
                "rerun, for a report that names what it measured)")
    if prov.get("dirty") is None and not str(commit).startswith("unknown"):
        return f"{commit} (whether the tree was clean: unknown)"
    return commit


def run_labs(notebooks, timeout_s=LAB_TIMEOUT_S, cwd=None) -> list[dict]:
    """`run_lab` for each notebook, printing a line as each ends. A lab that errs or runs
    past `timeout_s` (a cell) is reported, not raised."""
    results = []
    for nb in notebooks:
        r = run_lab(nb, timeout_s, cwd)
        results.append(r)
        print(f"  {r['lab']}: {'passed' if r['passed'] else 'FAILED'} in {r['seconds']:.0f} s"
              + ("" if r["passed"] else f" ({'; '.join(r['failures'])[:300]})"))
    return results


# --- the dry-run report ----------------------------------------------------------------------------

DRY_RUN_REPORT = pathlib.Path("workshop") / "dry_run.md"
CPU_REPORT_NOTE = ("No GPU: values are CPU values; rerun on the workshop GPU "
                   "(`python -m gpuinfer gpu-check --report`).")


def _cell(text) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value) -> str:
    if isinstance(value, str):
        return _cell(value)
    if value != value:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def dry_run_report(env, labs, *, total_s, targets=(), clocks_line="", prov=None) -> str:
    """The dry-run report as markdown (headings from '##' down, so that the instructor
    notes can include it): the machine and what was measured (`prov`: `provenance`'s
    package version and git commit), then one table per lab (wall time, result, its key
    numbers with units, each failure with its error), then the bench targets."""
    on_gpu = env.get("device_type") == "cuda"
    lines = ["## Dry run: " + ("GPU run" if on_gpu else "CPU run"), ""]
    if not on_gpu:
        lines += [f"**{CPU_REPORT_NOTE}**", ""]
    prov = prov or {"gpuinfer": _release.package_version(), "commit": "unknown", "dirty": None}
    lines += ["| machine | |", "|---|---|"]
    for label, value in (("gpuinfer version", prov.get("gpuinfer", "")),
                         ("commit", describe_commit(prov)),
                         ("device", env.get("device", "")),
                         ("catalogue entry", env.get("catalogue_entry", "")),
                         ("torch", env.get("torch", "")), ("CUDA", env.get("cuda") or "none"),
                         ("date", env.get("date", "")), ("clocks", clocks_line or "n/a"),
                         ("labs passed", f"{sum(r['passed'] for r in labs)} of {len(labs)}"),
                         ("whole check, wall time", f"{total_s:,.0f} s")):
        lines.append(f"| {label} | {_cell(value)} |")
    for r in labs:
        lines += ["", f"### {pathlib.Path(r['lab']).stem}", "",
                  "| measurement | value | unit |", "|---|---|---|",
                  f"| wall time | {r['seconds']:,.1f} | s |",
                  f"| result | {'passed' if r['passed'] else 'FAILED'} | |"]
        if r.get("skipped_setup"):
            lines.append(f"| install cell skipped | cell {', '.join(map(str, r['skipped_setup']))}"
                         " | |")
        for label, value, unit in r.get("numbers", []):
            lines.append(f"| {_cell(label)} | {_value(value)} | {_cell(unit)} |")
        for i, failure in enumerate(r.get("failures", []), 1):
            lines.append(f"| failure {i} | {_cell(failure)} | |")
    if targets:
        lines += ["", "### Bench targets", "",
                  "| target | measured | goal | result | goal from |", "|---|---|---|---|---|"]
        for t in targets:
            m = t["measured"]
            lines.append(f"| {_cell(t['target'])} | "
                         f"{'n/a' if m is None or m != m else f'{m:.0%}'} | {t['goal']:.0%} | "
                         f"{ {True: 'met', False: 'missed', None: 'no figure'}[t['met']]}"
                         f"{_cell(': ' + t['why']) if t.get('why') else ''} | "
                         f"{_cell(t.get('basis', ''))} |")
    return "\n".join(lines) + "\n"


def read_report(text) -> dict:
    """The labs of a `dry_run_report` back from its markdown: {lab: {row label: (value,
    unit)}} (values as written). For tests and for tools that fill the notes."""
    labs, current = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            current = labs.setdefault(line[4:].strip(), {})
        elif current is not None and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if len(cells) >= 2 and cells[0] not in ("measurement", "target"):
                current[cells[0]] = tuple(cells[1:])
    return labs


def _format_check(targets, labs, total_s) -> str:
    lines = [f"{'target':<52} {'measured':>9} {'goal':>6}  result"]
    for t in targets:
        value = "n/a" if t["measured"] is None or t["measured"] != t["measured"] \
            else f"{t['measured']:.0%}"
        verdict = {True: "met", False: "MISSED", None: "no figure"}[t["met"]]
        lines.append(f"{t['target']:<52} {value:>9} {t['goal']:>6.0%}  {verdict} {t['row']}")
        if t.get("why"):
            lines.append(f"{'':<52} {'':>9} {'':>6}  ({t['why']})")
    for lab in labs:
        lines.append(f"{'lab ' + lab['lab']:<52} {lab['seconds']:>8.0f}s {'':>6}  "
                     f"{'passed' if lab['passed'] else 'FAILED'}")
    over = total_s > GPU_CHECK_BUDGET_S
    lines.append(f"{'whole check, wall time':<52} {total_s:>8.0f}s {GPU_CHECK_BUDGET_S:>5}s  "
                 f"{'OVER BUDGET' if over else 'within budget'}")
    if over:
        lines.append(f"{'':<52} {'':>9} {'':>6}  (the budget is an H200's; a slower or "
                     "power-capped card takes longer: reported, not a failure)")
    return "\n".join(lines)


def _labs_available(labs):
    """(root, why not): the checkout whose labs/ to run, or why they cannot run."""
    import importlib.util

    root = repo_root()
    if not labs:
        return None, "skipped (--no-labs)"
    if root is None:
        return None, "no labs/ folder beside the package (not a checkout): not run"
    if importlib.util.find_spec("nbclient") is None:
        return None, "nbclient is not installed (pip install -e '.[dev]'): not run"
    return root, None


def _write_report(path, text):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"dry-run report written to {path}")


#: Where gpu-check writes its bench run without `--out-dir` (relative to where it runs).
DEFAULT_OUT_DIR = pathlib.Path("gpu-check-out")


def run_path(out_dir, env) -> pathlib.Path:
    """Where gpu-check writes its bench run: `out_dir` (default `DEFAULT_OUT_DIR`) /
    `reference.default_filename(env)`. ValueError for a folder inside the package's
    shipped reference runs: a dry run never overwrites a card's shipped reference."""
    from gpuinfer.measure import reference as _reference

    folder = out_folder(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / _reference.default_filename(env)


def out_folder(out_dir) -> pathlib.Path:
    """`out_dir` (default `DEFAULT_OUT_DIR`), refused (ValueError) where it is, or is
    inside, the package's shipped reference runs."""
    from gpuinfer.measure import reference as _reference

    folder = pathlib.Path(out_dir) if out_dir else DEFAULT_OUT_DIR
    shipped = _reference.DIRECTORY.resolve()
    if folder.resolve() == shipped or shipped in folder.resolve().parents:
        raise ValueError(f"out_dir {folder} is the package's shipped reference runs: gpu-check "
                         "writes elsewhere; copy a run there by hand to ship it")
    return folder


def run(out_dir=None, labs=True, progress=True, report=None) -> int:
    """`python -m gpuinfer gpu-check`: see the module docstring. Returns the exit code:
    0 when everything ran (targets missed are reported, not failed), 1 when a lab failed
    or could not run. `report`: a path for the dry-run report (`dry_run_report`); on a
    GPU it defaults to workshop/dry_run.md of the checkout when the labs run. Without a
    GPU the labs run only when a report is asked for (on the CPU, labelled as such)."""
    import torch

    from gpuinfer.measure import torch_device
    from gpuinfer.measure import environment
    from gpuinfer.measure import reference as _reference

    start = time.perf_counter()
    out_dir = pathlib.Path(out_dir) if out_dir else None
    out_folder(out_dir)  # a folder inside the shipped reference runs is refused before any work
    if not (torch.cuda.is_available() and torch.version.cuda):
        print("gpu-check: no NVIDIA GPU here (torch.cuda.is_available() is "
              f"{torch.cuda.is_available()}, CUDA build: {torch.version.cuda or 'no'}).")
        print("Running the CPU-safe part: the tiny bench plan on this CPU (not written to "
              "the package's reference runs). On an NVIDIA GPU this command runs bench "
              f"(full) and every lab, writes {out_dir or DEFAULT_OUT_DIR}/<gpu>.csv (never "
              "the shipped reference runs), checks the targets and writes the dry-run "
              "report.")
        cpu = torch.device("cpu")
        stage_start = time.perf_counter()
        df = tidy_stages(measure_plan(bench_plan(cpu, "tiny"), cpu, progress=False),
                         environment.environment(cpu))
        print(summary(df))
        print(f"tiny bench plan: {time.perf_counter() - stage_start:.1f} s")
        print_estimate(bench_plan("cuda", "full", accelerator="H200"), "H200",
                        GPU_CHECK_BUDGET_S)
        ok = True
        if report:
            root, why = _labs_available(labs)
            lab_results = []
            if root is None:
                print(f"labs: {why}")
                ok = False
            else:
                print("labs on this CPU, for the report:")
                lab_results = run_labs(lab_notebooks(root), cwd=root / "labs")
                ok = all(r["passed"] for r in lab_results)
            _write_report(report, dry_run_report(
                environment.environment(cpu), lab_results, total_s=time.perf_counter() - start,
                clocks_line="n/a (a CPU)", prov=provenance(root)))
        print(f"gpu-check: CPU-safe part done in {time.perf_counter() - start:.0f} s; "
              "no GPU was checked.")
        return 0 if ok else 1
    device = torch.device("cuda")
    env, acc = print_device(device)
    plan = bench_plan(device, "full")
    print_estimate(plan, acc, GPU_CHECK_BUDGET_S)
    with environment.sample_clocks(device) as sampled:
        stages = measure_plan(plan, device, progress)
    df = tidy_stages(stages, env)
    path = _reference.save(df, run_path(out_dir, env))
    print(summary(df))
    print(f"bench: {len(df)} rows written to {path} (to ship it as this card's reference "
          f"run, copy it to {_reference.DIRECTORY} and commit it); stage wall times: "
          + ", ".join(f"{k} {s.seconds:.1f} s" for k, s in stages.items()))
    torch_device.free_memory()
    lab_results, ok = [], True
    root, why = _labs_available(labs)
    if root is None:
        print(f"labs: {why}")
        ok = not labs
    else:
        print("labs:")
        lab_results = run_labs(lab_notebooks(root), cwd=root / "labs")
        ok = all(r["passed"] for r in lab_results)
        report = report or root / DRY_RUN_REPORT
    failures = getattr(stages.get("quantised"), "failures", None) or {}
    ok = ok and not failures
    targets = check_targets(stages, env.get("catalogue_entry"))
    text = _format_check(targets, lab_results, time.perf_counter() - start)
    print(text)
    clocks_line = environment.describe_sampled(sampled.summary())
    print(clocks_line)
    (path.parent / "gpu-check-summary.txt").write_text(text + "\n")
    if report:
        bench_lab = {"lab": "bench (python -m gpuinfer bench, full)", "passed": not failures,
                     "seconds": sum(st.seconds for st in stages.values()),
                     "numbers": [(f"{k} stage", st.seconds, "s") for k, st in stages.items()],
                     "failures": list(failures.values())}
        _write_report(report, dry_run_report(env, [bench_lab] + lab_results,
                                             total_s=time.perf_counter() - start,
                                             targets=targets, clocks_line=clocks_line,
                                             prov=provenance(root)))
    return 0 if ok else 1

import re

import pytest

pytest.importorskip("torch")

from gpuinfer import __main__ as cli  # noqa: E402
from gpuinfer.course import bench_suite, gpu_check  # noqa: E402
from gpuinfer.measure import reference  # noqa: E402


def test_bench_tiny_writes_a_run_that_reference_loads(tmp_path, capsys):
    out = tmp_path / "run.csv"
    assert cli.main(["bench", "--sizes", "tiny", "--out", str(out), "--device", "cpu",
                     "--threads", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "catalogue entry: CPU" in printed and "not of this machine" in printed
    assert "decode step, batch 1" in printed and f"written to {out}" in printed
    df = reference.load(out)
    assert set(df["experiment"]) == {"weight_read", "matmul", "decode", "quantised"}
    assert set(df["device_type"]) == {"cpu"} and set(df["dtype"]) == {"fp32"}
    assert set(df["cpu_threads"]) == {1} and "1 thread;" in reference.label(df)
    assert (df["value"] > 0).all() and (df["ceiling"] > 0).all()
    assert (df["fraction_of_ceiling"] - df["value"] / df["ceiling"]).abs().max() < 1e-12
    decode = df[df["experiment"] == "decode"]
    assert sorted(decode["batch"]) == [1, 2]
    quant = df[df["experiment"] == "quantised"]
    assert "dense" in set(quant["kernel"]) and "int8-dequant" in set(quant["kernel"])


def test_bench_plan_sizes():
    import torch

    cpu = torch.device("cpu")
    quick, full = bench_suite.bench_plan(cpu, "quick"), bench_suite.bench_plan(cpu, "full")
    assert len(quick["matmul_shapes"]) < len(full["matmul_shapes"])
    assert len(quick["batches"]) < len(full["batches"])
    assert quick["flush_cache"] and quick["model"].d_model == full["model"].d_model
    with pytest.raises(ValueError, match="sizes"):
        bench_suite.bench_plan(cpu, "huge")


def test_bench_rejects_unknown_sizes():
    with pytest.raises(SystemExit):
        cli.main(["bench", "--sizes", "huge"])


def test_gpu_check_without_a_gpu_runs_the_cpu_safe_part_and_exits_0(tmp_path, capsys):
    import torch

    shipped = reference.files()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # steadier on a small shared machine
    try:
        assert cli.main(["gpu-check", "--out-dir", str(tmp_path), "--no-progress"]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "no NVIDIA GPU here" in out and "CPU-safe part done" in out
    assert "decode step, batch 1" in out and "estimated timing on H200" in out
    assert reference.files() == shipped  # a CPU smoke test never becomes a reference run


def test_gpu_check_estimate_for_an_h200_fits_its_budget(capsys):
    assert cli.main(["gpu-check", "--estimate", "H200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = next(line for line in lines if line.strip().startswith("total"))
    seconds = float(total.split("points")[1].split("s")[0])
    assert 0 < seconds < gpu_check.GPU_CHECK_BUDGET_S
    stages = {line.split()[0] for line in lines[1:-1]}
    assert stages == {"weight", "matmul", "decode", "quantised"}


def test_the_targets_from_hand_rows():
    import pandas as pd

    S = bench_suite.Stage
    stages = {
        "weight_read": S(pd.DataFrame({"bytes": [1e6, 2e9], "flush_cache": [True, True],
                                       "fraction_of_peak": [0.5, 0.88]}), 1.0, {}),
        "matmul": S(pd.DataFrame({"m": [1, 8192], "n": [8192, 8192], "k": [8192, 8192],
                                  "dtype": ["fp16", "fp16"], "flops": [2 * 8192**2, 2 * 8192**3],
                                  "fraction_of_peak": [0.01, 0.70]}), 1.0, {}),
        "decode": S(pd.DataFrame({"batch": [1, 1, 2], "cuda_graph": [False, True, True],
                                  "model": ["m"] * 3,
                                  "fraction_of_weight_read_ceiling": [0.3, 0.66, 0.9]}), 1.0, {}),
    }
    got = {t["target"]: (t["measured"], t["met"]) for t in gpu_check.check_targets(stages)}
    # No card named: the low ends of the published ranges, 90% of each: reads 0.9 x 0.75
    # = 0.675, matmuls 0.9 x 0.78 = 0.702.
    assert got["weight read, largest"] == (0.88, True)            # the 2 GB read
    assert got["fp16 matmul, largest square"] == (0.70, False)    # 8192^3: 70% < 70.2%
    assert got["decode batch 1 (CUDA graph), of weight-read ceiling"] == (0.66, True)
    text = gpu_check._format_check(gpu_check.check_targets(stages),
                             [{"lab": "01_weight_reads.ipynb", "passed": True, "seconds": 42}],
                             500)
    assert "MISSED" in text and "OVER BUDGET" in text and "01_weight_reads.ipynb" in text
    assert "the budget is an H200's" in text
    # No card to blame here (no clocks, no catalogue entry): the miss says what to look at.
    assert "power-capped card:" not in text and "expected, not a fault" not in text
    assert gpu_check.UNEXPLAINED_MISS in text
    # A T4 whose matmul stage was held by its 70 W cap (software power cap in 9 of 10
    # samples, median 900 of 1590 MHz): the miss says so instead of reading as a fault.
    stages["matmul"].rows["fraction_of_peak"] = [0.01, 0.50]
    stages["matmul"].clocks = {"sm_clock_mhz": 900.0, "sm_clock_max_mhz": 1590.0,
                               "throttle_shares": {"software power cap": 0.9}}
    why = {t["target"]: t["why"] for t in gpu_check.check_targets(stages, "T4")}
    assert why["fp16 matmul, largest square"] == (
        "power-capped card: software power cap in 90% of the samples, median SM clock 900 "
        "of 1,590 MHz; expected, not a fault")
    assert why["weight read, largest"] == ""                    # met: nothing to explain
    # No clocks sampled, but a 70 W card by its catalogue entry: still explained.
    stages["matmul"].clocks = {}
    t4 = gpu_check.check_targets(stages, "T4")
    assert "a 70 W card cannot hold its boost clock" in t4[1]["why"]
    env = {"device_type": "cuda", "device": "Tesla T4", "catalogue_entry": "T4"}
    report = gpu_check.dry_run_report(env, [], total_s=600, targets=t4)
    assert "| missed: a 70 W card cannot hold its boost clock" in report
    # the sustained figure beside the burst, where the run measured one
    stages["matmul"].rows["sustained_fraction_of_peak"] = [0.01, 0.41]
    assert gpu_check.check_targets(stages, "T4")[1]["row"] == (
        "8192^3, sustained 41% after running back to back")
    # every miss explained, on every card
    for card in ("T4", "H100 SXM", "H100 PCIe", "A100 80GB", None):
        assert all(t["why"] for t in gpu_check.check_targets(stages, card) if t["met"] is False)


def test_each_cards_goals_come_from_its_published_figures():
    goal = {card: {k: v[0] for k, v in gpu_check.card_targets(card).items()}
            for card in ("T4", "H100 PCIe", "H100 SXM", "A100 80GB", "A10G")}
    read, mm, dec = gpu_check.TARGET_STAGES
    # matmuls: 90% of the card's best measured fp16 torch.mm over its dense fp16 peak
    assert goal["T4"][mm] == pytest.approx(0.9 * 41.91 / 65)            # 0.580
    assert goal["H100 PCIe"][mm] == pytest.approx(0.9 * 458.03 / 756)   # 0.545
    assert goal["H100 SXM"][mm] == pytest.approx(0.9 * 760.04 / 989)    # 0.692
    # reads: 90% of a measured copy (gpt-fast's A100 80GB: ~1,700 of 2,039 GB/s), else of 75%
    assert goal["A100 80GB"][read] == pytest.approx(0.9 * 1700 / 2039)  # 0.750
    assert goal["T4"][read] == goal["A10G"][read] == pytest.approx(0.9 * 0.75)
    # no measured matmul for an A10G: 90% of MAMF's low end, 78%
    assert goal["A10G"][mm] == pytest.approx(0.9 * 0.78)
    # decode: gpt-fast read 13.4768e9 B x 104.9 tokens/s = 1.4137e12 B/s of the ~1.7e12 its
    # A100 reached (83.2%), times the card's read goal
    share = 13_476_831_232 * 104.9 / 1700e9
    assert goal["T4"][dec] == pytest.approx(share * 0.9 * 0.75)
    assert goal["A100 80GB"][dec] == pytest.approx(share * 0.9 * 1700 / 2039)
    # every goal sits below the old one-size targets a T4 or an H100 PCIe could not meet
    assert goal["T4"][read] < 0.85 and goal["H100 PCIe"][mm] < 0.75
    basis = gpu_check.card_targets("T4")[mm][1]
    assert "41.91 TFLOP/s fp16 matmul measured on the T4 (64% of its datasheet)" in basis


# --- one kernel failing does not stop the others --------------------------------------------

def test_a_failing_kernel_is_reported_and_the_others_still_run(monkeypatch, capsys):
    import torch

    from gpuinfer.measure import decoding

    def broken(self, x):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(decoding.Int4UnpackWeight, "__call__", broken)
    monkeypatch.setattr(decoding, "kernel_available", lambda k, d=None: True)
    cpu = torch.device("cpu")
    stages = bench_suite.measure_plan(bench_suite.bench_plan(cpu, "tiny"), cpu, progress=False)
    q = stages["quantised"]
    assert set(q.rows["kernel"]) == {"dense", "int8-dequant", "int8-pack"}
    assert list(q.failures) == ["int4-unpack"] and "stream is capturing" in q.failures["int4-unpack"]
    assert "int4-unpack: FAILED (RuntimeError" in capsys.readouterr().out


# --- the dry-run report -------------------------------------------------------------------------

ENV = {"device": "x86_64", "catalogue_entry": "CPU", "device_type": "cpu", "torch": "2.13.0",
       "cuda": "", "date": "2026-12-03"}


def test_the_dry_run_report_lists_every_lab_its_numbers_and_failures():
    labs = [
        {"lab": "01_weight_reads.ipynb", "passed": True, "seconds": 12.34,
         "numbers": [("weight read, largest, cache flushed", 9.87, "GB/s"),
                     ("weight read, fraction of the ceiling", 0.412, "fraction")],
         "failures": []},
        {"lab": "04_quantised_weights.ipynb", "passed": False, "seconds": 3.2,
         "numbers": [("speed-up, int4-unpack", "not reached (NameError: speed)", "x")],
         "failures": ["cell 13: RuntimeError: a | b failed"]},
    ]
    text = gpu_check.dry_run_report(ENV, labs, total_s=15.5, clocks_line="n/a (a CPU)")
    # Included by the instructor notes: no top-level heading of its own
    assert not any(line.startswith("# ") for line in text.splitlines())
    assert text.startswith("## Dry run: CPU run") and gpu_check.CPU_REPORT_NOTE in text
    got = gpu_check.read_report(text)
    assert list(got) == ["01_weight_reads", "04_quantised_weights"]
    assert got["01_weight_reads"]["wall time"] == ("12.3", "s")
    assert got["01_weight_reads"]["weight read, largest, cache flushed"] == ("9.87", "GB/s")
    assert got["04_quantised_weights"]["result"][0] == "FAILED"
    # the pipe inside the error is escaped, so the table keeps three columns
    assert got["04_quantised_weights"]["failure 1"][0] == r"cell 13: RuntimeError: a \| b failed"
    assert "| labs passed | 1 of 2 |" in text


def _tiny_lab(folder):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 2.5"),
                nbformat.v4.new_code_cell("raise ValueError('boom')"),
                nbformat.v4.new_code_cell("y = x * 4")]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "99_tiny.ipynb")
    return folder / "99_tiny.ipynb"


def test_gpu_check_report_on_a_cpu_runs_the_labs_and_writes_the_report(tmp_path, monkeypatch,
                                                                       capsys):
    pytest.importorskip("nbclient")
    import torch

    _tiny_lab(tmp_path / "labs")
    monkeypatch.setattr(gpu_check, "repo_root", lambda: tmp_path)
    monkeypatch.setitem(gpu_check.LAB_KEY_NUMBERS, "99_tiny", [
        ("x", "x", "units"), ("y after the failure", "y", "units"), ("z", "z", "units")])
    report = tmp_path / "workshop" / "dry_run.md"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = cli.main(["gpu-check", "--report", str(report), "--no-progress"])
    finally:
        torch.set_num_threads(threads)
    assert code == 1  # a lab failed
    assert "99_tiny.ipynb: FAILED" in capsys.readouterr().out
    text = report.read_text()
    assert gpu_check.CPU_REPORT_NOTE in text
    lab = gpu_check.read_report(text)["99_tiny"]
    assert float(lab["wall time"][0]) > 0 and lab["result"][0] == "FAILED"
    assert lab["x"] == ("2.5", "units") and lab["y after the failure"] == ("10", "units")
    assert lab["z"][0].startswith("not reached (NameError")
    assert lab["failure 1"][0] == "cell 1: ValueError: boom"


def test_every_lab_has_key_numbers_for_the_report():
    root = gpu_check.repo_root()
    if root is None:
        pytest.skip("not a checkout")
    labs = {p.stem for p in (root / "labs").glob("*.ipynb")}
    assert labs and labs <= set(gpu_check.LAB_KEY_NUMBERS)
    for stem, keys in gpu_check.LAB_KEY_NUMBERS.items():
        labels = [k[0] for k in keys]
        assert len(labels) == len(set(labels)) and all(unit for _, _, unit in keys), stem


# --- gpu-check measures the checkout ---------------------------------------------------------

def _lab_with_a_setup_cell(folder, ran):
    """A lab whose first cell is the course's Colab/Kaggle setup cell (as in every lab), with
    a line that leaves a file behind if the cell runs; the pip line names a file that does
    not exist, so a regression fails at once instead of reaching the network."""
    import nbformat

    setup = ("# Colab (or Kaggle) setup: install this course's package.\n"
             "import os, sys\n"
             "if \"google.colab\" in sys.modules or \"KAGGLE_KERNEL_RUN_TYPE\" in os.environ:\n"
             f"    open({str(ran)!r}, 'w').write('the install cell ran')\n"
             "    %pip install -q --no-index \"gpuinfer @ file:///nonexistent/gpuinfer\"\n")
    probe = ("import os, sys\n"
             "markers = ('google.colab' in sys.modules, 'KAGGLE_KERNEL_RUN_TYPE' in os.environ)\n"
             "seen = float(sum(markers))\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(probe)]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "98_setup.ipynb")
    return folder / "98_setup.ipynb"


def test_run_lab_skips_the_install_cell_where_colab_and_kaggle_markers_are_set(tmp_path,
                                                                              monkeypatch):
    pytest.importorskip("nbclient")
    # Kaggle: the environment variable reaches the kernel. Colab: its kernel launcher
    # imports google.colab; a sitecustomize on the kernel's path does the same here.
    site = tmp_path / "site"
    (site / "google" / "colab").mkdir(parents=True)
    (site / "google" / "colab" / "__init__.py").write_text("")
    (site / "sitecustomize.py").write_text("import google.colab\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    ran = tmp_path / "install-cell-ran"
    lab = _lab_with_a_setup_cell(tmp_path / "labs", ran)
    monkeypatch.setitem(gpu_check.LAB_KEY_NUMBERS, "98_setup", [("markers seen", "seen", "of 2")])
    result = gpu_check.run_lab(lab)
    # Both markers were there for the kernel, so the cell would have installed ...
    assert dict((label, value) for label, value, _ in result["numbers"]) == {"markers seen": 2.0}
    # ... and it did not run: skipped, and said so in the report.
    assert not ran.exists() and result["skipped_setup"] == [0] and result["passed"]
    report = gpu_check.dry_run_report(ENV, [result], total_s=1.0)
    assert gpu_check.read_report(report)["98_setup"]["install cell skipped"][0] == "cell 0"


def test_the_setup_cell_is_recognised_in_every_lab():
    import nbformat

    from gpuinfer.course import release

    root = gpu_check.repo_root()
    if root is None:
        pytest.skip("not a checkout")
    for path in gpu_check.lab_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        assert gpu_check.skip_setup_cells(nb) == [0], path.name
        assert nb.cells[0].source == gpu_check.SKIPPED_SETUP
    # a cell that only mentions Colab, or only pip, is not an install cell
    assert not release.is_setup_cell("import sys\nprint('google.colab' in sys.modules)")
    assert not release.is_setup_cell("%pip install -q tqdm")
    # another package installed on Colab only (lab 11's optional larger model) is not one
    assert not release.is_setup_cell('if "google.colab" in sys.modules:\n'
                                     '    %pip install -q gguf huggingface_hub\n')


def _git_checkout(folder, version="9.8.7"):
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f'[project]\nname = "gpuinfer"\nversion = "{version}"\n')
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "pyproject.toml"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "one"], check=True)
    return subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_report_names_the_version_and_the_commit_it_measured(tmp_path):
    import shutil

    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    sha = _git_checkout(repo)
    prov = gpu_check.provenance(repo)
    assert prov == {"gpuinfer": "9.8.7", "commit": sha, "dirty": False}
    text = gpu_check.dry_run_report(ENV, [], total_s=1.0, prov=prov)
    assert "| gpuinfer version | 9.8.7 |" in text and f"| commit | {sha} |" in text
    (repo / "pyproject.toml").write_text('[project]\nversion = "9.8.8"\n')  # uncommitted
    dirty = gpu_check.dry_run_report(ENV, [], total_s=1.0, prov=gpu_check.provenance(repo))
    assert f"| commit | {sha} plus uncommitted changes" in dirty
    assert "| gpuinfer version | 9.8.8 |" in dirty
    # outside a git checkout: said, not guessed
    (tmp_path / "plain").mkdir()
    assert gpu_check.provenance(tmp_path / "plain")["commit"].startswith("unknown")


def test_gpu_check_never_writes_into_the_shipped_reference_runs(tmp_path):
    env = {"device_type": "cuda", "device": "Tesla T4", "catalogue_entry": "T4"}
    assert gpu_check.run_path(tmp_path, env) == tmp_path / "t4.csv"
    assert gpu_check.out_folder(None) == gpu_check.DEFAULT_OUT_DIR
    for inside in (reference.DIRECTORY, reference.DIRECTORY / "runs"):
        with pytest.raises(ValueError, match="shipped reference runs"):
            gpu_check.run_path(inside, env)
    with pytest.raises(ValueError, match="shipped reference runs"):
        cli.main(["gpu-check", "--out-dir", str(reference.DIRECTORY), "--no-labs"])


def test_a_lab_missing_from_the_checkout_is_skipped_with_a_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "labs").mkdir()
    _tiny_lab(tmp_path / "labs")
    (tmp_path / "labs" / "01_weight_reads.ipynb").write_text("{}")
    found = gpu_check.lab_notebooks(tmp_path)
    # the listed lab that exists, then the unlisted notebook; every other listed lab said
    assert [p.name for p in found] == ["01_weight_reads.ipynb", "99_tiny.ipynb"]
    out = capsys.readouterr().out
    assert "02_matmul_roofline.ipynb: not in this checkout, skipped" in out


#: What a lab binds a measurement with its spread through (lab_verdicts.Spread): a key
#: number reads its `.median`, since float() of a Spread fails ("not reached (TypeError)").
_SPREAD_MAKERS = ("Spread(", "Spread.of(", "Spread.of_timing(", "lab_verdicts.pooled(",
                  "rm.spread_of(", "spread_of(")


def test_each_key_number_reads_a_name_the_lab_binds_and_a_spreads_median():
    """Each key expression's first name is bound by the lab's code, and a name the lab binds
    to a Spread is read as `.median` (lab 1's share and reached, lab 5's cpu_b1 once were
    not, and the dry-run report showed TypeErrors)."""
    import ast
    import json

    root = gpu_check.repo_root()
    if root is None:
        pytest.skip("not a checkout")
    for stem, keys in gpu_check.LAB_KEY_NUMBERS.items():
        path = root / "labs" / f"{stem}.ipynb"
        cells = json.loads(path.read_text())["cells"]
        lines = [line for c in cells if c["cell_type"] == "code"
                 for line in "".join(c["source"]).splitlines()]
        # IPython magics (%pip, !cmd) are no Python: each becomes a `pass` at its indent
        code = "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                         if line.lstrip().startswith(("%", "!")) else line for line in lines)
        bound, spreads = set(), set()
        for node in ast.walk(ast.parse(code)):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AnnAssign, ast.For)) else
                       [i.optional_vars for i in node.items if i.optional_vars]
                       if isinstance(node, ast.With) else [])
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            bound |= names
            value = getattr(node, "value", None)
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and any(m in ast.unparse(value) for m in _SPREAD_MAKERS)):
                spreads.add(node.targets[0].id)
        for label, expr, _ in keys:
            tree = ast.parse(expr, mode="eval")
            used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - {"float", "int"}
            assert used <= bound, f"{stem}, {label!r}: {sorted(used - bound)} not bound by the lab"
            for name in used & spreads:
                assert re.search(rf"\b{name}\.median\b", expr), \
                    f"{stem}, {label!r}: {name} is a Spread; read {name}.median"

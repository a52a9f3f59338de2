"""Releases: the install line for a version, and a notebook's setup cell pinned to it
(on a temporary notebook: the repository's notebooks are pinned at release time)."""

import json
import pathlib
import re

import pytest

from gpuinfer.course import release

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETUP = ("# Colab (or Kaggle) setup: install this course's package from the branch the website is\n"
         "# built from (_config.yml: repository.branch). Nothing else: both already have torch.\n"
         "import os, sys\n"
         "if \"google.colab\" in sys.modules or \"KAGGLE_KERNEL_RUN_TYPE\" in os.environ:\n"
         "    %pip install -q \"gpuinfer[serving] @ git+https://github.com/gpu-inference-course/"
         "gpu-inference-course@main\"")


def test_the_install_line_names_the_repository_and_the_tag():
    url = "https://github.com/gpu-inference-course/gpu-inference-course"
    assert release.tag("0.2.0") == release.tag("v0.2.0") == "v0.2.0"
    assert release.requirement("0.2.0") == f"gpuinfer @ git+{url}@v0.2.0"
    assert release.install_line("0.2.0", "serving") == (
        f'%pip install -q "gpuinfer[serving] @ git+{url}@v0.2.0"')
    assert release.wheel_url("0.2.0") == (
        f"{url}/releases/download/v0.2.0/gpuinfer-0.2.0-py3-none-any.whl")
    for bad in ("0.2", "main", "v1.2.3rc1", ""):
        with pytest.raises(ValueError, match="version"):
            release.tag(bad)
    with pytest.raises(TypeError, match="version"):
        release.tag(0.2)
    with pytest.raises(ValueError, match="extra"):
        release.requirement("0.2.0", "serving; rm -rf")


def test_the_repository_is_the_one_config_names():
    config = (ROOT / "_config.yml").read_text()
    url = re.search(r"^\s+url:\s*(\S+)", config, re.M).group(1)
    assert release.REPOSITORY_URL == url


def test_the_version_is_the_checkouts_pyproject_else_the_installed_one(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "gpuinfer"\n'
                                             'requires-python = ">=3.10"\nversion = "4.5.6"\n')
    assert release.package_version(tmp_path) == "4.5.6"
    import importlib.metadata

    installed = importlib.metadata.version("gpuinfer")
    assert release.package_version(tmp_path / "not-a-checkout") == installed


def _notebook(folder, source):
    cells = [{"cell_type": "code", "id": "c00", "metadata": {"tags": ["remove-cell"]},
              "execution_count": None, "outputs": [], "source": source.splitlines(True)},
             {"cell_type": "markdown", "id": "c01", "metadata": {}, "source": ["# Lab ü\n"]}]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = folder / "lab.ipynb"
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return path


def test_a_notebooks_setup_cell_is_pinned_to_the_release(tmp_path):
    path = _notebook(tmp_path, SETUP)
    assert release.pin_notebook(path, "0.2.0") is True
    nb = json.loads(path.read_text())
    source = "".join(nb["cells"][0]["source"])
    url = "https://github.com/gpu-inference-course/gpu-inference-course"
    assert f'"gpuinfer[serving] @ git+{url}@v0.2.0"' in source and "@main" not in source
    assert "from release v0.2.0" in source and "repository.branch" not in source
    # ids, tags, the other cells and the storage format kept
    assert [c["id"] for c in nb["cells"]] == ["c00", "c01"]
    assert nb["cells"][0]["metadata"] == {"tags": ["remove-cell"]}
    assert "# Lab ü" in path.read_text()  # ensure_ascii=False, as the course stores them
    assert path.read_text() == json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    # pinned again to the same release: nothing changes; to the next: the tag moves
    assert release.pin_notebook(path, "0.2.0") is False
    assert release.pin_notebook(path, "v0.3.1") is True
    assert "@v0.3.1\"" in "".join(json.loads(path.read_text())["cells"][0]["source"])


def test_a_notebook_without_a_setup_cell_is_refused(tmp_path):
    path = _notebook(tmp_path, "print('no install here')\n")
    with pytest.raises(ValueError, match="no Colab/Kaggle setup cell"):
        release.pin_notebook(path, "0.2.0")
    with pytest.raises(FileNotFoundError, match="path"):
        release.pin_notebook(tmp_path / "missing.ipynb", "0.2.0")


def test_lab_8s_two_step_install_is_pinned_in_both_steps():
    nb = json.loads((ROOT / "labs" / "08_triton_dynamic_batching.ipynb").read_text())
    source = "".join(nb["cells"][0]["source"])
    assert release.is_setup_cell(source)
    pinned = release.pin_source(source, "0.2.0")
    url = "https://github.com/gpu-inference-course/gpu-inference-course"
    # the package first, the serving extra second: both from the release, nothing from main
    assert pinned.count(f"@ git+{url}@v0.2.0") == 2 and "@main" not in pinned
    assert f'"gpuinfer @ git+{url}@v0.2.0"' in pinned
    assert f'"gpuinfer[serving] @ git+{url}@v0.2.0"' in pinned
    assert "timeout=240" in pinned and "ignore it" in pinned


def test_the_package_says_the_version_pyproject_releases():
    # A run recorded without a checkout (reference.save's gpuinfer column) names the release.
    import gpuinfer
    assert gpuinfer.__version__ == release.package_version()


def _checkout_copy(tmp_path):
    """A temporary checkout: the repository's notebooks with setup cells, pyproject.toml and
    the package's __init__.py (the repository itself is never rewritten)."""
    import shutil

    for path in release.setup_notebooks(ROOT):
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    (tmp_path / "src" / "gpuinfer").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(ROOT / "src" / "gpuinfer" / "__init__.py", tmp_path / "src/gpuinfer/__init__.py")
    return tmp_path


def _setup_sources(root):
    out = {}
    for path in release.setup_notebooks(root):
        cells = json.loads(path.read_text())["cells"]
        out[path.relative_to(root).as_posix()] = "".join(
            "".join(c["source"]) for c in cells
            if c["cell_type"] == "code" and release.is_setup_cell(c["source"]))
    return out


def test_every_notebook_with_a_setup_cell_is_found_and_installs_main_on_main():
    found = _setup_sources(ROOT)
    # all 11 labs and the three workshop notebooks (the capstone worksheet, key, debrief)
    assert sum(p.startswith("labs/") for p in found) == len(list((ROOT / "labs").glob("*.ipynb")))
    assert {"workshop/capstone_worksheet.ipynb", "workshop/debrief.ipynb",
            "workshop/capstone_key.ipynb"} <= set(found)
    for path, source in found.items():
        assert "@main\"" in source and "@v" not in source, path


def test_release_pins_every_setup_cell_and_main_unpins_them(tmp_path, capsys):
    from gpuinfer import __main__ as cli

    root = _checkout_copy(tmp_path)
    before = _setup_sources(root)
    assert cli.main(["release", "9.9.9", "--root", str(root)]) == 0
    printed = capsys.readouterr().out
    assert "git tag -a v9.9.9" in printed and "git push origin main v9.9.9" in printed
    assert "release main" in printed
    assert 'version = "9.9.9"' in (root / "pyproject.toml").read_text()
    assert '__version__ = "9.9.9"' in (root / "src/gpuinfer/__init__.py").read_text()
    assert release.package_version(root) == "9.9.9"
    pinned = _setup_sources(root)
    assert pinned.keys() == before.keys()
    for path, source in pinned.items():
        assert "@main" not in source and "repository.branch" not in source, path
        assert source.count("@v9.9.9\"") == before[path].count("@main\""), path
        # extras kept: lab 9's [onnx], lab 8's [serving]
        assert re.findall(r"gpuinfer(\[\w+\])? @", source) == re.findall(
            r"gpuinfer(\[\w+\])? @", before[path]), path
    assert "gpuinfer[onnx] @" in pinned["labs/09_compile_fuse_calibrate.ipynb"]
    assert "gpuinfer[serving] @" in pinned["labs/08_triton_dynamic_batching.ipynb"]
    # after the tag, main installs main again: the cells as they were, the version kept
    assert cli.main(["release", "main", "--root", str(root)]) == 0
    assert _setup_sources(root) == before
    assert release.package_version(root) == "9.9.9"


def test_a_fork_pins_its_notebooks_to_a_full_commit(tmp_path, capsys):
    from gpuinfer import __main__ as cli

    root = _checkout_copy(tmp_path)
    sha = "0123456789abcdef0123456789abcdef01234567"  # 40 hex digits
    assert cli.main(["release", sha, "--root", str(root)]) == 0
    assert "git tag" not in capsys.readouterr().out
    assert release.package_version(root) == release.package_version(ROOT)  # version untouched
    for path, source in _setup_sources(root).items():
        assert "@main" not in source and f"@{sha}\"" in source and f"commit {sha}" in source, path


def test_bad_versions_are_refused_with_a_clear_error(tmp_path):
    from gpuinfer import __main__ as cli

    root = _checkout_copy(tmp_path)
    before = _setup_sources(root)
    for bad, says in (("1.2", "MAJOR.MINOR.PATCH"), ("v1.2.3rc1", "MAJOR.MINOR.PATCH"),
                      ("0123abc", "full 40-hex"), ("latest", "MAJOR.MINOR.PATCH")):
        with pytest.raises(SystemExit, match=says):
            cli.main(["release", bad, "--root", str(root)])
    with pytest.raises(SystemExit, match="no notebook with a Colab/Kaggle setup cell"):
        cli.main(["release", "9.9.9", "--root", str(tmp_path / "empty")])
    # nothing was written by a refused release
    assert _setup_sources(root) == before
    assert release.package_version(root) == release.package_version(ROOT)

"""Releases: the version a room is taught from, and the install line pinned to it.

Chapter: none (the workshop kit, `workshop/logistics.md`, and CHANGELOG.md).

A release is the git tag `v<version>` of the repository in `_config.yml`
(`REPOSITORY_URL`), with the package's version in `pyproject.toml` and a wheel attached
(`python -m build`, or `pip wheel . --no-deps`). A notebook's Colab/Kaggle setup cell
installs one ref of that repository: `requirement` and `install_line` spell it for a
version, and `pin_notebook` rewrites a notebook's setup cell to it (extras kept). The
website says which version it was built from (`package_version`)."""

from __future__ import annotations

import json
import pathlib
import re


#: The repository every install cell names: _config.yml's repository.url (a test keeps them
#: equal).
REPOSITORY_URL = "https://github.com/gpu-inference-course/gpu-inference-course"
#: A version as the course spells it: MAJOR.MINOR.PATCH, digits only.
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
#: The requirement inside a setup cell: `gpuinfer[extras] @ git+<url>@<ref>`.
_REQUIREMENT = re.compile(r"gpuinfer(\[[a-z0-9_,-]+\])? @ git\+" + re.escape(REPOSITORY_URL)
                          + r"@[A-Za-z0-9._/-]+")
#: What marks the setup cell: it installs only on Colab or Kaggle.
SETUP_MARKERS = ("google.colab", "KAGGLE_KERNEL_RUN_TYPE")


def _version(value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"version must be a string such as '0.2.0', got {value!r}")
    value = value[1:] if value.startswith("v") else value
    if not _VERSION.match(value):
        raise ValueError(f"version must be MAJOR.MINOR.PATCH such as '0.2.0', got {value!r}")
    return value


def tag(version) -> str:
    """The git tag of a release: 'v0.2.0'."""
    return f"v{_version(version)}"


def requirement(version, extra=None) -> str:
    """The pip requirement that installs release `version` from the repository, with an
    optional extra ('serving', 'onnx'): 'gpuinfer @ git+<url>@v0.2.0'."""
    if extra is not None and not (isinstance(extra, str) and re.fullmatch(r"[a-z0-9_,-]+", extra)):
        raise ValueError(f"extra must be an extra's name such as 'serving', got {extra!r}")
    name = f"gpuinfer[{extra}]" if extra else "gpuinfer"
    return f"{name} @ git+{REPOSITORY_URL}@{tag(version)}"


def install_line(version, extra=None) -> str:
    """The notebook line that installs release `version`: %pip install -q "<requirement>"."""
    return f'%pip install -q "{requirement(version, extra)}"'


def wheel_url(version) -> str:
    """The wheel attached to release `version`: the second install source, for a room
    where cloning from GitHub fails (pip installs a URL or a downloaded file alike)."""
    v = _version(version)
    return f"{REPOSITORY_URL}/releases/download/{tag(v)}/gpuinfer-{v}-py3-none-any.whl"


def package_version(root=None) -> str:
    """The package's version: `pyproject.toml`'s in a checkout (`root`, default the one
    this package runs from), else the installed distribution's."""
    import importlib.metadata

    root = pathlib.Path(__file__).resolve().parents[2] if root is None else pathlib.Path(root)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version("gpuinfer")
    except importlib.metadata.PackageNotFoundError:
        from . import __version__
        return __version__


def is_setup_cell(source) -> bool:
    """Whether a code cell's source is a Colab/Kaggle install cell of this package: it
    names a Colab or Kaggle marker and pip-installs gpuinfer (a cell that installs other
    packages on Colab, such as lab 11's optional larger model, is not one)."""
    text = "".join(source) if isinstance(source, list) else str(source)
    return (any(m in text for m in SETUP_MARKERS)
            and re.search(r"pip\W+install[^\n]*gpuinfer", text) is not None)


def pin_source(source, version) -> str:
    """A setup cell's source with every requirement of the repository pinned to release
    `version` (extras kept) and its comment saying so."""
    text = "".join(source) if isinstance(source, list) else str(source)
    pinned = tag(version)
    text = _REQUIREMENT.sub(lambda m: f"gpuinfer{m.group(1) or ''} @ git+{REPOSITORY_URL}@{pinned}",
                            text)
    return text.replace("from the branch the website is\n# built from (_config.yml: "
                        "repository.branch)",
                        f"from release {pinned}, the\n# release the website was built from")


def pin_notebook(path, version) -> bool:
    """Rewrite the Colab/Kaggle setup cell of the notebook at `path` to install release
    `version` (`pin_source`); the file is written as the course stores notebooks (JSON,
    indent 1, cell ids kept). Returns whether it changed; ValueError if the notebook has
    no setup cell."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no notebook at {path}")
    version = _version(version)
    nb = json.loads(path.read_text())
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"
             and is_setup_cell(c.get("source", ""))]
    if not cells:
        raise ValueError(f"path: {path} has no Colab/Kaggle setup cell to pin")
    changed = False
    for cell in cells:
        old = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        new = pin_source(old, version)
        if new != old:
            cell["source"] = new.splitlines(keepends=True)
            changed = True
    if changed:
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return changed


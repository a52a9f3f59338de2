"""Releases: the version a room is taught from, and the install line pinned to it.

Chapter: none (the workshop kit, `workshop/logistics.md`, and CHANGELOG.md).

A release is the git tag `v<version>` of the repository in `_config.yml`
(`REPOSITORY_URL`), with the package's version in `pyproject.toml` and a wheel attached
(`python -m build`, or `pip wheel . --no-deps`). A notebook's Colab/Kaggle setup cell
installs one ref of that repository: `requirement` and `install_line` spell it for a
version, and `pin_notebook` rewrites a notebook's setup cell to it (extras kept).

`main`'s notebooks install `@main`: the website and its reader's copies are built from main.
A release is cut by `cut` (`python -m gpuinfer release <version>`, `make release`): it sets
the version in `pyproject.toml` and `gpuinfer/__init__.py`, pins every notebook's setup cell
to the tag, and prints the git commands to commit, tag, build the wheel and push; after the
tag, `python -m gpuinfer release main` puts the cells back to `@main`. A room with no tag
pins a fork's notebooks to a full commit (`release <40-hex sha> --notebooks-only`)."""

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
#: A full git commit: what a room with no tag pins to (pip installs `@<sha>` exactly).
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: The folders whose notebooks carry a setup cell (a notebook without one is left alone).
NOTEBOOK_FOLDERS = ("labs", "workshop", "chapters")
#: The setup cell's comment on main, and pinned (`_comment`); lab 8's goes on after it.
_ON_MAIN = "from the branch the website is\n# built from (_config.yml: repository.branch)"
_PINNED = re.compile(r"from (?:release v\d+\.\d+\.\d+|commit [0-9a-f]{40}) \(pinned by\n"
                     r"# python -m gpuinfer release; main's copy installs main\)")


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

    root = pathlib.Path(__file__).resolve().parents[3] if root is None else pathlib.Path(root)
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        if found:
            return found.group(1)
    try:
        return importlib.metadata.version("gpuinfer")
    except importlib.metadata.PackageNotFoundError:
        from gpuinfer import __version__
        return __version__


def is_setup_cell(source) -> bool:
    """Whether a code cell's source is a Colab/Kaggle install cell of this package: it
    names a Colab or Kaggle marker and pip-installs gpuinfer (a cell that installs other
    packages on Colab, such as lab 11's optional larger model, is not one)."""
    text = "".join(source) if isinstance(source, list) else str(source)
    return (any(m in text for m in SETUP_MARKERS)
            and re.search(r"pip\W+install[^\n]*gpuinfer", text) is not None)


def ref(version) -> str:
    """The git ref a setup cell installs for `version`: 'main', a full 40-hex commit as
    given, else the release's tag ('0.3.0' -> 'v0.3.0')."""
    if isinstance(version, str) and (version == "main" or _COMMIT.match(version)):
        return version
    if isinstance(version, str) and re.fullmatch(r"[0-9a-fA-F]{7,39}", version):
        raise ValueError(f"version: a commit must be the full 40-hex SHA, got {version!r}")
    return tag(version)


def _comment(pinned: str) -> str:
    if pinned == "main":
        return _ON_MAIN
    what = f"commit {pinned}" if _COMMIT.match(pinned) else f"release {pinned}"
    return f"from {what} (pinned by\n# python -m gpuinfer release; main's copy installs main)"


def pin_source(source, version) -> str:
    """A setup cell's source with every requirement of the repository pinned to `version`
    (a release such as '0.3.0', 'main', or a full commit; `ref`), extras kept, and its
    comment saying so."""
    text = "".join(source) if isinstance(source, list) else str(source)
    pinned = ref(version)
    text = _REQUIREMENT.sub(lambda m: f"gpuinfer{m.group(1) or ''} @ git+{REPOSITORY_URL}@{pinned}",
                            text)
    text = _PINNED.sub(lambda _m: _comment(pinned), text)
    return text.replace(_ON_MAIN, _comment(pinned))


def pin_notebook(path, version) -> bool:
    """Rewrite the Colab/Kaggle setup cell of the notebook at `path` to install `version`
    (a release, 'main' or a full commit: `pin_source`); the file is written as the course stores notebooks (JSON,
    indent 1, cell ids kept). Returns whether it changed; ValueError if the notebook has
    no setup cell."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path: no notebook at {path}")
    version = ref(version)
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



def setup_notebooks(root) -> list:
    """The notebooks under `root`'s labs/, workshop/ and chapters/ with a Colab/Kaggle setup
    cell (`is_setup_cell`), sorted."""
    root = pathlib.Path(root)
    found = []
    for folder in NOTEBOOK_FOLDERS:
        for path in sorted((root / folder).glob("*.ipynb")):
            cells = json.loads(path.read_text()).get("cells", [])
            if any(c.get("cell_type") == "code" and is_setup_cell(c.get("source", ""))
                   for c in cells):
                found.append(path)
    return found


def set_version(root, version) -> None:
    """Write `version` into `root`'s pyproject.toml and src/gpuinfer/__init__.py."""
    root, version = pathlib.Path(root), _version(version)
    for path, pattern, line in (
            (root / "pyproject.toml", r'^version\s*=\s*"[^"]*"', f'version = "{version}"'),
            (root / "src" / "gpuinfer" / "__init__.py", r'^__version__\s*=\s*"[^"]*"',
             f'__version__ = "{version}"')):
        if not path.is_file():
            raise FileNotFoundError(f"root: no {path.relative_to(root)} under {root}")
        text, n = re.subn(pattern, line, path.read_text(), count=1, flags=re.M)
        if n != 1:
            raise ValueError(f"root: {path} has no version line to set")
        path.write_text(text)


def cut(root, version, notebooks_only=False) -> list:
    """Cut a release in the checkout at `root`: set the version (unless `notebooks_only`,
    or `version` is 'main' or a commit) and pin every setup notebook to it. Returns the
    commands to run next (commit, tag, wheel, push; or, for 'main', the commit after the
    tag), which the CLI prints; nothing is committed here."""
    root = pathlib.Path(root)
    pinned = ref(version)
    release_ = pinned.startswith("v")
    notebooks = setup_notebooks(root)
    if not notebooks:
        raise ValueError(f"root: no notebook with a Colab/Kaggle setup cell under {root}")
    if release_ and not notebooks_only:
        set_version(root, version)
    changed = [p for p in notebooks if pin_notebook(p, pinned)]
    paths = " ".join(str(p.relative_to(root)) for p in notebooks)
    if pinned == "main":
        return [f"git commit -m 'Notebooks install @main again after the release' -- {paths}",
                "git push origin main"]
    if not release_ or notebooks_only:
        return [f"git commit -m 'Pin the setup cells to {pinned}' -- {paths}",
                "git push   # to your fork; hand out its blob/<this commit>/ Colab addresses"]
    files = f"pyproject.toml src/gpuinfer/__init__.py CHANGELOG.md {paths}"
    return [f"# {len(changed)} of {len(notebooks)} notebooks pinned to {pinned}; "
            f"CHANGELOG.md should have a {_version(version)} entry",
            f"git commit -m 'Release {_version(version)}' -- {files}",
            f"git tag -a {pinned} -m 'Release {_version(version)}'",
            "python -m pip wheel . --no-deps -w dist/   # or: python -m build",
            f"git push origin main {pinned}",
            f"# attach dist/gpuinfer-{_version(version)}-py3-none-any.whl to the GitHub "
            f"release {pinned} ({wheel_url(version)})",
            "python -m gpuinfer release main   # then commit and push: main installs @main again"]

"""What the site tests share: the pages `_toc.yml` lists, the repository URLs `_config.yml`
holds, and an offline checker of the links and anchors in the built HTML."""

from __future__ import annotations

import html.parser
import pathlib
import posixpath
import re
import urllib.parse

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def config(root=ROOT) -> dict:
    return yaml.safe_load((pathlib.Path(root) / "_config.yml").read_text())


def toc_pages(root=ROOT) -> list[str]:
    """Every page of `_toc.yml`, in reading order (the order of the book's "next" links)."""
    toc = yaml.safe_load((pathlib.Path(root) / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if "file" in node:
                pages.append(str(node["file"]).removesuffix(".md").removesuffix(".ipynb"))
            for key in ("parts", "chapters", "sections"):
                walk(node.get(key, []))

    walk(toc.get("parts", []))
    walk(toc.get("chapters", []))
    return pages


def notebook_pages(root=ROOT) -> list[str]:
    """The toc pages stored as .ipynb (the ones with an "open in Colab" button)."""
    return [p for p in toc_pages(root) if (pathlib.Path(root) / f"{p}.ipynb").exists()]


def repository(root=ROOT) -> dict:
    """owner, name, branch, url and the book's path inside the repository, from `_config.yml`."""
    repo = config(root)["repository"]
    url = repo["url"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    if not match:
        raise ValueError(f"_config.yml repository.url must be https://github.com/OWNER/NAME, got {url!r}")
    path = (repo.get("path_to_book") or "").strip("/")
    return {"url": url, "owner": match[1], "name": match[2], "branch": repo.get("branch", "main"),
            "path_to_book": f"{path}/" if path else ""}


def reader_branch(root=ROOT) -> str:
    """The branch the built pages' Colab buttons open (the reader's copies that
    .github/workflows/pages.yml publishes), or '' when the buttons open the source."""
    return (config(root).get("sphinx", {}).get("config", {}) or {}).get("gpuinfer_reader_branch", "")


def release_ref(ref) -> bool:
    """Whether `ref` names a release: a tag vMAJOR.MINOR.PATCH, or the `v<version>`
    placeholder the workshop kit writes for the release a room is pinned to."""
    return ref == "v<version>" or re.fullmatch(r"v\d+\.\d+\.\d+", ref) is not None


def colab_url(page, root=ROOT, ref=None) -> str:
    """The Colab address of a notebook page at `ref`: by default the file a built page's
    button opens, its reader's copy on the reader branch (the source on repository.branch
    when no reader branch is configured)."""
    r = repository(root)
    ref = ref or reader_branch(root) or r["branch"]
    return (f"https://colab.research.google.com/github/{r['owner']}/{r['name']}/blob/"
            f"{ref}/{r['path_to_book']}{page}.ipynb")


def pages_url(root=ROOT) -> str:
    """Where GitHub Pages publishes the site of the configured repository."""
    r = repository(root)
    return f"https://{r['owner'].lower()}.github.io/{r['name']}/"


# --- the offline link checker -----------------------------------------------------------

_LINK_ATTRS = {"a": "href", "link": "href", "img": "src", "script": "src", "iframe": "src",
               "source": "src", "video": "src", "audio": "src"}
_EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|//)", re.I)


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        attr = _LINK_ATTRS.get(tag)
        if attr and attrs.get(attr):
            self.links.append((tag, attrs[attr].strip()))
        if tag == "img" and attrs.get("srcset"):
            for part in attrs["srcset"].split(","):
                if part.strip():
                    self.links.append((tag, part.split()[0]))


def _parse(path: pathlib.Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def broken_links(site) -> list[str]:
    """Every internal link or anchor in the built HTML under `site` that leads nowhere:
    a missing file, a path outside the site, or a `#fragment` with no such id in the
    target page. External links (http:, mailto:, ...) are not fetched. Returns one line
    per problem; an empty list means the site's links are whole."""
    site = pathlib.Path(site).resolve()
    if not (site / "index.html").exists():
        raise FileNotFoundError(f"no built site at {site} (index.html missing): run `make book`")
    html_files = sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)
    parsed = {p: _parse(p) for p in html_files}
    problems = []
    for path, page in parsed.items():
        here = path.relative_to(site).as_posix()
        for tag, url in page.links:
            if not url or _EXTERNAL.match(url):
                continue
            parts = urllib.parse.urlsplit(url)
            target_rel = urllib.parse.unquote(parts.path)
            fragment = urllib.parse.unquote(parts.fragment)
            if target_rel:
                joined = posixpath.normpath(posixpath.join(posixpath.dirname(here), target_rel))
                if joined.startswith("../") or joined == "..":
                    problems.append(f"{here}: <{tag}> {url} points outside the site")
                    continue
                target = site / joined
                if target.is_dir():
                    target = target / "index.html"
            else:
                target = path
            if not target.is_file():
                problems.append(f"{here}: <{tag}> {url} -> missing file {target.relative_to(site).as_posix()}")
                continue
            if fragment and target.suffix == ".html":
                ids = (parsed.get(target) or _parse(target)).ids
                if fragment not in ids:
                    problems.append(f"{here}: <{tag}> {url} -> no id {fragment!r} in "
                                    f"{target.relative_to(site).as_posix()}")
    return problems

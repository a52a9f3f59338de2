"""Internal links and anchors of the built HTML, checked offline. The book's strict build
already fails on a broken cross-reference; this reads what the build wrote, so a raw
HTML link, a theme link or a missing image is caught too."""

import pathlib

import pytest

import sitecheck


def _site(tmp_path, pages: dict) -> pathlib.Path:
    for name, body in pages.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"<!doctype html><html><body>{body}</body></html>")
    return tmp_path


def test_checker_passes_a_whole_site(tmp_path):
    site = _site(tmp_path, {
        "index.html": '<a href="chapters/one.html#fit">one</a> <a href="https://example.org/x#y">out</a>'
                      ' <a href="#top" id="top">top</a> <img src="_images/a.png"> <a href="mailto:a@b">m</a>',
        "chapters/one.html": '<h2 id="fit">Fit</h2><a href="../index.html">home</a>'
                             ' <link href="../_static/x.css?v=1">',
        "_images/a.png": "", "_static/x.css": ""})
    assert sitecheck.broken_links(site) == []


@pytest.mark.parametrize("body, problem", [
    ('<a href="missing.html">x</a>', "missing file missing.html"),
    ('<a href="index.html#nowhere">x</a>', "no id 'nowhere'"),
    ('<a href="#nowhere">x</a>', "no id 'nowhere'"),
    ('<img src="_images/gone.png">', "missing file _images/gone.png"),
    ('<script src="_static/gone.js"></script>', "missing file _static/gone.js"),
    ('<a href="../../etc/passwd">x</a>', "outside the site"),
])
def test_checker_finds_each_kind_of_broken_link(tmp_path, body, problem):
    site = _site(tmp_path, {"index.html": body})
    problems = sitecheck.broken_links(site)
    assert len(problems) == 1 and problem in problems[0], problems


def test_checker_refuses_a_folder_without_a_site(tmp_path):
    with pytest.raises(FileNotFoundError, match="make book"):
        sitecheck.broken_links(tmp_path)


@pytest.mark.site
def test_built_site_has_no_broken_internal_links(site_dir):
    problems = sitecheck.broken_links(site_dir)
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems[:50])


@pytest.mark.site
def test_every_toc_page_was_built(site_dir):
    missing = [p for p in sitecheck.toc_pages() if not (site_dir / f"{p}.html").exists()]
    assert not missing, f"pages in _toc.yml with no HTML: {missing}"

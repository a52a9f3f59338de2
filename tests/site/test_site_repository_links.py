"""The repository URL lives in one place, `_config.yml`. The README's badges and Colab
links, the publishing workflow, and the launch buttons of the built pages must all agree
with it (the Colab setup cells are checked in tests/test_notebooks.py)."""

import re

import pytest
import yaml

import sitecheck

ROOT = sitecheck.ROOT
# A URL, with the workshop kit's `v<version>` placeholder kept inside it.
_URL = r"https?://[^\s)\]<>\"'`]+(?:<version>[^\s)\]<>\"'`]*)?"
README = (ROOT / "README.md").read_text()
URLS = re.findall(_URL, README)
# Pages without code that name the repository too (install lines, links).
PROSE = sorted([ROOT / "README.md", ROOT / "intro.md", *ROOT.glob("workshop/*.md"),
                *ROOT.glob("appendix/*.md")])
PROSE_URLS = sorted({u for p in PROSE for u in re.findall(_URL, p.read_text())})




def test_config_names_a_github_repository():
    r = sitecheck.repository()
    assert r["url"] == f"https://github.com/{r['owner']}/{r['name']}"
    assert r["branch"]


def test_readme_has_the_badges():
    assert sitecheck.pages_url() in URLS, "a link to the published website"
    workflow = f"{sitecheck.repository()['url']}/actions/workflows/pages.yml"
    assert f"{workflow}/badge.svg" in URLS and workflow in URLS, "the website build badge"
    assert any(u.startswith("https://colab.research.google.com/github/") for u in URLS), \
        "an open-in-Colab badge"


@pytest.mark.parametrize("url", PROSE_URLS)
def test_every_repository_url_agrees_with_config(url):
    r = sitecheck.repository()
    # The refs a page may name: the source branch, the reader's copies, or a release
    # (a tag, or the workshop kit's `v<version>` placeholder for the room's release).
    def known(ref):
        return ref in (r["branch"], sitecheck.reader_branch()) or sitecheck.release_ref(ref)
    pinned = re.fullmatch(r"(https://github\.com/[^/]+/[^/@]+)@(.+)", url)
    if pinned:  # a pinned pip install
        assert pinned[1] == r["url"] and known(pinned[2]), f"{url}: not {r['url']} at a known ref"
    elif "colab.research.google.com/github/" in url:
        match = re.fullmatch(r"https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/([^/]+)/(.*)", url)
        assert match, f"{url} is not a Colab link to a file on a branch"
        assert known(match[1]), f"{url}: {match[1]} is neither a branch nor a release"
        if not match[2].endswith(".ipynb"):   # a folder of notebooks, e.g. labs/
            assert (ROOT / match[2]).is_dir(), f"{url}: no folder {match[2]} here"
        else:
            page = match[2].removeprefix(r["path_to_book"]).removesuffix(".ipynb")
            assert url == sitecheck.colab_url(page, ref=match[1]), f"{url} disagrees with _config.yml"
            assert page in sitecheck.notebook_pages(), f"{page}.ipynb is not a notebook in _toc.yml"
    elif re.match(r"https://github\.com/", url):
        assert url == r["url"] or url.startswith(r["url"] + "/"), f"{url} is not {r['url']}"
        workflow = re.search(r"/actions/workflows/([^/]+\.ya?ml)", url)
        if workflow:
            assert (ROOT / ".github" / "workflows" / workflow[1]).exists(), url
    elif ".github.io" in url:
        assert url == sitecheck.pages_url(), f"{url} is not where Pages publishes {r['url']}"


def test_pages_workflow_builds_with_make_book():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = [s for job in workflow["jobs"].values() for s in job.get("steps", [])]
    runs = " ".join(s.get("run", "") for s in steps)
    assert ".ci/run book" in runs, "the site is built by .ci/run book, i.e. `make book`"
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert 'make "$TARGET"' in ci_run and "TARGET=${1:-test}" in ci_run
    uploads = [s for s in steps if "upload-pages-artifact" in s.get("uses", "")]
    assert uploads and uploads[0]["with"]["path"] == "_build/html"


@pytest.mark.site
@pytest.mark.parametrize("page", sitecheck.notebook_pages())
def test_notebook_page_launches_itself_on_colab(site_dir, page):
    html = (site_dir / f"{page}.html").read_text()
    colab = set(re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html))
    assert colab == {sitecheck.colab_url(page)}, f"{page}: Colab links {colab}"
    assert f'href="{sitecheck.repository()["url"]}"' in html, "repository button"


@pytest.mark.site
@pytest.mark.parametrize("page", [p for p in sitecheck.toc_pages() if p not in sitecheck.notebook_pages()])
def test_text_page_has_no_colab_button(site_dir, page):
    """Colab opens .ipynb files only: a Markdown page (even one executed at build time)
    must not offer a launch button that leads nowhere."""
    html = (site_dir / f"{page}.html").read_text()
    # A launch button is a link; prose may still show an address (the workshop's
    # logistics page spells the release's Colab address in a code span).
    assert not re.search(r'href="https://colab\.research\.google\.com/', html), page


@pytest.mark.site
def test_there_are_notebook_pages_to_launch():
    assert sitecheck.notebook_pages(), "no .ipynb page in _toc.yml"

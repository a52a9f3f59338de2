"""Fixtures of the site tests: the built site served on 127.0.0.1, and a headless
Chromium driven by Playwright: Debian's (CI installs it), or where there is none the
browser `playwright install chromium` fetched (the Makefile tries that, and stops with one
instruction when it cannot).

GPUINFER_SITE       the built site to test (default: _build/html)
CHROMIUM            the browser (default: /usr/bin/chromium; Debian's `chromium` package)
GPUINFER_SCREENSHOTS  where screenshots go (default: _build/screenshots)
"""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import shutil
import socketserver
import tempfile
import threading
import urllib.parse

import pytest

import sitecheck

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]


@pytest.fixture(scope="session")
def site_dir() -> pathlib.Path:
    site = pathlib.Path(os.environ.get("GPUINFER_SITE", sitecheck.ROOT / "_build" / "html"))
    if not (site / "index.html").exists():
        pytest.fail(f"no built site at {site}: run `make book` first (make test does)")
    return site


@pytest.fixture(scope="session")
def screenshot_dir() -> pathlib.Path:
    out = pathlib.Path(os.environ.get("GPUINFER_SCREENSHOTS", sitecheck.ROOT / "_build" / "screenshots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@pytest.fixture(scope="session")
def base_url(site_dir):
    """The site served by Python's http.server on a free port of 127.0.0.1."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser_context():
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    if not (os.path.exists(chromium) or shutil.which(chromium)):
        pytest.fail(f"no browser at {chromium}: install Debian's chromium "
                    "(`apt-get install chromium`, as .ci/run does) or set CHROMIUM")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="gpuinfer-chromium-")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile, executable_path=shutil.which(chromium) or chromium, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(20_000)
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


class Browser:
    """A page that records JavaScript errors and refuses to leave 127.0.0.1."""

    def __init__(self, context, base_url):
        self.base_url = base_url
        self.page = context.new_page()
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on("console", self._console)
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.base_url) or url.startswith("data:") or url.startswith("blob:"):
            route.continue_()
        else:  # the test is offline, and so must the site work
            self.blocked.append(url)
            route.abort()

    # console.error messages of the theme that are not errors of the site: a fresh browser
    # profile has no stored light/dark choice, and pydata-sphinx-theme says so as an error.
    BENIGN = ("Got invalid theme mode",)

    def _console(self, message):
        if message.type != "error" or message.text.startswith(self.BENIGN):
            return
        where = (message.location or {}).get("url", "")
        if where and not where.startswith(self.base_url):
            return  # a request we blocked on purpose
        self.errors.append(f"console: {message.text} ({where})")

    def goto(self, page_name: str, query: str = ""):
        url = urllib.parse.urljoin(self.base_url, f"{page_name}.html") + query
        response = self.page.goto(url, wait_until="load")
        assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
        return response

    def close(self):
        self.page.close()


@pytest.fixture
def browser(browser_context, base_url):
    b = Browser(browser_context, base_url)
    yield b
    b.close()

"""The built website in a real browser (headless Debian Chromium, driven by Playwright):
every page of `_toc.yml` renders with its figures, math and copy buttons, raises no
JavaScript error, links to the next page in reading order, and fits a phone's screen;
search finds a chapter; the calculator agrees with gpuinfer. Screenshots land in
_build/screenshots/ for a person to look at."""

from __future__ import annotations

import math
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

import sitecheck
from gpuinfer import hardware
from gpuinfer.predict import llm, roofline
from gpuinfer.predict import step_model

pytestmark = pytest.mark.site

PAGES = sitecheck.toc_pages()
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}

# What the page's own JavaScript sees: each image in the article, and any element of the
# article wider than the screen that no scrolling box contains (the theme's drawers sit
# off-screen on purpose; the page's own scroll width catches everything else).
_IMAGES_JS = """els => els.map(e => ({src: e.getAttribute('src') || '', alt: (e.getAttribute('alt') || '').trim(),
  complete: e.complete, natural: [e.naturalWidth, e.naturalHeight],
  shown: e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden',
  box: [e.getBoundingClientRect().width, e.getBoundingClientRect().height]}))"""
_OVERFLOW_JS = """() => {
  const limit = document.documentElement.clientWidth + 1;
  const scrolls = el => { for (let p = el.parentElement; p; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return true; }
    return false; };
  const wide = [...document.querySelectorAll('article *')].filter(el => {
      const r = el.getBoundingClientRect(); return r.width > 0 && r.right > limit && !scrolls(el); });
  return {page: document.documentElement.scrollWidth, screen: document.documentElement.clientWidth,
          wide: wide.slice(0, 5).map(el => el.tagName.toLowerCase() + '.' + [...el.classList].join('.'))};
}"""
_MATH_DONE_JS = """() => { const m = document.querySelectorAll('article .math');
  return m.length > 0 && [...m].every(el => el.querySelector('mjx-container')); }"""


def _docname(href: str, base_url: str) -> str:
    return href.removeprefix(base_url).split("#")[0].split("?")[0].removesuffix(".html")


def _meaningful_alt(image: dict) -> bool:
    """Alt text a screen reader can use: not empty, and not just the file's name."""
    alt, src = image["alt"], image["src"]
    if not alt or alt == src or alt.endswith(src.rsplit("/", 1)[-1]):
        return False
    return not re.fullmatch(r"[\w./-]+\.(png|jpe?g|svg|gif|webp)", alt, re.I)


@pytest.mark.parametrize("name", PAGES)
def test_page_renders_in_the_browser(browser, name):
    """Everything a reader meets on one page; every problem is listed, not just the first."""
    browser.goto(name)
    page = browser.page
    problems = []
    if not page.locator("article h1").first.inner_text().strip():
        problems.append("no title")

    for img in page.eval_on_selector_all("article img", _IMAGES_JS):
        if not (img["complete"] and min(img["natural"]) > 0):
            problems.append(f"image did not load: {img['src']}")
        elif img["shown"] and not min(img["box"]) > 0:
            problems.append(f"image has no size on the page: {img['src']}")
        if not _meaningful_alt(img):
            problems.append(f"image {img['src']} has no alt text (it reads {img['alt']!r}); in a "
                            'notebook, give its cell the metadata {"mystnb": {"image": {"alt": "..."}}}')

    if page.locator("article .math").count():
        try:
            page.wait_for_function(_MATH_DONE_JS, timeout=20_000)
        except PlaywrightTimeout:
            problems.append("math was not rendered by MathJax")
        if page.locator("article mjx-merror").count():
            problems.append("MathJax reports an error in a formula")

    code_blocks = page.locator("article div.highlight").count()
    if code_blocks:
        try:
            page.wait_for_function("n => document.querySelectorAll("
                                   "'article div.highlight button.copybtn').length >= n",
                                   arg=code_blocks, timeout=10_000)
        except PlaywrightTimeout:
            problems.append(f"{code_blocks} code blocks but not as many copy buttons")

    # Reading order: "next" leads to the following page of _toc.yml.
    i = PAGES.index(name)
    nxt = page.locator("a.right-next")
    if i + 1 < len(PAGES):
        href = nxt.evaluate("a => a.href") if nxt.count() else None
        if href is None or _docname(href, browser.base_url) != PAGES[i + 1]:
            problems.append(f"'next' leads to {href}, not {PAGES[i + 1]}")
    elif nxt.count():
        problems.append("the last page has a 'next' link")

    # No horizontal scroll on a 1280 px window, nor on a phone.
    layout = page.evaluate(_OVERFLOW_JS)
    if layout["page"] > layout["screen"] + 1 or layout["wide"]:
        problems.append(f"wider than a {DESKTOP['width']} px window: page {layout['page']} px, "
                        f"overflowing elements {layout['wide']}")
    page.set_viewport_size(PHONE)
    try:
        layout = page.evaluate(_OVERFLOW_JS)
    finally:
        page.set_viewport_size(DESKTOP)
    if layout["page"] > layout["screen"] + 1 or layout["wide"]:
        problems.append(f"wider than a {PHONE['width']} px phone: page {layout['page']} px, "
                        f"overflowing elements {layout['wide']}")
    problems += [f"JavaScript error: {e}" for e in browser.errors]
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


def test_sidebar_navigation_reaches_every_page(browser):
    """Start at the home page and follow the sidebar's links until nothing new appears."""
    found, queue = {PAGES[0]}, [PAGES[0]]
    while queue and not set(PAGES) <= found:
        browser.goto(queue.pop(0))
        hrefs = browser.page.eval_on_selector_all(
            ".bd-sidebar-primary a.reference.internal", "els => els.map(a => a.href)")
        for name in (_docname(h, browser.base_url) for h in hrefs):
            if name not in found:
                found.add(name)
                queue.append(name)
    missing = [p for p in PAGES if p not in found]
    assert not missing, f"pages the navigation never reaches: {missing}"
    assert not browser.errors, browser.errors


def test_site_root_opens_the_home_page(browser):
    browser.page.goto(browser.base_url)
    browser.page.wait_for_url(f"**/{PAGES[0]}.html")
    assert browser.page.locator("article h1").first.inner_text().strip()


def test_phone_reader_can_open_the_navigation(browser, screenshot_dir):
    """At phone width the sidebar hides behind a button; pressing it shows every page."""
    browser.page.set_viewport_size(PHONE)
    browser.goto(PAGES[0])
    # pydata-sphinx-theme moves the sidebar into a <dialog> at narrow widths.
    nav = "#pst-primary-sidebar-modal a.reference.internal"
    assert not browser.page.locator(nav).first.is_visible()
    browser.page.locator("button.primary-toggle:visible").first.click()
    browser.page.locator(nav).first.wait_for(state="visible")
    browser.page.wait_for_timeout(300)
    browser.page.screenshot(path=str(screenshot_dir / "phone_navigation.png"))
    # Sections fold under their chapter (a click away): count every link the dialog holds.
    hrefs = browser.page.locator(nav).evaluate_all("els => els.map(a => a.href)")
    assert {_docname(h, browser.base_url) for h in hrefs} >= set(PAGES[1:])
    assert not browser.errors, browser.errors


def test_search_finds_a_chapter(browser):
    chapter = next(p for p in PAGES if p.startswith("chapters/"))
    browser.goto(chapter)
    title = browser.page.locator("article h1").first.inner_text()
    word = max(re.findall(r"[A-Za-z]{4,}", title), key=len).lower()
    browser.goto("search", f"?q={word}")
    # Sphinx's searchtools adds results one at a time (5 ms apart) and writes the summary
    # line only when the last one is in: wait for the summary, not for the first result.
    browser.page.wait_for_function(
        "(document.querySelector('#search-results p.search-summary')?.innerText || '').length > 0",
        timeout=30_000)
    summary = browser.page.locator("#search-results p.search-summary").inner_text()
    assert "found" in summary, summary
    hits = browser.page.eval_on_selector_all("#search-results ul.search li a", "els => els.map(a => a.href)")
    assert any(_docname(h, browser.base_url) == chapter for h in hits), (word, hits[:10])
    assert not browser.errors, browser.errors


def test_some_page_has_rendered_math_and_copy_buttons(browser):
    """The per-page checks above only bite where a page has math or code: make sure one does."""
    browser.goto("appendix/calculator")
    browser.page.wait_for_function(_MATH_DONE_JS, timeout=20_000)
    assert browser.page.locator("article mjx-container").count() >= 3
    browser.page.wait_for_selector("article div.highlight button.copybtn", state="attached")


def test_screenshots(browser, screenshot_dir):
    """Home, a chapter, a lab, the calculator; then home, a chapter and the calculator at
    phone width. A person looks at these (the report says what they showed)."""
    shots = [PAGES[0], next(p for p in PAGES if p.startswith("chapters/")),
             next((p for p in PAGES if p.startswith("labs/")), None), "appendix/calculator"]
    for name in filter(None, shots):
        browser.goto(name)
        browser.page.wait_for_timeout(500)
        browser.page.screenshot(path=str(screenshot_dir / f"{name.replace('/', '_')}.png"))
    browser.page.set_viewport_size(PHONE)
    for name in (shots[0], shots[1], shots[3]):
        browser.goto(name)
        browser.page.wait_for_timeout(500)
        browser.page.screenshot(path=str(screenshot_dir / f"phone_{name.replace('/', '_')}.png"),
                                full_page=False)
    assert len(list(screenshot_dir.glob("*.png"))) >= 6
    assert not browser.errors, browser.errors


# --- the calculator agrees with gpuinfer ---------------------------------------------------

CASES = [  # accelerator, model, dtype, batch, context
    ("T4", "llama-2-7b", "fp16", 1, 1024),
    ("A100 80GB", "llama-3-8b", "int4", 64, 4096),
    ("H100 SXM", "llama-2-70b", "fp8_e4m3", 8, 2048),
    ("H200", "mistral-7b", "int8", 256, 512),
    ("T4", "llama-2-13b", "fp16", 1, 1024),
    ("EPYC 9654", "llama-3-8b", "fp32", 4, 8192),
]


def _expected(acc, model, dtype, batch, context):
    """What the package says. The verdict is the weight matmuls' (`linear` row) bound;
    quantised formats are weight-only, so the peak that matters is fp16's."""
    a = hardware.get(acc)
    table = llm.decode_step_breakdown(model, acc, batch=batch, context=context, dtype=dtype)
    return {
        "weight-read-ceiling": batch * a.bandwidth / step_model.step_weight_bytes(model, dtype),
        "decode-ceiling": llm.decode_ceiling(model, acc, batch=batch, context=context, dtype=dtype),
        "verdict": float(table.loc["linear", "bound"] == "compute"),
        "compute-bound-batch": llm.compute_bound_batch(model, acc, dtype=dtype),
        "max-batch": float(llm.max_batch(model, acc, context=context, dtype=dtype)),
    }


def _first_number(text: str) -> float:
    match = re.search(r"\d[\d,]*(\.\d+)?", text)
    assert match, text
    return float(match[0].replace(",", ""))


def _set_inputs(page, acc, model, dtype, batch, context):
    page.select_option("#gpuinfer-calculator select[name=accelerator]", acc)
    page.select_option("#gpuinfer-calculator select[name=model]", model)
    page.select_option("#gpuinfer-calculator select[name=dtype]", dtype)
    page.fill("#gpuinfer-calculator input[name=batch]", str(batch))
    page.fill("#gpuinfer-calculator input[name=context]", str(context))


def test_calculator_agrees_with_gpuinfer(browser):
    browser.goto("appendix/calculator")
    page = browser.page
    page.wait_for_selector("#gpuinfer-calculator[data-ready=true]", state="attached")
    for case in CASES:
        _set_inputs(page, *case)
        for role, want in _expected(*case).items():
            el = page.locator(f"#gpuinfer-calculator [data-role={role}]")
            got, text = el.get_attribute("data-value"), el.inner_text()
            if role == "verdict":
                assert float(got) == want and text == ("compute-bound" if want else "memory-bound"), (case, text)
            elif math.isinf(want):
                assert got == "inf" and "never" in text, (case, role, text)
            else:
                assert float(got) == pytest.approx(want, rel=1e-9), (case, role, got, want)
                shown = _first_number(text)  # what the reader sees: three significant digits
                assert abs(shown - want) <= 0.005 * abs(want) + 1e-12, (case, role, text, want)
        assert page.locator("#gpuinfer-calculator [data-role=error]").is_hidden()
        # The split of the step's time: one row per operation, each with its bound.
        table = llm.decode_step_breakdown(case[1], case[0], batch=case[3], context=case[4], dtype=case[2])
        for op in step_model.OPERATIONS:
            row = page.locator(f"#gpuinfer-calculator [data-role=ops] tr[data-op={op}]")
            assert float(row.get_attribute("data-value")) == pytest.approx(table.loc[op, "seconds"], rel=1e-9)
            assert row.get_attribute("data-bound") == table.loc[op, "bound"], (case, op)
        # The chart marks the same decode ceiling, and draws the curve it sits on.
        point = page.locator("#gpuinfer-calculator [data-role=chart-point]")
        assert float(point.get_attribute("data-value")) == pytest.approx(_expected(*case)["decode-ceiling"], rel=1e-9)
        assert page.locator("#gpuinfer-calculator svg path").count() >= 1
        assert "tokens per second against batch size" in page.locator("#gpuinfer-calculator svg").get_attribute("aria-label")
    assert not browser.errors, browser.errors


def test_calculator_explains_a_missing_peak(browser):
    """A T4 has no bf16 peak in the catalogue: the package refuses (never a made-up
    number), and the page says why."""
    with pytest.raises(roofline.MissingPeak, match="no bf16 peak"):
        llm.decode_ceiling("llama-2-7b", "T4", dtype="bf16")
    browser.goto("appendix/calculator")
    page = browser.page
    page.wait_for_selector("#gpuinfer-calculator[data-ready=true]", state="attached")
    _set_inputs(page, "T4", "llama-2-7b", "bf16", 1, 1024)
    error = page.locator("#gpuinfer-calculator [data-role=error]")
    assert error.is_visible() and "no bf16 peak" in error.inner_text()
    assert page.locator("#gpuinfer-calculator [data-role=results]").is_hidden()
    _set_inputs(page, "T4", "llama-2-7b", "fp16", 0, 1024)
    assert "batch must be a positive whole number" in error.inner_text()
    assert not browser.errors, browser.errors


def test_calculator_reads_its_inputs_from_the_address(browser):
    browser.goto("appendix/calculator", "#accelerator=H200&model=llama-3-70b&dtype=int4&batch=32&context=8192")
    page = browser.page
    page.wait_for_selector("#gpuinfer-calculator[data-ready=true]", state="attached")
    want = llm.decode_ceiling("llama-3-70b", "H200", batch=32, context=8192, dtype="int4")
    got = float(page.locator("[data-role=decode-ceiling]").get_attribute("data-value"))
    assert got == pytest.approx(want, rel=1e-9)
    # A link to another case on the same page changes only the address's fragment.
    page.evaluate("location.hash = 'accelerator=L4&model=mistral-7b&dtype=int8&batch=4&context=512'")
    want = llm.decode_ceiling("mistral-7b", "L4", batch=4, context=512, dtype="int8")
    page.wait_for_function(
        "w => Math.abs(Number(document.querySelector('[data-role=decode-ceiling]').dataset.value) / w - 1) < 1e-9",
        arg=want)
    assert page.locator("select[name=accelerator]").input_value() == "L4"
    assert not browser.errors, browser.errors

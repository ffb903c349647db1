"""The documentation site as a reader sees it: built, served, rendered in headless chromium.

The module builds the site once (``mkdocs build --strict`` into a temporary folder),
serves it on a loopback port of its own and opens five pages in one browser, offline:
every request that is not for the loopback server is blocked and recorded, and none may
be attempted (mermaid, the fonts and the search run from the site itself). It checks

* the mermaid diagram of the local-first page became an SVG;
* no element's text runs out of its box: an element that is not a scroll container is
  never wider inside than outside (code blocks and tables scroll, prose wraps), on a
  desktop's width and, for the configuration reference, a tablet's;
* the configuration reference's settings names are whole on one line or break only
  between their parts (after ``__`` or ``.``), never inside a word;
* the search finds a page.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser import LAUNCH_ARGS, chromium_path

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    "getting-started/",
    "configuration/",
    "messaging/local-first/",  # the mermaid diagram
    "transports/spi/",  # long code lines
    "reference/api/",  # mkdocstrings signatures
]
DEADLINE = 15.0

# Elements of the article whose content is wider than their box although they do not
# scroll: text that runs out of its box, or is cut. Inline boxes have no scroll box.
OVERFLOWING = """
() => {
  const found = [];
  for (const element of document.querySelectorAll('article, article *')) {
    const style = getComputedStyle(element);
    const inline = style.display.startsWith('inline') && style.display !== 'inline-block';
    if (style.display === 'none' || inline) continue;
    if (element.closest('svg')) continue;
    const scrolls = style.overflowX === 'auto' || style.overflowX === 'scroll';
    if (!scrolls && element.scrollWidth > element.clientWidth + 1 && element.clientWidth > 0) {
      found.push(`${element.tagName.toLowerCase()}.${element.className}: ` +
        `${element.scrollWidth}px of content in ${element.clientWidth}px: ` +
        JSON.stringify((element.textContent || '').trim().slice(0, 80)));
    }
  }
  if (document.documentElement.scrollWidth > document.documentElement.clientWidth) {
    found.push(`the page scrolls sideways: ${document.documentElement.scrollWidth}px`);
  }
  return found;
}
"""

# Every settings name in a table: its parts, and on how many lines each part lies.
NAMES = """
() => [...document.querySelectorAll('article td code.wow-name')].map(code => {
  const parts = [...code.children].filter(c => c.tagName === 'SPAN');
  const tops = new Set(parts.map(p => Math.round(p.getBoundingClientRect().top)));
  return {
    name: code.textContent,
    lines: tops.size,
    brokenParts: parts.filter(p => p.getClientRects().length > 1).map(p => p.textContent),
    overflows: code.scrollWidth > code.clientWidth + 1,
  };
})
"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The built site, served on a loopback port of its own: its base URL."""
    folder = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(folder)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless chromium for the module."""
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(executable), headless=True, args=LAUNCH_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def offline_page(browser: Any, site: str) -> Iterator[tuple[Any, list[str]]]:
    """A page that may reach only the site's server; the URLs it tried elsewhere."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    blocked: list[str] = []

    def only_loopback(route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    context.route("**/*", only_loopback)
    page = context.new_page()
    page.set_default_timeout(DEADLINE * 1000)
    try:
        yield page, blocked
    finally:
        context.close()


def _open(page: Any, url: str) -> None:
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")


def _shadow_svgs(page: Any) -> int:
    """SVG elements under the mermaid hosts, closed shadow roots included (material renders
    a diagram into a closed one, which page scripts cannot see; the DevTools protocol can)."""
    session = page.context.new_cdp_session(page)
    try:
        document = session.send("DOM.getDocument", {"depth": -1, "pierce": True})
    finally:
        session.detach()

    def count(node: dict[str, Any], in_host: bool) -> int:
        attributes = node.get("attributes", [])
        classes = dict(zip(attributes[::2], attributes[1::2], strict=True)).get("class", "").split()
        in_host = in_host or (node.get("nodeName") == "DIV" and "mermaid" in classes)
        here = 1 if in_host and node.get("nodeName", "").lower() == "svg" else 0
        children = [*node.get("children", []), *node.get("shadowRoots", [])]
        return here + sum(count(child, in_host) for child in children)

    return count(document["root"], False)


def test_the_mermaid_diagram_becomes_an_svg_offline(offline_page: tuple[Any, list[str]], site: str) -> None:
    page, blocked = offline_page
    _open(page, site + "messaging/local-first/")
    deadline = time.monotonic() + DEADLINE
    while (svgs := _shadow_svgs(page)) == 0 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert svgs >= 1, "the mermaid diagram was not rendered into an SVG"
    assert page.locator("pre.mermaid, pre > code.language-mermaid").count() == 0, "raw mermaid text shows"
    assert blocked == [], f"the page tried to reach the network: {blocked}"


@pytest.mark.parametrize(
    ("path", "width"),
    [*((path, 1280) for path in PAGES), ("configuration/", 768)],  # and a tablet, without the sidebars
)
def test_no_text_overflows_its_box(
    offline_page: tuple[Any, list[str]], site: str, path: str, width: int
) -> None:
    page, blocked = offline_page
    page.set_viewport_size({"width": width, "height": 900})
    _open(page, site + path)
    assert page.evaluate(OVERFLOWING) == []
    # the code blocks that are wider than their box scroll (they are not cut)
    for overflow in page.eval_on_selector_all(
        "article pre > code",
        "codes => codes.filter(c => c.scrollWidth > c.clientWidth).map(c => getComputedStyle(c).overflowX)",
    ):
        assert overflow in ("auto", "scroll")
    assert blocked == [], f"{path} tried to reach the network: {blocked}"


def test_the_configuration_reference_names_break_only_between_their_parts(
    offline_page: tuple[Any, list[str]], site: str
) -> None:
    page, _ = offline_page
    _open(page, site + "configuration/")
    names = page.evaluate(NAMES)
    assert len(names) > 100  # every variable and key of the core and the plugin sections
    for name in names:
        assert name["brokenParts"] == [], f"{name['name']} breaks inside {name['brokenParts']}"
        assert not name["overflows"], f"{name['name']} runs out of its box"
        if len(name["name"]) <= 24:
            assert name["lines"] == 1, f"{name['name']} is short and yet on {name['lines']} lines"
        # a long name keeps about 15 characters or more on a line: not one part per line
        assert name["lines"] <= math.ceil(len(name["name"]) / 15), name


def test_the_search_finds_a_page(offline_page: tuple[Any, list[str]], site: str) -> None:
    page, blocked = offline_page
    _open(page, site)
    page.locator("label.md-search__icon, .md-search__input").first.click()
    # typed key by key, as a reader does (material searches on key presses)
    page.locator("input.md-search__input").press_sequentially("local-first", delay=20)
    first = page.locator(".md-search-result__item a").first
    first.wait_for(state="attached")
    assert "/messaging/local-first/" in (first.get_attribute("href") or "")
    assert "Local-first" in first.inner_text()
    assert blocked == [], f"the search tried to reach the network: {blocked}"

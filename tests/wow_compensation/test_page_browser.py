"""The operations page in a real headless browser (Debian's ``chromium`` driven by
Playwright for Python): a failing projection creates a record, the page lists it, the
operator signs in with the token and retries it after fixing the cause, the record goes
to SUCCEEDED and the projection holds the event. It takes the page's screenshots and
checks both views with axe-core (no serious or critical violation). The screenshots go to
the test's temporary folder, or, with ``WOW_UPDATE_SCREENSHOTS=1``, into
``docs/compensation/`` for the documentation (a plain run leaves the checkout clean).

Skipped, with the reason, when ``/usr/bin/chromium`` is absent, unless ``CI=true``
(``.ci/run`` installs it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.browser import LAUNCH_ARGS, chromium_path
from tests.wow_compensation.page_support import TOKEN, page_service
from wow_compensation.model import ExecutionFailedStatus

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compensation"


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the screenshots go (see the module doc)."""
    return DOCS if os.environ.get("WOW_UPDATE_SCREENSHOTS") == "1" else tmp_path


pytestmark = pytest.mark.slow


@pytest.fixture
def chromium() -> Path:
    return chromium_path()


async def serious_violations(page: Any) -> list[str]:
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]


async def test_an_operator_retries_a_failed_projection_in_the_browser(
    chromium: Path, shots: Path, fast_compensation: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.async_api import async_playwright, expect

    for key, value in {
        "WOW_COMPENSATION__SCHEDULER__ENABLED": "false",
        "WOW_COMPENSATION__RETRY__MIN_BACKOFF": "600",
        "WOW_COMPENSATION__RETRY__MAX_BACKOFF": "3600",
        "WOW_COMPENSATION__UI__ENABLED": "true",
        "WOW_COMPENSATION__UI__PORT": "0",
        "WOW_COMPENSATION__UI__TOKEN": TOKEN,
        "WOW_COMPENSATION__UI__REFRESH": "0.3",
    }.items():
        monkeypatch.setenv(key, value)
    DOCS.mkdir(parents=True, exist_ok=True)
    async with page_service() as service, async_playwright() as playwright:
        server = service.recorder.page_server
        assert server is not None
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), headless=True, args=LAUNCH_ARGS
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            page.set_default_timeout(5_000)
            # The page lists the failure (live: the record appears without a reload).
            await page.goto(server.url)
            record = await service.open_failing()
            row = page.locator(f'tr[data-record="{record.id}"]')
            await expect(row).to_be_visible()
            await expect(page.locator('a[data-queue="next_retry"] .count')).to_have_text("1")
            await page.screenshot(path=str(shots / "page-list.png"))
            assert await serious_violations(page) == []
            # The detail view; the operator signs in with the token.
            await row.get_by_role("link").click()
            await expect(page.locator("#status")).to_have_text("FAILED")
            await expect(page.locator("#error-message")).to_contain_text("the ledger database is down")
            await page.get_by_label("Operator token").fill(TOKEN)
            await page.get_by_role("button", name="Sign in").click()
            retry = page.get_by_role("button", name="Retry", exact=True)
            await expect(retry).to_be_visible()
            await page.screenshot(path=str(shots / "page-detail.png"), full_page=True)
            assert await serious_violations(page) == []
            # The cause is fixed; the operator retries; the record settles live.
            service.ledger.switches.on.clear()
            await retry.click()
            await expect(page.get_by_role("status")).to_contain_text("Done: prepare")
            await expect(page.locator("#status")).to_have_text("SUCCEEDED")
            await expect(page.locator("#h-history + table")).to_contain_text("ExecutionSuccessApplied")
            await page.screenshot(path=str(shots / "page-succeeded.png"))
        finally:
            await browser.close()
        done = await service.record(record.id)
        assert done.state.status is ExecutionFailedStatus.SUCCEEDED
        assert done.state.event is not None
        # the projection holds the event, once
        assert [h for h in service.ledger.journal.handled if h[0] == "opened"] == [
            ("opened", done.state.event.event_id)
        ]

"""Headless Chromium for the web console's tests: Debian's ``chromium`` driven by Playwright.

The browser is the one installed at ``/usr/bin/chromium`` (bin/test installs Debian's
``chromium`` and ``chromium-driver`` where it can); Playwright never downloads one. Where
either is missing the tests skip and say why. Each page collects its console errors and
uncaught exceptions so a test can assert there were none.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
#: set to 1 to (re)write the README's screenshots under docs/console
SCREENSHOTS_ENV = "MAGNETAR_CONSOLE_SCREENSHOTS"


def browser_missing() -> str | None:
    """Why no browser test can run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"no browser at {CHROMIUM}: install Debian's chromium and chromium-driver (bin/test does where it can)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e .[dev])"
    return None


@contextmanager
def chromium_context() -> Iterator[Any]:
    """One browser with a fresh profile, closed afterwards."""
    reason = browser_missing()
    if reason is not None:
        print(f"SKIPPED browser tests: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright
    profile = tempfile.mkdtemp(prefix="magnetar-console-profile-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1280, "height": 900})
            context.set_default_timeout(10_000)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class ConsolePage:
    """A browser tab on the console, with the errors its pages logged."""

    def __init__(self, context: Any, web_url: str) -> None:
        self.page = context.new_page()
        self.web_url = web_url
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))

    def open(self, route: str) -> Any:
        target = f"{self.web_url}/console/#{route}"
        if self.page.url.startswith(f"{self.web_url}/console/"):
            self.page.evaluate("delete document.getElementById('main').dataset.ready")
        if self.page.url == target:
            self.page.reload()
        else:
            self.page.goto(target)
        self.page.wait_for_selector("#main[data-ready]", state="attached")
        return self.page

    def text(self, selector: str) -> str:
        return str(self.page.locator(selector).first.inner_text()).strip()

    def number(self, selector: str) -> int:
        return int(self.text(selector).replace(",", ""))

    def confirm(self, button: str) -> None:
        self.page.click(button)
        self.page.click("#confirm-ok")

    def act(self, button: str) -> None:
        """Confirm an action and wait until the page says it is done (and has been redrawn)."""
        label = self.text(button)
        self.confirm(button)
        self.page.wait_for_selector(f"#action-status [data-outcome]:text-is('{label}: done')")

    def screenshot(self, name: str) -> None:
        if os.environ.get(SCREENSHOTS_ENV) != "1":
            return
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / name), full_page=True)

    def close(self) -> None:
        self.page.close()

"""The console in Debian's chromium, driven by Playwright, over the real services.

One stack (planner, reconciler, a sender, control, fake gateway) and one browser for the
module; each test opens its own browser context (its own session storage, so its own login).
Screenshots go to ``.pacer/artifacts/console/`` (not committed).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from pacer_dev.browser import chromium_path
from pacer_dev.infra import Infra
from pacer_dev.stack import Stack
from tests.conftest import stack_on
from tests.integration.control_support import make_tokens

ARTIFACTS = Path(".pacer/artifacts/console")
APPROVAL_ABOVE = 200
FAILING_GUID = "ui-bad"
SANDBOX = "sandbox-room"  # the fake gateway answers 40001 (bad_params) for every send of this guid
# How long a page action or an expect() waits. Playwright's expect() defaults to 5 s, which a
# busy 2-core machine can exceed while Swagger UI renders the whole spec.
UI_TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def stack(infra_env: Infra, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_on(infra_env, tmp_path_factory.mktemp("ui-stack"), f"u{uuid.uuid4().hex[:10]}", {
        "PACER_SENDER_MIN_INTERVAL_MS": "150",  # slow enough to watch progress move
        "PACER_SENDER_JITTER_MS": "5",
        "PACER_RECONCILER_SWEEP_INTERVAL_S": "0.5",
    }) as st:
        st.start_gateway(wait=False, fail_guids={FAILING_GUID: 40001})
        # A job of more than APPROVAL_ABOVE items waits for an admin's approval.
        st.start_service("planner", wait=False, PACER_PLANNER_APPROVAL_ABOVE_ITEMS=str(APPROVAL_ABOVE))
        st.start_service("control", wait=False, PACER_CONTROL_SANDBOX_TARGETS=SANDBOX)
        st.start_services("reconciler", "sender")  # and waits for all of them
        yield st


@pytest.fixture(scope="module")
def tokens(stack: Stack) -> dict[str, str]:
    # In a thread of its own: Playwright's sync API keeps an event loop running on this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, make_tokens(stack.infra.database_url, "ui-")).result()


@pytest.fixture(scope="module")
def console_url(stack: Stack) -> str:
    return f"{stack.procs['control'].url}/console"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module, not per session: Playwright's sync API keeps an event loop running in this
    # thread while it is open, and a test run after it that calls asyncio.run would fail.
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    expect.set_options(timeout=UI_TIMEOUT_MS)
    ctx = browser.new_context(viewport={"width": 1100, "height": 900})
    ctx.set_default_timeout(UI_TIMEOUT_MS)
    p = ctx.new_page()
    try:
        yield p
    finally:
        ctx.close()


def login(page: Page, console_url: str, token: str) -> None:
    page.goto(f"{console_url}/login")
    shot(page, "login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{console_url}/jobs")
    page.wait_for_selector("nav .who")


def shot(page: Page, name: str) -> Path:
    """The whole page, and its first screenful (what README shows) as ``<name>-top.png``."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    width = (page.viewport_size or {"width": 1100})["width"]
    page.screenshot(path=str(ARTIFACTS / f"{name}-top.png"), clip={"x": 0, "y": 0, "width": min(1100, width), "height": 620})
    return path

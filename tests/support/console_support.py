"""The web console's browser tests: a gateway with authentication required on its own embedded cluster, and
Debian's Chromium driven by Playwright (the ``playwright`` package from PyPI, with the system browser: never
``playwright install``, which downloads one).

``scripts/ensure_chromium.sh`` (run by ``scripts/test.sh``) installs ``chromium`` and ``chromium-driver``
where they are missing and apt-get can; :func:`chromium_or_skip` skips a test with the reason otherwise.
Screenshots go to ``test-artifacts/console/`` (gitignored) at the repository's root.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from gateway.runtime import Runtime
from tests.support.auth_support import AuthFiles, secure_gateway
from tests.support.files import ROOT
from tests.support.waiting import eventually

ARTIFACTS = ROOT / "test-artifacts" / "console"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
#: flags for a quiet, offline, headless Chromium in a container (no sandbox: tests run as root)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
#: how long a browser step may take (milliseconds)
TIMEOUT_MS = 15_000
#: topics of the console tests' cluster: demo (2 partitions in one store), lagged (one partition per store,
#: so its lag is exact)
TOPICS = "demo:2,lagged:1"


def chromium_or_skip() -> str:
    """The system Chromium's path, or skip saying why there is none."""
    override = os.environ.get("TUBEMQ_TEST_CHROMIUM")
    for path in (override, *CHROMIUM_CANDIDATES, shutil.which("chromium")):
        if path and os.access(path, os.X_OK):
            return path
    pytest.skip(
        "Chromium is not installed and scripts/ensure_chromium.sh could not install it (needs root and "
        "apt-get with the Debian packages chromium and chromium-driver): the console's browser tests skip"
    )


@dataclass
class ConsoleGateway:
    url: str
    runtime: Runtime
    files: AuthFiles
    http: httpx.AsyncClient
    app: FastAPI

    def key(self, principal: str) -> str:
        return self.files.keys[principal]

    def headers(self, principal: str) -> dict[str, str]:
        return self.files.headers(principal)


@asynccontextmanager
async def console_gateway(
    directory: Path, topics: str = TOPICS, **settings: Any
) -> AsyncIterator[ConsoleGateway]:
    """A gateway with auth required (``auth_support``'s principals and rules) on its own embedded cluster
    with ``topics``, on a free loopback port (or ``sock``: see ``secure_gateway``)."""
    settings.setdefault("tubemq", {"group_lag_interval": 0.5})  # group lag from TubeMQ's offsets, soon
    async with secure_gateway(directory, topics=topics, **settings) as gw:
        yield ConsoleGateway(gw.url, gw.runtime, gw.files, gw.http, gw.app)


@asynccontextmanager
async def served(app: Any, sock: socket.socket) -> AsyncIterator[str]:
    """``app`` (e.g. the admin listener's) served by uvicorn on ``sock``; yields its URL."""
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level=None, access_log=False))
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        return server.started

    try:
        await eventually(started, timeout=10.0, what="uvicorn start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def screenshot_path(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / f"{name}.png"


@asynccontextmanager
async def chromium_browser() -> AsyncIterator[Any]:
    """The system Chromium driven by Playwright (skips, saying why, without either)."""
    path = chromium_or_skip()
    playwright = pytest.importorskip(
        "playwright.async_api", reason="playwright (a dev extra) is not installed"
    )
    async with playwright.async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


class Tab:
    """One browser tab on the console, recording what would betray a leak or an injection."""

    def __init__(self, page: Any, gw: ConsoleGateway) -> None:
        self.page = page
        self.gw = gw
        self.errors: list[str] = []
        self.urls: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.urls.append(r.url))
        page.set_default_timeout(TIMEOUT_MS)

    async def sign_in(self, principal: str, kind: str = "apikey") -> None:
        page = self.page
        await page.goto(self.gw.url + "/console")
        await page.locator("#signin-form").wait_for()
        await page.select_option("#signin-kind", kind)
        await page.fill("#signin-secret", self.gw.key(principal))
        await page.click("#signin-form button[type=submit]")
        await page.locator("#nav").wait_for()

    async def go(self, route: str) -> None:
        await self.page.evaluate("route => { location.hash = route; }", route)

    async def shot(self, name: str) -> None:
        await self.page.screenshot(path=str(screenshot_path(name)), full_page=True)


async def open_tab(browser: Any, gw: ConsoleGateway) -> Tab:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    return Tab(await context.new_page(), gw)

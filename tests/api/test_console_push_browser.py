"""The console's push subscriptions page in a real browser (Debian's Chromium driven by Playwright) against a
gateway with authentication required, a real ``redis-server`` holding the API's definitions and a receiver
on 127.0.0.1: the page lists the subscriptions the user may manage with their state, pauses one made
through the API (nothing is delivered while it is paused) and resumes it (what waited is delivered), offers
no button for one of the subscriptions file, never shows an endpoint's query string, and tells a principal
without ``manage_subscriptions`` so, listing nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console_support import ConsoleGateway, Tab, chromium_browser, console_gateway, open_tab
from tests.support.push_support import Receiver, push_definition, receiver
from tests.support.redis_support import PASSWORD, running_redis
from tests.support.waiting import eventually

pytest.importorskip("playwright.async_api", reason="playwright (a dev extra) is not installed")

TOPICS = "demo:2,lagged:1,retry:1"
#: a token in the endpoint's query string: the page must not show it
QUERY_TOKEN = "s3cret-query-token"


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium_browser() as chromium:
        yield chromium


def _values(hook: Receiver) -> list[str]:
    return [json.loads(r.body)["message"]["value"] for r in hook.answered]


async def _publish(gw: ConsoleGateway, value: str) -> None:
    answer = await gw.http.post(
        "/v1/topics/demo/messages", json={"messages": [{"value": value}]}, headers=gw.headers("root")
    )
    assert answer.status_code == 200, answer.text


async def _status(tab: Tab, name: str, status: str) -> None:
    row = tab.page.locator(f"#subscriptions-table tr[data-subscription='{name}']")
    await row.locator(f"td.status-{status}").wait_for()


async def test_the_page_lists_pauses_and_resumes_push_subscriptions(tmp_path: Path, browser: Any) -> None:
    async with receiver() as hook:
        filed = push_definition(hook.url, name="filed", group="filed-push", topics=["lagged"])
        subscriptions = tmp_path / "subscriptions.json"
        subscriptions.write_text(json.dumps({"subscriptions": [filed]}), encoding="utf-8")
        push = {
            "subscriptions_file": str(subscriptions),
            "allow": ["127.0.0.1"],
            "poll_wait": 0.2,
            "error_backoff": 0.2,
            "reload_interval": 0.2,
        }
        with running_redis(tmp_path / "redis") as redis:
            store = {"redis_url": redis.url, "redis_password": PASSWORD, "store_timeout": 1.0}
            async with console_gateway(tmp_path, topics=TOPICS, push=push, idempotency=store) as gw:
                endpoint = f"{hook.url}?token={QUERY_TOKEN}"
                made = await gw.http.post(
                    "/v1/subscriptions",
                    json=push_definition(endpoint, name="api-hook", group="api-push"),
                    headers=gw.headers("root"),
                )
                assert made.status_code == 201, made.text
                await _pages(gw, hook, browser)


async def _pages(gw: ConsoleGateway, hook: Receiver, browser: Any) -> None:
    tab = await open_tab(browser, gw)
    page = tab.page
    await tab.sign_in("root")
    await tab.go("#/subscriptions")
    await page.locator("#subscriptions-table").wait_for()
    api_row = page.locator("#subscriptions-table tr[data-subscription='api-hook']")
    file_row = page.locator("#subscriptions-table tr[data-subscription='filed']")
    await _status(tab, "api-hook", "running")
    assert await api_row.locator("td.source").inner_text() == "api"
    assert await file_row.locator("td.source").inner_text() == "file"
    assert await file_row.locator("button").count() == 0  # the file's: change the file
    assert "in the file" in await file_row.locator("td.actions").inner_text()
    shown = await api_row.locator("td.endpoint").inner_text()
    assert shown.endswith("/hook?…") and QUERY_TOKEN not in await page.content()

    await _publish(gw, "before")
    await eventually(lambda: "before" in _values(hook), timeout=20, what="delivered while running")
    await api_row.locator("td.deliveries", has_text="acked 1").wait_for()
    await tab.shot("push-running")

    await api_row.locator("button.pause-button").click()
    await _status(tab, "api-hook", "paused")
    await api_row.locator("button.resume-button").wait_for()
    listed = (await gw.http.get("/v1/subscriptions/api-hook", headers=gw.headers("root"))).json()
    assert listed["paused"] is True and listed["state"]["status"] == "paused"
    await _publish(gw, "while-paused")
    await asyncio.sleep(1.5)  # poll_wait 0.2 s: a running loop would have delivered it by now
    assert "while-paused" not in _values(hook)
    await tab.shot("push-paused")

    await api_row.locator("button.resume-button").click()
    await _status(tab, "api-hook", "running")
    await eventually(lambda: "while-paused" in _values(hook), timeout=20, what="delivered after the resume")
    assert tab.errors == []

    # alice may consume but not manage_subscriptions: the page says so (the API's 403) and lists nothing
    other = await open_tab(browser, gw)
    await other.sign_in("alice")
    await other.go("#/subscriptions")
    await other.page.locator("#subscriptions .error", has_text="manage_subscriptions").wait_for()
    assert await other.page.locator("#subscriptions-table").count() == 0
    assert other.errors == []

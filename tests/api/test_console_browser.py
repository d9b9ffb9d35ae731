"""The web console in a real browser (Debian's Chromium driven by Playwright) against a served gateway with
authentication required: sign in, publish from the form and see the message in the live tail, read a range
of a partition, watch a group's lag move after a commit, and a hostile message value that stays text.
Screenshots of every page go to test-artifacts/console/ (console_support.py)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.console_support import (
    TIMEOUT_MS,
    ConsoleGateway,
    Tab,
    chromium_browser,
    console_gateway,
    open_tab,
    served,
)
from tests.support.serving import bound_socket
from tests.support.waiting import eventually

playwright_api = pytest.importorskip(
    "playwright.async_api", reason="playwright (a dev extra) is not installed"
)

HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[ConsoleGateway]:
    async with console_gateway(tmp_path) as gateway:
        yield gateway


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    async with chromium_browser() as chromium:
        yield chromium


async def publish(gw: ConsoleGateway, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = await gw.http.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages}, headers=gw.headers("alice")
    )
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


async def test_sign_in_publish_from_the_form_and_see_it_in_the_live_tail(
    gw: ConsoleGateway, browser: Any
) -> None:
    tab = await open_tab(browser, gw)
    page = tab.page
    # Not signed in: the sign-in form, and a wrong key is refused there.
    await page.goto(gw.url + "/console")
    await page.locator("#signin-form").wait_for()
    await tab.shot("signin")
    await page.fill("#signin-secret", "tgw_not-a-real-key")
    await page.click("#signin-form button[type=submit]")
    await page.get_by_text("did not accept this credential").wait_for()
    assert await page.locator("#nav").is_hidden()

    await tab.sign_in("alice")
    await page.locator("#topics-table tr[data-topic=demo]").wait_for()
    # The credential is in this tab's sessionStorage, never in a cookie.
    stored = await page.evaluate("() => sessionStorage.getItem('tubemq-console.credential')")
    assert json.loads(stored)["secret"] == gw.key("alice")
    assert await page.evaluate("() => document.cookie") == ""

    # Live tail of demo filtered to stream s1.
    await tab.go("#/tail?topic=demo")
    await page.fill("#tail-form input[name=streamId]", "s1")
    await page.evaluate(
        """() => { window.__tailTexts = [];
          new MutationObserver(() => { const s = document.querySelector('#tail-partitions');
            if (s) window.__tailTexts.push(s.textContent); })
            .observe(document.querySelector('main'), { subtree: true, childList: true, characterData: true });
        }"""
    )
    await page.click("#tail-start")
    # "latest": the tail sees what is published once it reads its partitions from a known offset
    await page.locator("#tail-partitions", has_text="reading 2 of 2 partition(s)").wait_for()
    # before the group's assignment it says what it waits for, not "reading 0 of 0"
    shown = await page.evaluate("() => window.__tailTexts")
    assert not any("of 0 partition" in text for text in shown), shown
    await tab.go("#/publish?topic=demo")  # the tail keeps running while other pages are shown
    form = page.locator("#publish-form")
    await form.locator("textarea[name=value]").fill("other stream")
    await form.locator("input[name=streamId]").fill("s2")
    await form.locator("input[name=partition]").fill("1")
    await form.locator("button[type=submit]").click()
    await page.locator("#published-offset").wait_for()
    assert await page.locator("#published-partition").text_content() == "1"  # the partition asked for
    # A key and a partition together: the API's 400 is shown.
    await form.locator("input[name=key]").fill("customer-42")
    await form.locator("button[type=submit]").click()
    await page.locator("#publish-result").get_by_text("not both").wait_for()
    await form.locator("input[name=partition]").fill("")
    await form.locator("textarea[name=value]").fill("hello from the console")
    await form.locator("textarea[name=attributes]").fill("region=eu")
    await form.locator("input[name=streamId]").fill("s1")
    await form.locator("button[type=submit]").click()
    await page.locator("#publish-result").get_by_text("Stored by broker").wait_for()
    offset = int(await page.locator("#published-offset").text_content() or "-1")
    assert offset >= 0
    await tab.shot("publish")

    await tab.go("#/tail")
    row = page.locator("#tail-table tbody tr").filter(has_text="hello from the console")
    await row.wait_for()
    assert "customer-42" in (await row.text_content() or "")
    assert "region=eu" in (await row.text_content() or "")
    # Newest first: a second message lands above the first.
    await publish(gw, "demo", [{"value": "second", "streamId": "s1"}])
    await page.locator("#tail-table tbody tr").first.filter(has_text="second").wait_for()
    # The filter kept stream s2 out.
    assert await page.locator("#tail-table").get_by_text("other stream").count() == 0

    # Pause holds new messages back; resume shows them.
    await page.click("#tail-pause")
    await publish(gw, "demo", [{"value": "while paused", "streamId": "s1"}])
    await page.locator("#tail-resume", has_text="1 new").wait_for()
    assert await page.locator("#tail-table").get_by_text("while paused").count() == 0
    await page.click("#tail-resume")
    await page.locator("#tail-table tbody tr").first.filter(has_text="while paused").wait_for()
    await tab.shot("tail")

    # Stop leaves the group and keeps what was shown.
    await page.click("#tail-stop")
    await page.get_by_text("3 message(s) kept").wait_for()
    assert await page.locator("#tail-table tbody tr").count() == 3
    consumers = await gw.http.get("/v1/consumers", headers=gw.headers("alice"))
    assert consumers.json()["instances"] == []

    # The secret never went into a URL (URLs end up in access logs and browser history).
    assert tab.urls and not [u for u in tab.urls if gw.key("alice") in u]
    assert tab.errors == []

    # A tail still running when the tab goes away leaves its group (not only when its lease runs out).
    await page.click("#tail-start")
    await page.locator("#tail-partitions", has_text="reading 2 of 2").wait_for()
    await page.close()

    async def left() -> bool:
        answer = await gw.http.get("/v1/consumers", headers=gw.headers("alice"))
        return answer.json()["instances"] == []

    await eventually(left, timeout=10.0, what="the closed tab's tail leaving its group")


async def test_read_a_range_of_a_partition_as_text_json_and_hex(gw: ConsoleGateway, browser: Any) -> None:
    results = await publish(
        gw,
        "demo",
        [
            # one key: one partition, in this order
            {
                "value": {"order": i, "item": "book"},
                "encoding": "json",
                "key": "customer-7",
                "streamId": f"s{i}",
            }
            for i in range(3)
        ],
    )
    tab = await open_tab(browser, gw)
    page = tab.page
    await tab.sign_in("alice", kind="bearer")
    await tab.go("#/messages?topic=demo&partition=" + results[0]["partitionKey"])
    await page.locator("#bounds").get_by_text("offsets").wait_for()
    form = page.locator("#range-form")
    await form.locator("input[name=from]").fill(str(results[0]["offset"]))
    await form.locator("input[name=to]").fill(str(results[2]["offset"] + 28))
    await form.locator("button[type=submit]").click()
    rows = page.locator("#messages-table tbody tr")
    await rows.nth(2).wait_for()
    assert await rows.count() == 3
    assert [await rows.nth(i).get_attribute("data-offset") for i in range(3)] == [
        str(r["offset"]) for r in results
    ]
    assert await rows.nth(1).locator("td").nth(2).text_content() == "customer-7"
    assert await rows.nth(1).locator("td").nth(3).text_content() == "s1"
    assert await rows.nth(1).locator("pre").text_content() == '{"order":1,"item":"book"}'
    await form.locator("select[aria-label='show values as']").select_option("json")
    assert await rows.nth(1).locator("pre").text_content() == json.dumps(
        {"order": 1, "item": "book"}, indent=2
    )
    await tab.shot("messages")
    await form.locator("select[aria-label='show values as']").select_option("hex")
    hex_dump = await rows.nth(0).locator("pre").text_content() or ""
    assert hex_dump.startswith("00000000  7b 22 6f 72 64 65 72 22")  # {"order"
    assert tab.errors == []


async def groups_page(browser: Any, gw: ConsoleGateway, principal: str) -> Tab:
    tab = await open_tab(browser, gw)
    await tab.sign_in(principal)
    await tab.go("#/groups")
    return tab


async def test_a_groups_lag_moves_after_a_commit(gw: ConsoleGateway, browser: Any) -> None:
    alice = gw.headers("alice")
    created = await gw.http.post(
        "/v1/consumers/console_lag", json={"topics": ["lagged"], "startPosition": "earliest"}, headers=alice
    )
    assert created.status_code == 201, created.text
    base = f"/v1/consumers/console_lag/instances/{created.json()['instanceId']}"
    await publish(gw, "lagged", [{"value": f"m{i}"} for i in range(5)])
    polled: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(polled) < 5 and time.monotonic() < deadline:
        answer = await gw.http.get(f"{base}/messages", params={"timeout_ms": 2000}, headers=alice)
        assert answer.status_code == 200, answer.text
        polled += answer.json()["messages"]
    assert len(polled) == 5

    tab = await groups_page(browser, gw, "alice")
    page = tab.page
    instance = page.locator("section.instance[data-group=console_lag]")
    lag = instance.locator("td.lag")
    await lag.get_by_text("5", exact=True).wait_for()  # delivered, not committed: still behind
    assert await instance.locator("td.position").text_content() == "0"
    assert await instance.locator("td.delivered").text_content() == "140"  # 5 index entries of 28 bytes
    commit = await gw.http.post(f"{base}/commits", json={}, headers=alice)
    assert commit.json()["committed"] == 5
    await lag.get_by_text("0", exact=True).wait_for()  # the page refreshes by itself
    assert await instance.locator(".total-lag").text_content() == "0"

    # Another principal's instance is not shown to alice; root (admin) sees every instance.
    bob = await gw.http.post("/v1/consumers/bobs_group", json={"topics": ["demo"]}, headers=gw.headers("bob"))
    assert bob.status_code == 201
    await page.wait_for_timeout(2500)  # one refresh
    assert await page.locator("section.instance[data-group=bobs_group]").count() == 0
    root = await open_tab(browser, gw)
    await root.sign_in("root")
    await root.go("#/groups")
    await root.page.locator("section.instance[data-group=bobs_group]").wait_for()
    await root.page.locator("section.instance[data-group=console_lag]").wait_for()

    # The group's lag as TubeMQ's offsets tell it stays on the page when its only consumer leaves.
    await publish(gw, "lagged", [{"value": "unread"}] * 2)
    assert (await gw.http.delete(base, headers=alice)).status_code == 204
    left = page.locator("#group-offsets section[data-group=console_lag]")
    await left.get_by_text("0 consumer(s) in the group").wait_for()
    await left.locator("td.lag").get_by_text("2", exact=True).wait_for()
    await left.get_by_text("lag and nobody consuming").wait_for()
    assert await instance.count() == 0
    await tab.shot("groups")
    assert tab.errors == [] and root.errors == []


async def test_groups_page_instance_and_offsets_views_agree_and_move(
    gw: ConsoleGateway, browser: Any
) -> None:
    """The Groups page's two views share one lag definition: a store of two partitions (demo) shows as one
    row with the store's figure, each view's total is the sum of its rows, an idle instance's end moves
    when messages arrive, both views agree when nothing moves, and two instances' ids are told apart."""
    alice = gw.headers("alice")
    paths = []
    for group in ("agree_one", "agree_two"):
        created = await gw.http.post(
            f"/v1/consumers/{group}", json={"topics": ["demo"], "startPosition": "latest"}, headers=alice
        )
        assert created.status_code == 201, created.text
        paths.append(f"/v1/consumers/{group}/instances/{created.json()['instanceId']}")
    base = paths[0]
    for path in paths:  # both instances hold the store's partitions, nothing to read yet
        answer = await gw.http.get(f"{path}/messages", params={"timeout_ms": 500}, headers=alice)
        assert answer.status_code == 200, answer.text
    await publish(gw, "demo", [{"value": f"a{i}", "partition": i % 2} for i in range(6)])
    polled: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while len(polled) < 6 and time.monotonic() < deadline:
        answer = await gw.http.get(f"{base}/messages", params={"timeout_ms": 1000}, headers=alice)
        polled += answer.json()["messages"]
    assert len(polled) == 6
    assert (await gw.http.post(f"{base}/commits", json={}, headers=alice)).json()["committed"] == 6
    await gw.http.get(f"{base}/messages", params={"timeout_ms": 300}, headers=alice)  # carries the commit

    tab = await groups_page(browser, gw, "alice")
    page = tab.page
    instance = page.locator("section.instance[data-group=agree_one]")
    offsets = page.locator("#group-offsets section[data-group=agree_one]")
    await instance.wait_for()
    await offsets.wait_for()
    # the instance is idle from now on: 4 more messages arrive in the store
    await publish(gw, "demo", [{"value": f"b{i}", "partition": i % 2} for i in range(4)])

    async def views() -> tuple[list[str], list[str], str | None, str | None, list[str], list[str]]:
        rows = [await r.text_content() or "" for r in await instance.locator("td.lag").all()]
        group_rows = [await r.text_content() or "" for r in await offsets.locator("td.lag").all()]
        ends = [await r.text_content() or "" for r in await instance.locator("td.end").all()]
        group_ends = [await r.text_content() or "" for r in await offsets.locator("td.end").all()]
        total = await instance.locator(".total-lag").text_content()
        group_total = await offsets.locator(".total-lag").text_content()
        return rows, group_rows, total, group_total, ends, group_ends

    async def settled() -> bool:
        rows, group_rows, total, group_total, ends, group_ends = await views()
        return rows == group_rows == ["4"] and total == group_total == "4" and ends == group_ends

    await eventually(settled, timeout=20, what="both views at lag 4, one row for the store, same end")
    assert await instance.locator("tr[data-store]").count() == 1
    assert "(one store)" in (await instance.locator("tr[data-store] td").first.text_content() or "")
    ids = [await i.text_content() for i in await page.locator("section.instance .instance-id").all()]
    assert len(ids) == 2 and ids[0] != ids[1], ids
    await tab.shot("groups-agree")
    assert tab.errors == []


async def test_topics_and_brokers_pages_show_what_the_rules_allow(gw: ConsoleGateway, browser: Any) -> None:
    await publish(gw, "demo", [{"value": "x"} for _ in range(4)])
    root = await open_tab(browser, gw)
    await root.sign_in("root")
    row = root.page.locator("#topics-table tr[data-topic=demo]")
    await row.wait_for()
    assert "4" in (await row.locator("td").nth(4).text_content() or "")  # published, from the counters
    await root.page.click("#topics-table tr[data-topic=demo] a >> text=demo")
    await root.page.locator("#topic-partitions tbody tr").nth(1).wait_for()
    assert "127.0.0.1:" in (await root.page.locator("#topic-partitions").text_content() or "")
    # The rate: the counters' change between two reads (every 3 s).
    await publish(gw, "demo", [{"value": "x"} for _ in range(30)])
    await root.page.wait_for_function(
        "() => parseFloat(document.querySelector('#topics-table tr[data-topic=demo] td.rate')"
        ".textContent) > 0",
        timeout=TIMEOUT_MS,
    )
    await root.shot("topics")
    await root.go("#/brokers")
    broker = root.page.locator("#brokers-table tbody tr").first
    await broker.wait_for()
    text = await broker.text_content() or ""
    assert "in use" in text and "127.0.0.1:" in text
    await root.shot("brokers")

    # alice may describe but not describe_cluster: no broker addresses; carol sees only other_* topics.
    alice = await open_tab(browser, gw)
    await alice.sign_in("alice")
    await alice.go("#/brokers")
    await alice.page.locator("#brokers-table tbody tr").first.wait_for()
    assert "needs describe_cluster" in (await alice.page.locator("#brokers-table").text_content() or "")
    carol = await open_tab(browser, gw)
    await carol.sign_in("carol")
    await carol.page.get_by_text("No topic yet").wait_for()
    assert root.errors == [] and alice.errors == [] and carol.errors == []


async def test_a_hostile_value_renders_as_text_and_never_runs(gw: ConsoleGateway, browser: Any) -> None:
    results = await publish(
        gw,
        "demo",
        [
            {
                "value": HOSTILE,
                "key": HOSTILE,
                "attributes": {"x": "<svg><b>bold</b></svg>"},  # no '=' or ',': TubeMQ's separators
                "streamId": "<b>bold</b>",
            }
        ],
    )
    tab = await open_tab(browser, gw)
    page = tab.page
    await tab.sign_in("alice")
    await tab.go(f"#/messages?topic=demo&partition={results[0]['partitionKey']}")
    await page.locator("#bounds").get_by_text("offsets").wait_for()
    await page.locator("#range-form button[type=submit]").click()
    row = page.locator("#messages-table tbody tr").first
    await row.wait_for()
    # Shown as the characters it is made of, as text: no element was made from it.
    assert await row.locator("pre").text_content() == HOSTILE
    assert await row.locator("td").nth(2).text_content() == HOSTILE
    assert await page.locator("#main img, #main script, #main svg, #main b").count() == 0
    for view in ("json", "hex"):
        await page.locator("#range-form select[aria-label='show values as']").select_option(view)
    await page.wait_for_timeout(300)  # an onerror handler would have run by now
    assert await page.evaluate("() => window.__pwned") is None
    await tab.shot("hostile")
    # The page's policy: no inline script, no eval, connections only to the gateway, Trusted Types.
    answer = await gw.http.get("/console")
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy
    assert "require-trusted-types-for 'script'" in policy
    # The browser enforces it: an HTML sink with a string throws.
    refused = await page.evaluate(
        "() => { try { document.body.insertAdjacentHTML('beforeend', '<i>x</i>'); return false } "
        "catch (e) { return e instanceof TypeError } }"
    )
    assert refused is True
    assert tab.errors == []


async def test_bidirectional_controls_show_as_code_points(gw: ConsoleGateway, browser: Any) -> None:
    """A right-to-left override in a key, a value or an attribute would reorder what follows it on screen
    ("invoice\u202efdp.exe" read as "invoiceexe.pdf"): the console shows each such control as its code
    point, in the range table and in the live tail's value, in every view."""
    key, value = "invoice\u202efdp.exe", "pay \u2067to\u2069 \u200fmallory"
    results = await publish(gw, "demo", [{"value": value, "key": key, "attributes": {"a": "x\u202ay"}}])
    tab = await open_tab(browser, gw)
    page = tab.page
    await tab.sign_in("alice")
    await tab.go(f"#/messages?topic=demo&partition={results[0]['partitionKey']}")
    await page.locator("#bounds").get_by_text("offsets").wait_for()
    await page.locator("#range-form button[type=submit]").click()
    row = page.locator("#messages-table tbody tr").first
    await row.wait_for()
    assert await row.locator("td").nth(2).text_content() == "invoice⟨U+202E⟩fdp.exe"
    assert await row.locator("pre").text_content() == "pay ⟨U+2067⟩to⟨U+2069⟩ ⟨U+200F⟩mallory"
    assert "a=x⟨U+202A⟩y" in (await row.text_content() or "")
    await page.locator("#range-form select[aria-label='show values as']").select_option("json")
    assert "⟨U+2067⟩" in (await row.locator("pre").text_content() or "")
    shown = await page.evaluate("() => document.getElementById('main').textContent")
    assert not any(
        c in shown for c in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    )
    await tab.shot("bidi")
    assert tab.errors == []


async def test_on_the_admin_listener_the_console_calls_the_api_across_origins(
    tmp_path: Path, browser: Any
) -> None:
    """console.listener admin: the page comes from the admin listener and calls the API's listener (another
    origin: CORS with the credential header, allowed by connect-src)."""
    main, admin = bound_socket(), bound_socket()
    api_url = f"http://127.0.0.1:{main.getsockname()[1]}"
    admin_origin = f"http://127.0.0.1:{admin.getsockname()[1]}"
    async with console_gateway(
        tmp_path,
        sock=main,
        admin={"host": "127.0.0.1", "port": admin.getsockname()[1]},
        console={"listener": "admin", "api_url": api_url},
        cors={"allow_origins": [admin_origin]},
    ) as gw:
        not_here = await gw.http.get("/console", headers=gw.headers("alice"))
        assert not_here.status_code == 404  # not on the API's listener
        async with served(gw.app.state.admin_app, admin) as url:
            tab = await open_tab(browser, gw)
            tab.gw = ConsoleGateway(url, gw.runtime, gw.files, gw.http, gw.app)  # the page's origin
            await tab.sign_in("alice")
            await tab.page.locator("#topics-table tr[data-topic=demo]").wait_for()
            assert any(u.startswith(api_url + "/v1/topics") for u in tab.urls)
            assert tab.errors == []


async def test_the_nav_fits_a_narrow_window_and_topic_fields_offer_the_topics(
    gw: ConsoleGateway, browser: Any
) -> None:
    """At 420 px every nav link stays on screen; Messages, Live tail and Publish opened from the nav offer
    the listed topics to pick; numeric columns have their headers aligned with their numbers."""
    await publish(gw, "demo", [{"value": "x"}])
    context = await browser.new_context(viewport={"width": 420, "height": 800})
    tab = Tab(await context.new_page(), gw)
    page = tab.page
    await tab.sign_in("root")
    for link in await page.locator("#nav a").all():
        box = await link.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 420, (
            await link.text_content(),
            box,
        )
    await tab.shot("narrow")
    for name in ("messages", "tail", "publish"):
        await page.click(f"#nav a[data-page={name}]")
        field = page.locator("main input[name=topic]")
        await field.wait_for()
        assert await field.input_value() == ""
        choices = page.locator(f"#{await field.get_attribute('list')} option")
        await choices.first.wait_for(state="attached")
        assert "demo" in [await o.get_attribute("value") for o in await choices.all()]
    await page.click("#nav a[data-page=topics]")
    header = page.locator("#topics-table th").nth(1)  # partitions: a number per row
    await header.wait_for()
    aligned = await header.evaluate("th => getComputedStyle(th).textAlign")
    assert aligned == "right"
    assert tab.errors == []


async def test_an_offset_the_broker_does_not_place_shows_as_a_dash(gw: ConsoleGateway, browser: Any) -> None:
    """demo's two partitions share a store: a range of one partition whose messages are interleaved with
    its sibling's has no per-message offsets (null in the API), shown as a dash with the reason on hover."""
    results = await publish(
        gw, "demo", [{"value": v, "partition": p} for v, p in (("a", 0), ("b", 1), ("c", 0))]
    )
    first, last = results[0], results[2]
    assert first["partitionKey"] == last["partitionKey"] and last["offset"] == first["offset"] + 56
    tab = await open_tab(browser, gw)
    page = tab.page
    await tab.sign_in("alice")
    await tab.go(f"#/messages?topic=demo&partition={first['partitionKey']}")
    await page.locator("#bounds").get_by_text("shares with 1 other").wait_for()
    form = page.locator("#range-form")
    await form.locator("input[name=from]").fill(str(first["offset"]))
    await form.locator("input[name=to]").fill(str(last["offset"] + 28))
    await form.locator("button[type=submit]").click()
    rows = page.locator("#messages-table tbody tr")
    await rows.nth(1).wait_for()
    assert await rows.count() == 2
    for i in range(2):
        cell = rows.nth(i).locator("td").first
        assert await cell.text_content() == "\N{EN DASH}"
        assert "shares its store" in (await cell.get_attribute("title") or "")
    assert tab.errors == []

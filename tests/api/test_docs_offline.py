"""/docs and /redoc work without internet: every URL of the pages is local and every asset is served, on
the main listener by default and on the admin listener when there is one."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from gateway.api.app import create_app
from gateway.api.docs import ASSETS, asset_directory
from gateway.config import Settings

#: src="...", href="...", url: '...' (Swagger UI's document URL), spec-url="..." (ReDoc's)
_REFERENCES = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']*)["']|\burl\s*:\s*["']([^"']*)["']""")


def references(html: str) -> list[str]:
    return [a or b for a, b in _REFERENCES.findall(html)]


async def _check_pages(client: httpx.AsyncClient, base: str) -> set[str]:
    """Fetch /docs and /redoc from ``base``; returns the asset names they load (each checked served)."""
    loaded: set[str] = set()
    for page in ("/docs", "/redoc"):
        answer = await client.get(base + page)
        assert answer.status_code == 200, page
        assert answer.headers["content-type"].startswith("text/html")
        html = answer.text
        # Nothing absolute: no scheme, no host, no protocol-relative //host (a CDN, Google Fonts...).
        assert (
            "http://" not in html and "https://" not in html and "//" not in re.sub(r"<!--.*?-->", "", html)
        )
        found = references(html)
        assert "openapi.json" in found, found
        assert any(ref.endswith(".js") for ref in found), found
        for ref in found:
            parts = urlsplit(ref)
            assert not parts.scheme and not parts.netloc and not ref.startswith("//"), ref
            url = urljoin(str(answer.url), ref)
            fetched = await client.get(url)
            assert fetched.status_code == 200, url
            name = ref.rsplit("/", 1)[-1]
            if name in ASSETS:
                assert fetched.headers["content-type"].startswith(ASSETS[name]), url
                assert fetched.content == (asset_directory() / name).read_bytes()
                loaded.add(name)
    return loaded


async def test_docs_and_redoc_load_only_local_assets() -> None:
    app = create_app(Settings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        loaded = await _check_pages(client, "")
        assert loaded == set(ASSETS)
        # Only the listed files are served: nothing else of the package, and no path outside it.
        for name in ("core.py", "..%2F__init__.py", "%2E%2E/%2E%2E/etc/passwd", "swagger-ui.css.map"):
            assert (await client.get(f"/docs/assets/{name}")).status_code == 404, name


async def test_the_pages_work_under_a_path_prefix() -> None:
    # An ingress serving the gateway under /gw strips the prefix: the pages' relative URLs keep it.
    app = create_app(Settings())

    async def strip_prefix(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            assert scope["path"].startswith("/gw/"), scope["path"]
            scope = {**scope, "path": scope["path"].removeprefix("/gw"), "raw_path": None}
        await app(scope, receive, send)

    transport = httpx.ASGITransport(app=strip_prefix)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        assert await _check_pages(client, "/gw") == set(ASSETS)


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_the_package_ships_every_asset(name: str) -> None:
    assert (asset_directory() / name).stat().st_size > 1000

"""The web console's files as the gateway serves them (no browser): every file the page loads is local and
served, each answer carries the strict Content-Security-Policy, nothing else of the package can be fetched,
the off switch, the admin listener, and the page's scripts never write markup from data."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from pydantic import ValidationError

from gateway.api.app import create_app
from gateway.api.console import ASSETS, asset_directory, content_security_policy
from gateway.config import Settings
from tests.support.files import ROOT

_REFERENCES = re.compile(r"""(?:src|href)\s*=\s*["']([^"']*)["']""")
_IMPORTS = re.compile(r"""(?:^|\s)(?:import|from)\s*(?:[\w*{}\s,]+from\s*)?["']([^"']+)["']""", re.MULTILINE)


def _client(settings: Settings) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gw")


def _check_policy(answer: httpx.Response, api_url: str | None = None) -> None:
    policy = answer.headers["content-security-policy"]
    assert policy == content_security_policy(api_url)
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert "unsafe" not in policy and "data:" not in policy and "*" not in policy
    assert directives["frame-ancestors"] == "'none'"
    assert directives["require-trusted-types-for"] == "'script'"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in answer.headers


async def test_the_page_loads_only_local_files_each_served_with_the_policy() -> None:
    async with _client(Settings()) as client:
        page = await client.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        _check_policy(page)
        html = page.text
        assert "http://" not in html and "https://" not in html and "//" not in html
        assert "<script>" not in html and "style=" not in html and "<style" not in html  # nothing inline
        # Every file the page and its modules load, followed transitively: relative, listed, served.
        refs = [ref for ref in _REFERENCES.findall(html) if not ref.startswith("#")]  # in-page links: the nav
        pending = [urljoin(str(page.url), ref) for ref in refs]
        seen: set[str] = set()
        while pending:
            url = pending.pop()
            if url in seen:
                continue
            seen.add(url)
            parts = urlsplit(url)
            assert parts.netloc == "gw" and parts.path.startswith("/console/assets/"), url
            name = parts.path.rsplit("/", 1)[-1]
            assert name in ASSETS, f"{name} is loaded but not served"
            answer = await client.get(url)
            assert answer.status_code == 200, url
            assert answer.headers["content-type"].startswith(ASSETS[name])
            _check_policy(answer)
            assert answer.content == (asset_directory() / name).read_bytes()
            if name.endswith(".js"):
                pending += [urljoin(url, ref) for ref in _IMPORTS.findall(answer.text)]
        assert {u.rsplit("/", 1)[-1] for u in seen} == set(ASSETS), "every listed file is used"
        # Only the listed files: nothing else of the package, no path outside it.
        for name in ("index.html", "console.py", "..%2Fconsole.py", "%2E%2E/%2E%2E/etc/passwd", "app.js.map"):
            answer = await client.get(f"/console/assets/{name}")
            assert answer.status_code == 404, name


def test_every_console_file_is_package_data_of_the_wheel() -> None:
    """pyproject.toml's package-data patterns cover every file of the console directory."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    patterns = re.search(r'"gateway\.api" = \[([^\]]*)\]', text)
    assert patterns is not None
    globs = [g.strip().strip('"').removeprefix("console/") for g in patterns.group(1).split(",")]
    for path in asset_directory().iterdir():
        assert any(path.match(g) for g in globs), f"{path.name} would be missing from the wheel"


def test_the_scripts_never_write_markup() -> None:
    """Data reaches the page as text only: no HTML sink and no eval in any script (the browser tests show
    a hostile value rendered as text; Trusted Types in the policy make the browser refuse such sinks)."""
    sinks = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setTimeout\(['\"`]"
        r"|createContextualFragment|srcdoc"
    )
    for path in asset_directory().glob("*.js"):
        found = sinks.findall(path.read_text(encoding="utf-8"))
        assert found == [], f"{path.name}: {found}"


async def test_the_off_switch() -> None:
    async with _client(Settings(console={"enabled": False})) as client:
        assert (await client.get("/console")).status_code == 404
        assert (await client.get("/console/assets/app.js")).status_code == 404


async def test_on_the_admin_listener_the_page_calls_the_api_url() -> None:
    api = "https://gw.example.com/prefix"
    settings = Settings(admin={"port": 0}, console={"listener": "admin", "api_url": api})
    app = create_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as main:
        assert (await main.get("/console")).status_code == 404  # not on the API's listener
    admin = app.state.admin_app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=admin), base_url="http://admin") as client:
        page = await client.get("/console")
        assert page.status_code == 200
        _check_policy(page, api)
        assert "connect-src 'self' https://gw.example.com;" in page.headers["content-security-policy"]
        assert f'<meta name="tubemq-api-base" content="{api}">' in page.text
        assert (await client.get("/console/assets/api.js")).status_code == 200


@pytest.mark.parametrize(
    ("console", "admin", "message"),
    [
        ({"listener": "admin"}, {"port": 9100}, "console.api_url"),
        ({"listener": "admin", "api_url": "javascript:alert(1)"}, {"port": 9100}, "console.api_url"),
        ({"listener": "admin", "api_url": "https://gw"}, {}, "admin.port"),
    ],
)
def test_settings_that_cannot_work_are_refused(
    console: dict[str, str], admin: dict[str, int], message: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        Settings(console=console, admin=admin)


async def test_the_api_url_is_escaped_into_the_page() -> None:
    """The URL comes from configuration; still, it goes into the page as an escaped attribute value."""
    api = 'https://gw.example.com/"><script>alert(1)</script>'
    settings = Settings(admin={"port": 0}, console={"listener": "admin", "api_url": api})
    admin = create_app(settings).state.admin_app
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=admin), base_url="http://admin") as client:
        html = (await client.get("/console")).text
    assert "<script>alert" not in html
    assert 'content="https://gw.example.com/&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in html

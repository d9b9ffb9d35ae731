"""The cost of authentication per request: open mode (baseline), API keys and JWTs.

Run from the repository root: ``python bench/bench_auth.py [--calls N] [--http-seconds S] [--no-http]``.

Each in-process level is printed in CPU microseconds per request (this process's CPU time, so a busy
machine does not inflate it):

1. the authenticator alone: a known API key; a JWT seen before (the verified-token cache); a JWT seen for
   the first time (RS256 signature check against a cached JWKS);
2. the REST auth middleware around a no-op app (header scan, operation lookup, authentication, rule check
   and the principal scope): what every REST request pays, and the difference to open mode; and the REST
   limits middleware around an app that reads a publish body (the process budgets, the caller's share, the
   body deadlines);
3. gRPC: a ``GetTopic`` round trip through a grpc.aio server in this process with the gateway's interceptor
   (authentication before the message, budgets) around a servicer that answers at once: open mode, an API
   key, and a call without credentials refused from its headers (16 calls in flight);
4. end to end (unless ``--no-http``): an embedded cluster and a gateway per mode as subprocesses, one-message
   publishes from ``hey`` or ``wrk`` when installed, else from httpx in this process (then the driver is the
   bottleneck and the differences shrink); requests per second and mean latency per mode.

Keys and tokens are made here; the JWKS is served from this process on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_publish import free_port, start_cluster, start_gateway  # noqa: E402

from gateway.api.app import create_app  # noqa: E402
from gateway.api.auth import AuthMiddleware  # noqa: E402
from gateway.api.request_limits import RequestLimitsMiddleware  # noqa: E402
from gateway.config import AuthSettings, LimitSettings, Settings  # noqa: E402
from gateway.grpc.interceptors import GatewayInterceptor  # noqa: E402
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2 as pb  # noqa: E402
from gateway.grpc.pb.tubemq.gateway.v1 import gateway_pb2_grpc  # noqa: E402
from gateway.runtime import Runtime  # noqa: E402
from gateway.security.api_keys import ApiKeyAuthenticator, KeyEntry, hash_key, new_key  # noqa: E402
from gateway.security.authenticator import Authenticator  # noqa: E402
from gateway.security.credentials import Credentials  # noqa: E402
from gateway.security.jwt_auth import JwksCache, JwtAuthenticator  # noqa: E402
from gateway.security.rules import parse_rules  # noqa: E402
from gateway.security.setup import Security, build_security  # noqa: E402
from gateway.service.access import ALLOW_ALL  # noqa: E402

TOPIC = "bench"
ISSUER = "http://127.0.0.1/bench-issuer"
AUDIENCE = "tubemq-gateway"
RULES = {"rules": [{"roles": ["app"], "actions": ["publish", "describe"], "topics": ["*"]}]}


class Issuer:
    """An RSA signing key, tokens, and its JWKS served over HTTP on 127.0.0.1 from a thread."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        body = json.dumps({"keys": [{**jwk, "kid": "bench", "use": "sig", "alg": "RS256"}]}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def token(self, sub: str = "bench-user") -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "iat": now, "exp": now + 3600, "roles": ["app"]}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "bench"})

    def close(self) -> None:
        self.server.shutdown()


async def per_call(fn: Callable[[], Awaitable[object]], calls: int) -> float:
    """CPU microseconds of this process (every thread: grpc's too) per awaited call of ``fn``: CPU time, not
    wall time, so that other processes on a busy machine do not show up in the figure."""
    for _ in range(min(calls, 200)):
        await fn()
    started = time.process_time()
    for _ in range(calls):
        await fn()
    return (time.process_time() - started) / calls * 1e6


async def authenticator_level(issuer: Issuer, calls: int) -> dict[str, float]:
    keys = [new_key() for _ in range(1000)]
    entries = [KeyEntry(f"p{i}", hash_key(k), ("app",)) for i, k in enumerate(keys)]
    api = Authenticator("required", api_keys=ApiKeyAuthenticator(entries))
    jwt_auth = JwtAuthenticator(
        JwksCache(issuer.url), issuer=ISSUER, audience=[AUDIENCE], roles_claim="roles"
    )
    jwt_only = Authenticator("required", jwt=jwt_auth)
    open_auth = Authenticator("open")
    key_creds = Credentials(bearer=keys[500])
    token = issuer.token()
    jwt_creds = Credentials(bearer=token)
    fresh = [Credentials(bearer=issuer.token(f"user-{i}")) for i in range(min(calls, 2000))]
    it = iter(fresh)
    results = {
        "open mode": await per_call(lambda: open_auth.authenticate(key_creds), calls),
        "API key (1000 keys)": await per_call(lambda: api.authenticate(key_creds), calls),
        "JWT, seen before": await per_call(lambda: jwt_only.authenticate(jwt_creds), calls),
    }
    await jwt_only.authenticate(jwt_creds)  # JWKS fetched before the next timing
    results["JWT, first use (RS256 verify)"] = await per_call(
        lambda: jwt_only.authenticate(next(it)), len(fresh) - 200
    )
    await jwt_only.close()
    return results


def auth_files(tmp: Path) -> tuple[str, Path, Path]:
    """A fresh API key of principal ``bench`` (role app), and the keys and rules files in ``tmp``."""
    key = new_key()
    keys_file, rules_file = tmp / "keys.json", tmp / "rules.json"
    keys_file.write_text(
        json.dumps({"keys": [{"principal": "bench", "hash": hash_key(key), "roles": ["app"]}]})
    )
    rules_file.write_text(json.dumps(RULES))
    return key, keys_file, rules_file


async def middleware_level(issuer: Issuer, calls: int, tmp: Path) -> dict[str, float]:
    key, keys_file, rules_file = auth_files(tmp)
    app = create_app(runtime=Runtime(Settings()))
    required = AuthSettings(
        mode="required",
        api_keys_file=keys_file,
        rules_file=rules_file,
        jwt={"issuer": ISSUER, "audience": [AUDIENCE], "jwks_url": issuer.url, "roles_claim": "roles"},
    )
    securities = {
        "open mode": Security(Authenticator("open"), ALLOW_ALL),
        "required": build_security(required),
    }
    assert parse_rules(RULES).rules

    async def noop(scope: Any, receive: Any, send: Any) -> None:
        return None

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        raise AssertionError(f"the middleware answered itself: {message}")

    def scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
        base = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"30")]
        return {
            "type": "http",
            "method": "POST",
            "path": f"/v1/topics/{TOPIC}/messages",
            "headers": base + headers,
        }

    cases = {
        "open mode": ("open mode", []),
        "API key": ("required", [(b"authorization", f"Bearer {key}".encode())]),
        "JWT (seen before)": ("required", [(b"authorization", f"Bearer {issuer.token()}".encode())]),
    }
    results: dict[str, float] = {}
    for name, (which, headers) in cases.items():
        security = securities[which]
        middleware = AuthMiddleware(noop, security=lambda s=security: s, fastapi=lambda: app)  # type: ignore[misc]
        request = scope(headers)
        results[name] = await per_call(lambda m=middleware, r=request: m(r, receive, send), calls)  # type: ignore[misc]
    await securities["required"].close()
    return results


async def limits_level(calls: int) -> dict[str, float]:
    """The REST limits middleware around an app that reads a 100-byte publish body."""

    async def reading(scope: Any, receive: Any, send: Any) -> None:
        await receive()

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"x" * 100, "more_body": False}

    async def send(message: Any) -> None:
        raise AssertionError(f"the middleware answered itself: {message}")

    request = {
        "type": "http",
        "method": "POST",
        "path": f"/v1/topics/{TOPIC}/messages",
        "headers": [(b"host", b"127.0.0.1"), (b"content-length", b"100")],
        "client": ("127.0.0.1", 40000),
    }
    limits = LimitSettings()
    middleware = RequestLimitsMiddleware(reading, limits=lambda: limits)
    return {"publish, 100-byte body": await per_call(lambda: middleware(request, receive, send), calls)}


class _Answering(gateway_pb2_grpc.GatewayServiceServicer):
    async def GetTopic(self, request: Any, context: Any) -> Any:
        return pb.GetTopicResponse(topic=request.topic)


async def grpc_level(issuer: Issuer, calls: int, tmp: Path) -> dict[str, float]:
    key, keys_file, rules_file = auth_files(tmp)
    required = build_security(AuthSettings(mode="required", api_keys_file=keys_file, rules_file=rules_file))
    cases: dict[str, tuple[Security, tuple[tuple[str, str], ...]]] = {
        "open mode": (Security(Authenticator("open"), ALLOW_ALL), ()),
        "API key": (required, (("authorization", f"Bearer {key}"),)),
        "no credentials (refused)": (required, ()),
    }
    results: dict[str, float] = {}
    for name, (security, metadata) in cases.items():
        server = grpc.aio.server(interceptors=[GatewayInterceptor(security=security)])
        gateway_pb2_grpc.add_GatewayServiceServicer_to_server(_Answering(), server)  # type: ignore[no-untyped-call]
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
                request = pb.GetTopicRequest(topic=TOPIC)

                async def one(stub: Any = stub, request: Any = request, metadata: Any = metadata) -> None:
                    try:
                        await stub.GetTopic(request, metadata=metadata)
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() is not grpc.StatusCode.UNAUTHENTICATED:
                            raise

                async def sixteen(one: Callable[[], Awaitable[None]] = one) -> None:
                    await asyncio.gather(*(one() for _ in range(16)))

                results[name] = await per_call(sixteen, max(1, calls // 16)) / 16
        finally:
            await server.stop(0)
    return results


def http_level(issuer: Issuer, seconds: float, concurrency: int, tmp: Path) -> dict[str, tuple[float, float]]:
    key, keys_file, rules_file = auth_files(tmp)
    required = {
        "TUBEMQ_GATEWAY_AUTH__MODE": "required",
        "TUBEMQ_GATEWAY_AUTH__API_KEYS_FILE": str(keys_file),
        "TUBEMQ_GATEWAY_AUTH__RULES_FILE": str(rules_file),
        "TUBEMQ_GATEWAY_AUTH__JWT__ISSUER": ISSUER,
        "TUBEMQ_GATEWAY_AUTH__JWT__AUDIENCE": json.dumps([AUDIENCE]),
        "TUBEMQ_GATEWAY_AUTH__JWT__JWKS_URL": issuer.url,
        "TUBEMQ_GATEWAY_AUTH__JWT__ROLES_CLAIM": "roles",
        "TUBEMQ_GATEWAY_CONSUMERS__ID_SECRET": os.urandom(16).hex(),
    }
    modes: dict[str, tuple[dict[str, str], dict[str, str]]] = {
        "open mode": ({}, {}),
        "API key": (required, {"Authorization": f"Bearer {key}"}),
        "JWT": (required, {"Authorization": f"Bearer {issuer.token()}"}),
    }
    cluster, master = start_cluster()
    results: dict[str, tuple[float, float]] = {}
    try:
        for name, (env, headers) in modes.items():
            port = free_port()
            gateway = start_gateway(master, port, env=env)
            try:
                results[name] = drive(port, headers, seconds, concurrency)
            finally:
                gateway.terminate()
                gateway.wait(timeout=30)
    finally:
        cluster.terminate()
        cluster.wait(timeout=30)
    return results


def drive(port: int, headers: dict[str, str], seconds: float, concurrency: int) -> tuple[float, float]:
    """(requests/s, mean latency ms) of one-message publishes."""
    url = f"http://127.0.0.1:{port}/v1/topics/{TOPIC}/messages"
    body = json.dumps({"messages": [{"value": "x" * 100}]})
    first = httpx.post(url, content=body, headers={"content-type": "application/json", **headers}, timeout=30)
    first.raise_for_status()
    if shutil.which("hey"):
        cmd = ["hey", "-z", f"{seconds:g}s", "-c", str(concurrency), "-m", "POST", "-T", "application/json"]
        for k, v in headers.items():
            cmd += ["-H", f"{k}: {v}"]
        out = subprocess.run([*cmd, "-d", body, url], capture_output=True, text=True, check=True).stdout
        rate = float(out.split("Requests/sec:")[1].split()[0])
        mean = float(out.split("Average:")[1].split()[0]) * 1000
        return rate, mean
    return asyncio.run(_httpx_load(url, body, headers, seconds, concurrency))


async def _httpx_load(
    url: str, body: str, headers: dict[str, str], seconds: float, concurrency: int
) -> tuple[float, float]:
    done = 0
    latency = 0.0
    deadline = time.perf_counter() + seconds
    async with httpx.AsyncClient(
        headers={"content-type": "application/json", **headers}, timeout=30
    ) as client:

        async def worker() -> None:
            nonlocal done, latency
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                (await client.post(url, content=body)).raise_for_status()
                latency += time.perf_counter() - started
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return done / elapsed, latency / max(done, 1) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000, help="calls per in-process measurement")
    parser.add_argument("--http-seconds", type=float, default=5.0, help="seconds of load per mode")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight end to end")
    parser.add_argument("--no-http", action="store_true", help="skip the end-to-end measurement")
    args = parser.parse_args()
    issuer = Issuer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            print("authenticator alone, us per request:")
            for name, us in asyncio.run(authenticator_level(issuer, args.calls)).items():
                print(f"  {name:32s} {us:8.2f}")
            print("REST auth middleware around a no-op app, us per request:")
            level = asyncio.run(middleware_level(issuer, args.calls, Path(tmp)))
            for name, us in level.items():
                extra = "" if name == "open mode" else f"  (+{us - level['open mode']:.2f} over open mode)"
                print(f"  {name:32s} {us:8.2f}{extra}")
            print("REST limits middleware around an app reading the body, us per request:")
            for name, us in asyncio.run(limits_level(args.calls)).items():
                print(f"  {name:32s} {us:8.2f}")
            print("gRPC GetTopic round trip in this process (client and server), 16 in flight, us per call:")
            for name, us in asyncio.run(grpc_level(issuer, args.calls, Path(tmp))).items():
                print(f"  {name:32s} {us:8.2f}")
            if not args.no_http:
                driver = "hey" if shutil.which("hey") else "httpx (the bottleneck; install hey)"
                print(f"end to end, one-message publish, {args.concurrency} in flight, driver {driver}:")
                for name, (rate, mean) in http_level(
                    issuer, args.http_seconds, args.concurrency, Path(tmp)
                ).items():
                    print(f"  {name:32s} {rate:8.0f} req/s  {mean:6.2f} ms mean")
    finally:
        issuer.close()


if __name__ == "__main__":
    main()

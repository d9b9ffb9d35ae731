"""gRPC publish load from ``h2load`` (Debian package ``nghttp2-client``), as wrk drives the REST rows.

Why not grpc.aio from the bench's own Python process: a grpc.aio client costs more CPU per call than the
gateway spends on it, so on a small machine the bench would measure itself, and it calls over one channel,
that is one HTTP/2 connection, which ``serve --workers N`` hands to one worker process (``SO_REUSEPORT``
balances connections, not calls). The REST rows come from wrk (C, a few
us per request) over several connections that the workers share. ``h2load`` sends gRPC calls as they are on
the wire: one HTTP/2 stream per call, ``content-type: application/grpc``, the length-prefixed request
message as the body, over ``connections`` connections with one call in flight on each.

``h2load`` counts HTTP answers, and a gRPC error is an HTTP 200 with a ``grpc-status`` trailer, so every run
is checked against the gateway's own ``grpc_server_handled_total`` (``/metrics``, every worker): a call that
ended with any code but OK ends the bench, and fewer OK calls than ``h2load`` counted would too. Except the
calls ``h2load`` cuts when its time is up: at most one per connection is in flight then, and the gateway ends
each with the code its cut gave (CANCELLED where the gateway saw the client go; UNKNOWN or INTERNAL where
the cut met the call writing its answer, which grpc refuses on a stream already reset: ``code_of`` in
``gateway/grpc/call_outcome.py``); ``h2load`` may have counted such a call as done when its answer's
headers had come. Up to one of those codes per connection is counted as cut (the
run reports them) and a call ``h2load`` counted but the gateway cut is not missing. The counters are read
once they stopped moving: the gateway records a cut call a moment after ``h2load`` has exited.
``h2load`` never shows a status message, so the bench then prints why the gateway refused them:
:func:`refusals` reads its ``gRPC call refused`` log lines (``gateway/grpc/call_outcome.py``).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import httpx

SERVICE = "tubemq.gateway.v1.GatewayService"

#: the codes a call ends with when ``h2load`` cuts it at its end (see the module docstring)
CUT_CODES = ("Canceled", "Unknown", "Internal")
#: seconds the gateway's call counters are watched for the calls cut at the end, at most
SETTLE_SECONDS = 3.0

_HANDLED = re.compile(r"^grpc_server_handled_total\{([^}]*)\} ([0-9.e+]+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def h2load_installed() -> bool:
    return shutil.which("h2load") is not None


def frame(message: bytes) -> bytes:
    """One gRPC message on the wire: not compressed, its length (4 bytes, big-endian), the bytes."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


def handled(http_url: str, method: str) -> Counter[str]:
    """Calls of ``method`` the gateway has ended, by ``grpc_code`` (summed over its workers)."""
    return _handled(http_url, method)[0]


def _handled(http_url: str, method: str) -> tuple[Counter[str], Counter[str]]:
    """Calls of ``method`` the gateway has ended, by ``grpc_code`` and by worker process (``serve --workers
    N`` labels each worker's series; "" for a gateway of one process)."""
    text = httpx.get(f"{http_url}/metrics", timeout=30).text
    codes: Counter[str] = Counter()
    workers: Counter[str] = Counter()
    for labels, value in _HANDLED.findall(text):
        found = dict(_LABEL.findall(labels))
        if found.get("grpc_service") == SERVICE and found.get("grpc_method") == method:
            codes[found.get("grpc_code", "")] += int(float(value))
            workers[found.get("worker", "")] += int(float(value))
    return codes, workers


def _settled(http_url: str, method: str, before: Counter[str]) -> tuple[Counter[str], Counter[str]]:
    """:func:`_handled` once its total has not moved for a quarter of a second (at most
    :data:`SETTLE_SECONDS`): the calls cut at the end are recorded as the gateway sees the cut."""
    codes, workers = _handled(http_url, method)
    stop = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < stop:
        time.sleep(0.25)
        again, workers = _handled(http_url, method)
        if again.total() == codes.total():
            break
        codes = again
    return codes, workers


@dataclass
class H2loadRun:
    """What one ``h2load`` run did: calls per second, the calls by worker process (see :func:`spread`) and
    the calls it cut at its end, by the code the gateway ended them with."""

    rate: float
    by_worker: Counter[str]
    cut: Counter[str]

    def note(self) -> str:
        """The cut calls, as the report shows them ("" when none)."""
        if not self.cut:
            return ""
        codes = ", ".join(f"{n} {code}" for code, n in sorted(self.cut.items()))
        return f"cut at the end: {codes}"


def judge(ended: Counter[str], done: int, connections: int) -> tuple[Counter[str], str]:
    """The calls of a run cut at its end (by code), and "" when the run is sound, else why it is not:
    ``ended`` the calls the gateway ended by code, ``done`` those ``h2load`` counted as succeeded."""
    failed = Counter({code: n for code, n in ended.items() if code != "OK" and n})
    cut = Counter({code: n for code, n in failed.items() if code in CUT_CODES})
    other = failed - cut
    if other:
        return cut, f"gRPC calls failed under h2load: {dict(ended)}"
    if cut.total() > connections:
        return cut, (
            f"{cut.total()} calls ended {dict(cut)}, more than the {connections} h2load can leave in flight "
            f"at its end (one per connection): {dict(ended)}"
        )
    if ended["OK"] + cut.total() < done:
        return cut, (
            f"h2load counted {done} answers, the gateway {ended['OK']} OK calls and {cut.total()} cut (the "
            "others were refused by grpc's core before the gateway's code saw them, e.g. its concurrent-call "
            "or message-size bound)"
        )
    return cut, ""


def spread(by_worker: Counter[str]) -> str:
    """How a run's calls were spread over the worker processes, e.g. ``worker 0: 88%, 1: 12%``: the kernel
    gives each worker connections, not calls, and a few connections (more so right after the start, before
    every worker listens) may all reach one worker, which then does the work of the replica alone."""
    total = sum(by_worker.values())
    if not total or "" in by_worker:  # one process: no worker label
        return ""
    shares = ", ".join(f"{w}: {n / total:.0%}" for w, n in sorted(by_worker.items()))
    return f"calls by worker {shares}"


#: the message of the gateway's line for every refused gRPC call (gateway/grpc/call_outcome.py)
REFUSED = "gRPC call refused"


def refusals(log_lines: Iterable[bytes | str], method: str | None = None, shown: int = 5) -> str:
    """What the gateway's log says about the gRPC calls it refused (of ``method``, or all): each distinct
    (code, reason, field) with how often, the message, time and request id of its first call, at most
    ``shown`` of them, most frequent first; "" when the log has none."""
    seen: Counter[tuple[str, str, str]] = Counter()
    first: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    for raw in log_lines:
        line = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        if REFUSED not in line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") != REFUSED or (method is not None and entry.get("method") != method):
            continue
        cause = (str(entry.get("grpc_code")), str(entry.get("reason")), str(entry.get("field", "")))
        seen[cause] += 1
        example = (str(entry.get("detail")), str(entry.get("ts")), str(entry.get("request_id")))
        first.setdefault(cause, example)
    lines = []
    for cause, count in seen.most_common(shown):
        code, reason, _ = cause
        detail, at, request_id = first[cause]
        lines.append(f"  {count} x {code} ({reason}), the first: {detail} [at {at}, request id {request_id}]")
    if len(seen) > shown:
        lines.append(f"  ... and {len(seen) - shown} other causes")
    return "\n".join(lines)


def h2load_calls(
    grpc_port: int,
    http_url: str,
    method: str,
    body: bytes,
    connections: int,
    seconds: float,
    run: Callable[[Sequence[str]], str],
    body_file: str,
    log: Callable[[], Iterable[bytes | str]] | None = None,
) -> H2loadRun:
    """Calls per second of ``method`` with ``body`` (framed request messages) on ``connections`` connections,
    one call in flight on each, for ``seconds``, with the run's calls by worker process and those cut at its
    end; ``run`` runs the command and returns its output. ``log`` gives the gateway's log lines: when calls
    failed, the bench prints why the gateway refused them."""
    with open(body_file, "wb") as f:
        f.write(body)
    cmd = ["h2load", "-D", str(max(1, round(seconds))), "-c", str(connections), "-m", "1", "-t", "1"]
    cmd += ["-d", body_file, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    cmd += [f"http://127.0.0.1:{grpc_port}/{SERVICE}/{method}"]
    before, workers_before = _handled(http_url, method)
    logged = len(list(log())) if log is not None else 0  # the lines of earlier runs are not this run's
    out = run(cmd)
    after, workers_after = _settled(http_url, method, before)
    rate = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out)
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    if rate is None or done is None:
        raise SystemExit(f"cannot read h2load's output:\n{out[-2000:]}")
    cut, wrong = judge(after - before, int(done.group(1)), connections)
    if wrong:
        raise SystemExit(f"{method}: {wrong}\n{out[-2000:]}{_why(log, logged, method)}")
    return H2loadRun(float(rate.group(1)), workers_after - workers_before, cut)


def _why(log: Callable[[], Iterable[bytes | str]] | None, skip: int, method: str) -> str:
    if log is None:
        return ""
    found = refusals(list(log())[skip:], f"/{SERVICE}/{method}")
    if not found:
        return "\nthe gateway's log names no refused call of this method (is its log level above warning?)"
    return f"\nwhy the gateway refused them (its log, '{REFUSED}' lines):\n{found}"

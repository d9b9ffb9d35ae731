"""The network-fault lab: a gateway in a network namespace of its own, TubeMQ reached through one veth pair
whose faults the lab controls, its clients through another veth pair that stays clean.

::

    host namespace                                          the lab's namespace
    TubeMQ on 127.0.0.1:P  <- relay 10.231.N.1:P  <=veth t=>  relay 127.0.0.1:P <- gateway (masters 127.0.0.1)
    test client            ---------------------  <=veth c=>  gateway HTTP on 10.232.N.2

Master and brokers advertise 127.0.0.1, so inside the namespace a relay listens on 127.0.0.1 at each of
their ports and forwards through veth ``t`` to a relay on the host side of it, which forwards to the real
127.0.0.1 port. Faults apply to veth ``t`` only, never to the machine's ``lo``:

* latency: ``tc qdisc ... netem delay`` on both ends of veth ``t`` where the kernel has ``sch_netem``;
  otherwise the namespace's relay holds every chunk that long (``latency_kind`` says which);
* loss: ``netem loss`` where there is netem, otherwise nftables ``numgen random`` drop rules in the lab's
  namespace on veth ``t`` (the kernel's TCP retransmits, as with netem);
* partition: nftables drops everything on veth ``t`` in the lab's namespace (or ``netem loss 100%``).

Only addresses inside the namespace and the veth pairs the lab made are used. :func:`unavailable` says why a
lab cannot be made (not root, no ``ip`` / ``nft``, no network namespaces).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

RELAY = Path(__file__).with_name("netrelay.py")


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why a lab cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces and veth pairs need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is missing (scripts/ensure_netlab.sh installs iproute2 and nftables as root)"
    name = f"tgprobe{secrets.token_hex(3)}"
    made = _run("ip", "netns", "add", name, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    try:
        table = _run("ip", "netns", "exec", name, "nft", "add", "table", "inet", "probe", check=False)
        if table.returncode != 0:
            return f"nftables does not work in a network namespace: {table.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", name, check=False)
    return None


def _free_subnet() -> int:
    used = _run("ip", "-4", "-o", "addr").stdout
    for _ in range(100):
        n = secrets.randbelow(250) + 2
        if f"10.231.{n}." not in used and f"10.232.{n}." not in used:
            return n
    raise RuntimeError("no free 10.231.N.0/30 subnet for the lab")


class NetLab:
    """One lab (module docstring) relaying ``ports`` of the host's 127.0.0.1; a context manager."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = sorted(set(ports))
        tag = secrets.token_hex(3)
        self.ns = f"tgnet{tag}"
        self.t_host, self.t_ns = f"tt{tag}h", f"tt{tag}n"
        self.c_host, self.c_ns = f"tc{tag}h", f"tc{tag}n"
        n = _free_subnet()
        self.t_host_ip, self.t_ns_ip = f"10.231.{n}.1", f"10.231.{n}.2"
        self.c_host_ip, self.c_ns_ip = f"10.232.{n}.1", f"10.232.{n}.2"
        self.netem = False
        self._dir = Path(tempfile.mkdtemp(prefix="netlab-"))
        self.delay_file = self._dir / "delay_ms"
        self._relays: list[subprocess.Popen[bytes]] = []
        self._made: list[str] = []

    @property
    def latency_kind(self) -> str:
        return "tc netem" if self.netem else "relay (the kernel has no sch_netem)"

    def __enter__(self) -> NetLab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _ns(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", self.ns, *cmd, check=check)

    def _build(self) -> None:
        _run("ip", "netns", "add", self.ns)
        self._made.append("ns")
        for host, inner, host_ip, ns_ip in (
            (self.t_host, self.t_ns, self.t_host_ip, self.t_ns_ip),
            (self.c_host, self.c_ns, self.c_host_ip, self.c_ns_ip),
        ):
            _run("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
            self._made.append(host)
            _run("ip", "link", "set", inner, "netns", self.ns)
            _run("ip", "addr", "add", f"{host_ip}/30", "dev", host)
            _run("ip", "link", "set", host, "up")
            self._ns("ip", "addr", "add", f"{ns_ip}/30", "dev", inner)
            self._ns("ip", "link", "set", inner, "up")
        self._ns("ip", "link", "set", "lo", "up")
        probe = _run("tc", "qdisc", "add", "dev", self.t_host, "root", "netem", "delay", "0ms", check=False)
        self.netem = probe.returncode == 0
        if self.netem:
            _run("tc", "qdisc", "del", "dev", self.t_host, "root", check=False)
        self._ns("nft", "add", "table", "inet", "netlab")
        for chain, hook in (("out", "output"), ("in", "input")):
            self._ns("nft", f"add chain inet netlab {chain} {{ type filter hook {hook} priority 0; }}")
        self.delay_file.write_text("0")
        host_pairs = [f"{self.t_host_ip}:{p}=127.0.0.1:{p}" for p in self.ports]
        ns_pairs = [f"127.0.0.1:{p}={self.t_host_ip}:{p}" for p in self.ports]
        self._relay([sys.executable, str(RELAY), *host_pairs])
        in_ns = ["ip", "netns", "exec", self.ns, sys.executable, str(RELAY)]
        self._relay([*in_ns, "--delay-file", str(self.delay_file), *ns_pairs])

    def _relay(self, cmd: list[str]) -> None:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._relays.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"relay did not start: {proc.stderr.read().decode() if proc.stderr else ''}")

    def popen(self, cmd: list[str], **options: object) -> subprocess.Popen[bytes]:
        """Start ``cmd`` inside the lab's namespace."""
        return subprocess.Popen(["ip", "netns", "exec", self.ns, *cmd], **options)  # type: ignore[call-overload]

    # --- faults on veth t -------------------------------------------------------------------------------

    def _netem(self, *spec: str) -> None:
        _run("tc", "qdisc", "replace", "dev", self.t_host, "root", "netem", *spec)
        self._ns("tc", "qdisc", "replace", "dev", self.t_ns, "root", "netem", *spec)

    def _rules(self, *rules: str) -> None:
        self._ns("nft", "flush", "table", "inet", "netlab")
        for rule in rules:
            chain, _, text = rule.partition(" ")
            self._ns("nft", f"add rule inet netlab {chain} {text}")

    def clear(self) -> None:
        """No fault."""
        self.delay_file.write_text("0")
        if self.netem:
            for dev, ns in ((self.t_host, False), (self.t_ns, True)):
                cmd = ("tc", "qdisc", "del", "dev", dev, "root")
                (self._ns(*cmd, check=False) if ns else _run(*cmd, check=False))
        self._rules()

    def latency(self, ms: int) -> None:
        """Each direction of veth t delayed by ``ms`` (one way: round trips grow by twice that)."""
        self.clear()
        if self.netem:
            self._netem("delay", f"{ms}ms")
        else:
            self.delay_file.write_text(str(ms))

    def loss(self, percent: int) -> None:
        """``percent`` % of the packets on veth t dropped, each direction."""
        self.clear()
        if self.netem:
            self._netem("loss", f"{percent}%")
        else:
            self._rules(
                f'out oifname "{self.t_ns}" numgen random mod 100 < {percent} drop',
                f'in iifname "{self.t_ns}" numgen random mod 100 < {percent} drop',
            )

    def partition(self) -> None:
        """Nothing crosses veth t (the gateway's TCP connections stall, as in a real partition)."""
        self.clear()
        self._rules(f'out oifname "{self.t_ns}" drop', f'in iifname "{self.t_ns}" drop')

    def close(self) -> None:
        for proc in self._relays:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        self._relays.clear()
        for made in reversed(self._made):
            if made == "ns":
                _run("ip", "netns", "del", self.ns, check=False)
            else:
                _run("ip", "link", "del", made, check=False)
        self._made.clear()
        with contextlib.suppress(OSError):
            shutil.rmtree(self._dir)

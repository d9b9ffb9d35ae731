"""How many CPUs this process may use: the default of ``serve --workers``.

The smaller of the CPUs the scheduler lets the process run on (``sched_getaffinity``) and its CPU quota,
rounded up: cgroup v2 ``cpu.max`` (``quota period``, or ``max``) of the process's cgroup and every cgroup
above it, or cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``. A container with a CPU limit of 2
(Kubernetes ``resources.limits.cpu: 2``) gets 2 workers on a 64-core node; 1.5 gets 2; 500m gets 1. At
least 1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

__all__ = ["allowed_cpus", "cgroup_cpu_limit"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def allowed_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs this process may use (see the module docstring); at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - platforms without sched_getaffinity
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, cpus)


def cgroup_cpu_limit(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota of this process's cgroups in CPUs (the tightest along the path), None without one."""
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    limits: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            limits += _walk(cgroup_root, path, _v2_limit)
        elif "cpu" in controllers.split(","):
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                if (cgroup_root / mount).is_dir():
                    limits += _walk(cgroup_root / mount, path, _v1_limit)
                    break
    return min(limits) if limits else None


def _walk(root: Path, path: str, read: Callable[[Path], float | None]) -> list[float]:
    """The limits ``read`` finds in the cgroup ``path`` under ``root`` and every cgroup above it."""
    found: list[float] = []
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    for depth in range(len(parts), -1, -1):
        value = read(root.joinpath(*parts[:depth]))
        if value is not None:
            found.append(value)
    return found


def _v2_limit(directory: Path) -> float | None:
    try:
        quota, _, period = (directory / "cpu.max").read_text(encoding="ascii").strip().partition(" ")
        if quota == "max":
            return None
        return _ratio(int(quota), int(period or "100000"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _v1_limit(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text(encoding="ascii").strip())
        period = int((directory / "cpu.cfs_period_us").read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return _ratio(quota, period)


def _ratio(quota: int, period: int) -> float | None:
    return quota / period if quota > 0 and period > 0 else None

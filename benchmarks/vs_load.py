"""The machine load during a head-to-head arm: CPU every core spent busy, CPU of one process
group, and the cores everything else kept busy (the noise behind an arm's numbers).

Reads /proc only; imports nothing but the standard library (hivemind's workers run beside it).
"""

from __future__ import annotations

import os


def busy_cpu_seconds(proc_stat: str) -> float:
    """CPU seconds all cores spent busy (not idle, not iowait) since boot, from /proc/stat text."""
    for line in proc_stat.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:]]
            busy = sum(v[:8]) - v[3] - (v[4] if len(v) > 4 else 0)  # user nice system idle iowait irq softirq steal
            return busy / os.sysconf("SC_CLK_TCK")
    raise ValueError("no aggregate 'cpu ' line in /proc/stat")


def read_busy() -> float:
    with open("/proc/stat") as f:
        return busy_cpu_seconds(f.read())


def parse_pid_stat(text: str) -> tuple[int, float]:
    """(process group, user + system CPU seconds) from one /proc/<pid>/stat line."""
    rest = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(rest[2]), (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu(pgid: int) -> dict[int, float]:
    """CPU seconds of every live process of one process group (hivemind's p2pd daemon included)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    group, cpu = parse_pid_stat(f.read())
            except (OSError, ValueError, IndexError):
                continue
            if group == pgid:
                out[int(entry)] = cpu
    return out


class GroupCPUMeter:
    """The CPU a process group used since `start()`, sampled while its processes live (one that
    exits keeps its last sample)."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.base = group_cpu(pgid)
        self.last = dict(self.base)

    def sample(self) -> None:
        self.last.update(group_cpu(self.pgid))

    def seconds(self) -> float:
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.last.items())


def others_load(busy_s: float, own_cpu_s: float, wall_s: float) -> float:
    """Cores kept busy by everything else on the machine while an arm ran (never below 0)."""
    if wall_s <= 0:
        raise ValueError(f"wall time must be > 0, got {wall_s}")
    return max(0.0, busy_s - own_cpu_s) / wall_s

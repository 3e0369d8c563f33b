"""A process's resident memory as Linux reports it: its present and peak size, and a reset of the
peak, so a benchmark can measure what one phase or stage of a run adds."""

from __future__ import annotations

import re
from pathlib import Path


def status_bytes(field: str, pid: int | str = "self") -> int:
    """A memory figure of a process from /proc/PID/status (`VmRSS`, `VmHWM`: the peak since it
    started or since `reset_peak`), in bytes."""
    match = re.search(rf"^{field}:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    if match is None:
        raise RuntimeError(f"/proc/{pid}/status has no {field}")
    return int(match.group(1)) * 1024


def reset_peak(pid: int | str = "self") -> bool:
    """Start counting the process's peak afresh (5 to /proc/PID/clear_refs); False where that is not
    allowed or not Linux."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True

"""`gossip-tts status HOST:PORT`: what a running peer's status page shows, in a terminal.

It reads the peer's `GET /v1/status` with a timeout and a cap on the body (a status is a few
tens of kB; whatever answers at that address is not trusted to stop sending), and imports
no torch, so it answers at once.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from gossip_tts.cli.terminal_text import printable
from peer.net.errors import describe_os_error

MAX_BYTES = 4 << 20
"""Largest status body read: 512 history points and 64 neighbours are well under 100 kB."""
SPARK = "▁▂▃▄▅▆▇█"


class StatusError(Exception):
    """The peer could not be read; the text says why."""


@dataclass(frozen=True)
class StatusConfig:
    """What `gossip-tts status` asks a peer, and how it prints the answer."""

    address: str
    """HOST:PORT (or an http(s) URL) of the peer."""
    timeout_s: float = 5.0
    """Seconds to wait for the peer's whole answer."""
    as_json: bool = False
    """Print the peer's /v1/status JSON as it came instead of the rendered page."""

    def __post_init__(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError(f"--timeout must be > 0 seconds, got {self.timeout_s}")


def fetch_status(address: str, timeout_s: float, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """GET http://ADDRESS/v1/status: at most `max_bytes`, all of it within `timeout_s`.

    The deadline covers the whole body, not each read: a server that drips a byte at a
    time would otherwise hold the command for `max_bytes` timeouts."""
    url = address if address.startswith(("http://", "https://")) else f"http://{address}"
    url = url.rstrip("/") + "/v1/status"
    deadline = time.monotonic() + timeout_s
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            chunks, size = [], 0
            while size <= max_bytes:
                if time.monotonic() > deadline:
                    raise StatusError(f"{url}: no complete answer within {timeout_s:g} s")
                chunk = resp.read1(64 << 10)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            body = b"".join(chunks)
    except urllib.error.HTTPError as exc:
        raise StatusError(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusError(f"{url}: {describe_os_error(reason) or reason}; check HOST:PORT against the peer's "
                          "'listening on' line") from None
    if len(body) > max_bytes:
        raise StatusError(f"{url}: the answer is larger than {max_bytes} bytes; is this a gossip-tts peer?")
    try:
        status = json.loads(body)
    except ValueError:
        raise StatusError(f"{url}: the answer is not JSON; is this a gossip-tts peer?") from None
    if not isinstance(status, dict) or "peer_id" not in status:
        raise StatusError(f"{url}: the answer is not a peer status")
    return status


def _num(x: Any, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _bytes(n: Any) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _seconds(s: Any) -> str:
    if s is None:
        return "-"
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def sparkline(values: list[float], width: int = 64) -> str:
    """The loss curve as one line of block characters (mean of each of `width` buckets)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return ""
    if len(values) > width:
        size = len(values) / width
        values = [sum(b) / len(b) for b in (values[int(i * size): int((i + 1) * size)] for i in range(width)) if b]
    lo, hi = min(values), max(values)
    span = hi - lo or 1.0
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / span * len(SPARK)))] for v in values)


def render(status: dict[str, Any]) -> str:
    """The terminal view: figures, the loss curve, neighbours, refusals; every line escaped
    (`printable`), so a peer's text cannot clear the screen or forge a row."""
    s = status
    history = s.get("loss_history") or []
    losses = [p[1] for p in history]
    lines = [
        f"peer {s.get('peer_id')}",
        f"swarm {s.get('swarm')}  listen {s.get('listen')}  model {str(s.get('fingerprint'))[:16]}",
        f"step {s.get('step')}  loss {_num(s.get('loss'), 4)}  steps/s {_num(s.get('steps_per_s'), 2)}  "
        f"audio-s/s {_num(s.get('audio_seconds_per_s'), 1)}",
        f"swarm size {s.get('swarm_size')}  bytes in {_bytes(s.get('bytes_in'))}  out {_bytes(s.get('bytes_out'))}  "
        f"exchanges {s.get('exchanges')}  consensus {_num(s.get('consensus_distance'), 4)}",
    ]
    if history:
        lo = min((v for v in losses if v is not None), default=None)
        hi = max((v for v in losses if v is not None), default=None)
        lines.append(f"loss {sparkline(losses)}  steps {history[0][0]}-{history[-1][0]}, "
                     f"{_num(hi, 4)} .. {_num(lo, 4)}")
    neighbours = s.get("neighbours") or []
    lines.append(f"neighbours ({len(neighbours)})")
    if neighbours:
        lines.append(f"  {'peer':<18}{'address':<24}{'step':>8}{'staleness':>11}{'last contact':>14}{'rtt':>9}")
    for n in neighbours:
        peer = (n.get("peer_id") or "(unverified)")[:16]
        dead = "" if n.get("live") is not False else "  (dead)"
        step = "-" if n.get("step") is None else str(n["step"])
        stale = "-" if n.get("staleness") is None else str(n["staleness"])
        contact = "never" if n.get("last_contact_s") is None else _seconds(n["last_contact_s"]) + " ago"
        lines.append(f"  {peer:<18}{str(n.get('address') or '-'):<24}{step:>8}{stale:>11}{contact:>14}"
                     f"{_seconds(n.get('rtt_s')):>9}{dead}")
    refusals = s.get("refusals") or {}
    lines.append("refused frames: " + (", ".join(f"{k} {v}" for k, v in refusals.items()) if refusals else "none"))
    return "\n".join(map(printable, lines))  # every field came from whatever answered at that address

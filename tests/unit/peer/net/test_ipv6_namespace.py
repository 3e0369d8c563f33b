"""Floods spread over one IPv6 /64, on real sockets: many addresses of one /64 are benched and
capped as one (`peer.core.budget_key`), where as many /64s get a budget each; and a flood from
many /64s of one /48 is benched as one block (`Blocks`), where as many /48s are not.

A test machine has only ::1, so the scenarios run in a network namespace of their own
(`unshare -rn`, unprivileged), with addresses added to its loopback; the machine's own network
is untouched. Where user namespaces are not allowed, the test is skipped.

Run as a module inside such a namespace, this file prints each scenario's outcome as JSON."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys

import pytest

from peer.metrics import Metrics
from peer.net.config import NetConfig
from tests.paths import REPO
from tests.unit.guarded_server_helpers import ask, refusing_site

FLOODERS = 16
ONE_64 = [f"2001:db8:1:2::{i + 1:x}" for i in range(FLOODERS)]
MANY_64S = [f"2001:db8:{i + 16:x}::1" for i in range(FLOODERS)]
"""Each in a /48 of its own: the /64s of one /48 share its budgets too (`ONE_48`)."""
OTHER = "2001:db8:9:9::1"
FRESH = "2001:db8:1:2:ffff::1"
"""An address of the flooded /64 that sent nothing itself."""
ONE_48 = [f"2001:db8:2:{i + 1:x}::1" for i in range(FLOODERS)]
FRESH_48 = "2001:db8:2:ffff::1"
"""A /64 of the flooded /48 that sent nothing itself."""


async def flood(sources: list[str], fresh: str = FRESH) -> dict[str, object]:
    """60 first contacts, each from the next of `sources`, then one GET /metrics from `fresh` (of the
    first source's /64, or /48) and one from another /48: how the flood's requests ended (by status,
    0: closed unanswered), and the two statuses."""
    cfg = NetConfig(stranger_exchanges_per_s=1.0, stranger_exchange_burst=4, refusals_per_s=1.0, refusal_burst=32,
                    refusals_in_all_per_s=1.0, refusal_strikes=4)  # benched past 4 refusals, for half a minute
    runner, site = await refusing_site(cfg, "::1", Metrics(process=False))
    loop, ends = asyncio.get_running_loop(), {}
    for i in range(60):
        source = sources[i % len(sources)]
        code = await loop.run_in_executor(None, ask, "::1", site._bound_port, source, b"POST /v1/exchange", b"x" * 600)
        ends[str(code)] = ends.get(str(code), 0) + 1
    after = await loop.run_in_executor(None, ask, "::1", site._bound_port, fresh, b"GET /metrics")
    other = await loop.run_in_executor(None, ask, "::1", site._bound_port, OTHER, b"GET /metrics")
    await runner.cleanup()
    return {"ends": ends, "fresh": after, "other": other}


async def hold(sources: list[str]) -> dict[str, object]:
    """With 2 connections per address, hold an idle one from each of `sources`, then GET /metrics from
    a fresh address of the first source's /64 and from another /64: (their statuses, connections held)."""
    runner, site = await refusing_site(NetConfig(max_connections_per_address=2), "::1", Metrics(process=False))
    held = [await asyncio.open_connection("::1", site._bound_port, local_addr=(s, 0)) for s in sources]
    await asyncio.sleep(0.2)
    loop = asyncio.get_running_loop()
    fresh = await loop.run_in_executor(None, ask, "::1", site._bound_port, FRESH, b"GET /metrics")
    other = await loop.run_in_executor(None, ask, "::1", site._bound_port, OTHER, b"GET /metrics")
    open_ = sum(not reader.at_eof() for reader, _ in held)
    for _, writer in held:
        writer.close()
    await runner.cleanup()
    return {"fresh": fresh, "other": other, "held": open_}


def main() -> None:
    """In a fresh namespace: bring its loopback up with the addresses above, run each scenario.
    Anywhere else (an interface besides lo) it stops before changing anything."""
    if [name for _, name in socket.if_nameindex()] != ["lo"]:
        raise SystemExit("not in a fresh network namespace: run it as `unshare -rn python -m ...`")
    addresses = ONE_64 + MANY_64S + ONE_48 + [OTHER, FRESH, FRESH_48]
    commands = ["link set lo up"] + [f"addr add {a}/64 dev lo nodad" for a in addresses]
    subprocess.run(["ip", "-batch", "-"], input="\n".join(commands), text=True, check=True)
    print(json.dumps({"flood_one_64": asyncio.run(flood(ONE_64)), "flood_many_64s": asyncio.run(flood(MANY_64S)),
                      "flood_one_48": asyncio.run(flood(ONE_48, FRESH_48)),
                      "hold_one_64": asyncio.run(hold(ONE_64[:3])), "hold_many_64s": asyncio.run(hold(MANY_64S[:3]))}))


def _namespace_refusal() -> str | None:
    """Why a network namespace cannot be made here, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "needs unshare and ip (util-linux, iproute2)"
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"no unprivileged network namespace: {probe.stderr.strip()[:200]}"
    return None


@pytest.fixture(scope="module")
def outcome() -> dict[str, dict]:
    if (why := _namespace_refusal()) is not None:
        pytest.skip(why)
    run = subprocess.run(["unshare", "-rn", sys.executable, "-m", "tests.unit.peer.net.test_ipv6_namespace"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_flood_spread_over_one_64_is_benched_with_every_address_in_it(outcome) -> None:
    one = outcome["flood_one_64"]
    assert one["ends"].get("0", 0) >= 50 and one["fresh"] == 0 and one["other"] == 200, one


def test_control_a_flood_spread_over_as_many_64s_benches_none(outcome) -> None:
    many = outcome["flood_many_64s"]
    assert many["ends"].get("0", 0) == 0 and many["fresh"] == 200 and many["other"] == 200, many


def test_a_flood_spread_over_64s_of_one_48_is_benched_with_the_rest_of_it(outcome) -> None:
    """Each /64 within its own strikes (4 of 60 / 16); the /48's (16) spent, then benched."""
    one = outcome["flood_one_48"]
    assert one["ends"].get("0", 0) >= 40 and one["fresh"] == 0 and one["other"] == 200, one


def test_connections_of_one_64_are_capped_together(outcome) -> None:
    assert outcome["hold_one_64"] == {"fresh": 0, "other": 200, "held": 2}
    assert outcome["hold_many_64s"] == {"fresh": 200, "other": 200, "held": 3}  # control: a cap per /64


if __name__ == "__main__":
    main()

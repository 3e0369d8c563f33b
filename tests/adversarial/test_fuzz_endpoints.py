"""A bounded fuzz run against every endpoint of one running tiny peer.

Requests: mutated signed exchange bundles (a key the peer never saw signed them; one flipped
byte or more), random bytes, compressed bodies, declared lengths past the limit, truncated
bodies, malformed HTTP, wrong methods and paths, and the honest GETs (/v1/hello, /v1/state,
/v1/status, /metrics, /). Sent over many keep-alive connections, each from its own source
address, by one asyncio client speaking raw HTTP/1.1 (so it can break the framing).

Holds: the peer stays up and keeps training with a finite loss; no mutated bundle is ever
accepted (no 200 for one, no frame of one applied); and every refusal is counted. The
relation checked: for each status code, the peer's `http_responses_total{code}` grew by
exactly the answers the client read with that code, and the bad requests sent equal
frames_refused_total + http_refused_total (both grown by exactly their categories' counts)
+ the 404/405/400 answers aiohttp's router and parser give before any handler runs.

GOSSIP_TTS_FUZZ_REQUESTS sets the number of requests (default 100,000; the run must take at
most GOSSIP_TTS_FUZZ_SECONDS, default 300).
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest
import torch

from protocol import pack_bundle
from tests.adversarial.conftest import Forger, holding_newest, http, read_state, source_ip, verify_policy
from tests.integration.peers import last_step

pytestmark = pytest.mark.slow

REQUESTS = int(os.environ.get("GOSSIP_TTS_FUZZ_REQUESTS", "100000"))
SECONDS = float(os.environ.get("GOSSIP_TTS_FUZZ_SECONDS", "300"))
CONNECTIONS = 32
"""Concurrent keep-alive connections, each from its own source address (so no per-address cap is hit)."""


KINDS = {"mutated_bundle": 35, "mutated_update": 5, "random_body": 15, "empty_body": 3, "compressed": 5, "huge_length": 5, "truncated": 1,
         "malformed_http": 4, "wrong_method": 4, "unknown_path": 4, "hello": 10, "state": 4, "status": 1, "page": 2,
         "metrics": 0.2}
"""Kinds of request and their shares of the run."""


def _mutate(rng: random.Random, body: bytes) -> bytes:
    """1 to 4 bytes changed (never to themselves), or the body cut short, or bytes inserted."""
    b = bytearray(body)
    roll = rng.random()
    if roll < 0.8:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= rng.randint(1, 255)
    elif roll < 0.9:
        del b[rng.randrange(1, len(b)) :]
    else:
        i = rng.randrange(len(b))
        b[i:i] = rng.randbytes(rng.randint(1, 16))
    return bytes(b)


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


class Requests:
    """Raw requests of each kind, made cheaply (signed bundles are made once and then mutated)."""

    def __init__(self, swarm: str, fingerprint: str, numel: int, have: tuple[int, int], seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.have = have
        self.forgers = [Forger(swarm, fingerprint, seed=bytes([i + 1]) * 32) for i in range(CONNECTIONS)]
        self.signed = [pack_bundle([f.control(listen="")]) for f in self.forgers[:4] for _ in range(8)]
        delta = torch.zeros(numel)
        delta[:: max(1, numel // 1000)] = 1e-3
        self.updates = [f.update(delta) for f in self.forgers]

    def make(self, kind: str, connection: int) -> tuple[bytes, bool]:
        """(raw request, whether the sender closes its writing side after it: a truncated body)."""
        rng = self.rng
        if kind == "mutated_bundle":
            return _post("/v1/exchange", _mutate(rng, rng.choice(self.signed))), False
        if kind == "mutated_update":  # a fresh, valid control frame, then a mutated update frame
            control = self.forgers[connection].control(have=self.have)
            return _post("/v1/exchange", pack_bundle([control, _mutate(rng, self.updates[connection])])), False
        if kind == "random_body":
            return _post("/v1/exchange", rng.randbytes(rng.randint(1, 512))), False
        if kind == "empty_body":
            return _post("/v1/exchange", b""), False
        if kind == "compressed":
            return _post("/v1/exchange", rng.randbytes(32), f"Content-Encoding: {rng.choice(['gzip', 'deflate', 'br'])}\r\n"), False
        if kind == "huge_length":
            declared = rng.choice([10**12, 2**63 - 1, 10**9])
            return f"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode() + b"x" * 16, False
        if kind == "truncated":
            return f"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n".encode() + rng.randbytes(100), True
        if kind == "malformed_http":
            return rng.choice([b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(32) + b"\r\n\r\n",
                               b"GET /v1/hello HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
                               b"POST /v1/exchange HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                               b"GET / HTTP/9.9\r\n\r\n",
                               rng.randbytes(64) + b"\r\n\r\n"]), False
        if kind == "wrong_method":
            return rng.choice([_get("/v1/exchange"), _post("/metrics", b"x"), _post("/v1/hello", b""),
                               b"DELETE /v1/state HTTP/1.1\r\nHost: x\r\n\r\n"]), False
        if kind == "unknown_path":
            return _get("/" + rng.randbytes(8).hex()), False
        if kind == "hello":
            return _get("/v1/hello?nonce=" + rng.choice([rng.randbytes(16).hex(), "zz", "", "%00" * 10])), False
        paths = {"state": "/v1/state", "status": "/v1/status", "page": "/", "metrics": "/metrics"}
        return _get(paths[kind]), False


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)  # by kind
    answers: Counter = field(default_factory=Counter)  # by status code
    by_kind: dict[str, Counter] = field(default_factory=dict)  # kind -> status codes read
    unanswered: Counter = field(default_factory=Counter)  # by kind: the connection closed first


async def _read_answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    match = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
    await reader.readexactly(int(match.group(1)) if match else 0)
    return code


KEEPS_CONNECTION = {(kind, code) for kind in ("mutated_bundle", "mutated_update", "random_body") for code in (200, 400, 503)} | {
                    ("hello", 200), ("state", 200), ("state", 429), ("status", 200), ("page", 200), ("metrics", 200)}
"""Answers after which the peer keeps the connection open (the body, if any, was read whole)."""


async def _connection(address: str, index: int, work: list[str], requests: Requests, tally: Tally) -> None:
    host, port = address.rsplit(":", 1)
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    for kind in work:
        raw, half_close = requests.make(kind, index)
        tally.sent[kind] += 1
        code = None
        for attempt in range(2):  # a kept connection the peer closed meanwhile: send again on a new one
            reused = stream is not None
            if stream is None:
                stream = await asyncio.open_connection(host, int(port), local_addr=(source_ip(200 + index), 0))
            reader, writer = stream
            try:
                writer.write(raw)
                if half_close:
                    writer.write_eof()
                await writer.drain()
                code = await asyncio.wait_for(_read_answer(reader), 30)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, OSError) as exc:
                writer.close()
                stream = None
                if reused and not half_close and isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                    continue
            break
        if code is None:
            tally.unanswered[kind] += 1
        else:
            tally.answers[code] += 1
            tally.by_kind.setdefault(kind, Counter())[code] += 1
        if stream is not None and (kind, code) not in KEEPS_CONNECTION:
            stream[1].close()
            stream = None
    if stream is not None:
        stream[1].close()


async def _fuzz(address: str, requests: Requests, n: int, seed: int) -> Tally:
    rng = random.Random(seed)
    kinds = rng.choices(list(KINDS), weights=list(KINDS.values()), k=n)
    tally = Tally()
    await asyncio.gather(*[_connection(address, i, kinds[i::CONNECTIONS], requests, tally)
                           for i in range(CONNECTIONS)])
    return tally


def _counters(base: str) -> dict[str, float]:
    text = http(base + "/metrics")[1].decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'gossip_tts_(http_responses_total\{code="\d+"\}|http_refused_total\{reason="\w+"\}|'
                     r'frames_refused_total\{reason="\w+"\}|snapshots_received_total|updates_applied_total|'
                     r'exchanges_total) (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def _grown(before: dict[str, float], after: dict[str, float], prefix: str) -> Counter:
    keys = {k for k in [*before, *after] if k.startswith(prefix)}
    return Counter({k: int(after.get(k, 0) - before.get(k, 0)) for k in keys if after.get(k, 0) != before.get(k, 0)})


def test_fuzz_every_endpoint(peers, swarm_name):
    victim = peers("victim")
    base = f"http://{victim.wait_listening()}"
    victim.wait_for(r"^step \d+ ", timeout=120)
    fingerprint, x = read_state(base, swarm_name)
    have = holding_newest(base, verify_policy(swarm_name, fingerprint), Forger(swarm_name, fingerprint))
    requests = Requests(swarm_name, fingerprint, x.numel(), have)
    step_before = last_step(victim.text())
    before = _counters(base)

    t0 = time.monotonic()
    tally = asyncio.run(asyncio.wait_for(_fuzz(victim.address, requests, REQUESTS, seed=1), SECONDS))
    elapsed = time.monotonic() - t0
    time.sleep(1.0)  # counters of the last answers are written just after they are sent
    after = _counters(base)
    sent = sum(tally.sent.values())
    print(f"fuzz: {sent} requests in {elapsed:.1f} s ({sent / elapsed:.0f}/s) over {CONNECTIONS} connections; "
          f"answers {dict(sorted(tally.answers.items()))}; unanswered {dict(tally.unanswered)}")
    for kind in sorted(tally.by_kind):
        print(f"  {kind}: sent {tally.sent[kind]}, answers {dict(tally.by_kind[kind])}")
    responses = _grown(before, after, "http_responses_total")
    refused = _grown(before, after, "http_refused_total")
    frames = _grown(before, after, "frames_refused_total")
    print(f"peer counted: responses {dict(responses)}; http refusals {dict(refused)}; frame refusals {dict(frames)}")

    # 0 crashes: alive, still training, finite loss.
    assert victim.proc.poll() is None, victim.text()[-3000:]
    victim.wait_for(rf"^step (?!{step_before} )\d+ ", timeout=60)
    loss = float(re.findall(r"^step \d+ loss (\S+)", victim.text(), re.M)[-1])
    assert math.isfinite(loss) and loss < 10, loss

    # 0 accepted forgeries: no mutated bundle answered 200, no frame of one applied.
    assert sent == REQUESTS
    assert tally.by_kind.get("mutated_bundle", Counter())[200] == 0
    assert tally.by_kind.get("random_body", Counter())[200] == 0
    for name in ("snapshots_received_total", "updates_applied_total"):
        assert after.get(name, 0) == before.get(name, 0), name
    codes = lambda kind: tally.by_kind.get(kind, Counter())  # noqa: E731
    assert after["exchanges_total"] - before["exchanges_total"] == codes("mutated_update")[200]

    # Every refusal counted. The peer's answers, code by code, are those the client read (+1: the
    # /metrics read before; + the 400s written to truncated senders that had gone).
    assert sum(tally.unanswered.values()) == tally.sent["truncated"], tally.unanswered
    expected = tally.answers + Counter({200: 1, 400: tally.sent["truncated"]})
    assert responses == Counter({f'http_responses_total{{code="{c}"}}': n for c, n in expected.items()})
    # By reason: each answer other than 200 (and each truncated body) was counted once, where its
    # refusal happened: frames_refused_total (the exchange handler), http_refused_total (the guard),
    # or only http_responses_total (aiohttp's router and parser, before any handler: 404, 405, 400).
    # A mutated update behind a valid control frame is refused inside a 200 (the exchange itself holds).
    accepted_exchanges = codes("mutated_update")[200]
    assert sum(frames.values()) == codes("mutated_bundle")[400] + codes("random_body")[400] + codes("mutated_update")[400] \
        + accepted_exchanges
    reasons = {"worker_busy": tally.answers[503], "state_rate": tally.answers[429], "compressed_body": tally.answers[415],
               "too_large": tally.answers[413], "no_body": codes("empty_body")[400],
               "body_incomplete": tally.sent["truncated"]}
    assert refused == +Counter({f'http_refused_total{{reason="{r}"}}': n for r, n in reasons.items()}), refused
    router = tally.answers[404] + tally.answers[405] + codes("malformed_http")[400]
    refusals = sum(n for code, n in tally.answers.items() if code != 200) + sum(tally.unanswered.values())
    assert refusals + accepted_exchanges == sum(frames.values()) + sum(refused.values()) + router

"""A bounded fuzz run against every endpoint of one running tiny peer.

Requests: mutated signed exchange bundles (first contacts of keys the peer never saw, one
byte or more changed, cut short or grown), mutated frames behind a valid control frame (one
spending a ticket the peer issued, when the sender holds one), random bytes, compressed
bodies, declared lengths past the limit, truncated bodies, malformed HTTP, wrong methods and
paths, and the honest GETs (/v1/hello, /v1/state, /v1/status, /metrics, /). Sent over many
keep-alive connections, each from its own source address, by one asyncio client speaking raw
HTTP/1.1 (so it can break the framing).

Holds: the peer stays up and keeps training with a finite loss; no forgery is accepted (no
mutated bundle answered 200, no frame applied: snapshots_received_total and
updates_applied_total do not move); and every refusal is counted. The relation checked: for
each status code, the peer's `http_responses_total{code}` grew by exactly the answers the
client read with that code; frames_refused_total and each http_refused_total reason grew by
exactly the refusals of their kind; and every request not answered 200, plus every frame
refused inside a 200, is in frames_refused_total, http_refused_total, or (404, 405 and the
parser's 400, before any handler runs) only in http_responses_total.

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

from protocol import pack_bundle, unpack_bundle
from protocol.limits import Limits
from protocol.messages import make_update_frame
from tests.adversarial.conftest import Forger, http, read_state, source_ip
from tests.integration.peers import last_step

pytestmark = pytest.mark.slow

REQUESTS = int(os.environ.get("GOSSIP_TTS_FUZZ_REQUESTS", "100000"))
SECONDS = float(os.environ.get("GOSSIP_TTS_FUZZ_SECONDS", "300"))
CONNECTIONS = 32
"""Concurrent keep-alive connections, each from its own source address (so no per-address cap is hit)."""
FORGERS = 4
"""Keys behind the valid control frames: fewer than the neighbour copies the victim holds (8), so
their copies stay held and their requests carry no snapshot of their own."""


KINDS = {"mutated_bundle": 37, "mutated_frame": 3, "random_body": 15, "empty_body": 3, "compressed": 5, "huge_length": 5, "truncated": 1,
         "malformed_http": 4, "wrong_method": 4, "unknown_path": 4, "hello": 10, "state": 4, "status": 1, "page": 2,
         "metrics": 0.2}
"""Kinds of request and their shares of the run."""


def _mutate(rng: random.Random, body: bytes) -> bytes:
    """1 to 4 distinct bytes changed (never to themselves), or the body cut short, or bytes
    inserted. Distinct: two changes to one byte could cancel and send the signed body intact."""
    b = bytearray(body)
    roll = rng.random()
    if roll < 0.8:
        for i in rng.sample(range(len(b)), min(len(b), rng.randint(1, 4))):
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


@dataclass(frozen=True)
class Request:
    raw: bytes
    half_close: bool = False
    """The sender closes its writing side after it (a truncated body)."""
    if_answered: tuple[int, int] = (0, 0)
    """(frames it must add to frames_refused_total, exchanges to exchanges_total) when answered 200."""


class Requests:
    """Raw requests of each kind, made cheaply (signed bundles are made once and then mutated)."""

    def __init__(self, swarm: str, fingerprint: str, x: torch.Tensor, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.forgers = [Forger(swarm, fingerprint, x, seed=bytes([i + 1]) * 32) for i in range(FORGERS)]
        self.first_contacts = [Forger(swarm, fingerprint, x).request() for _ in range(32)]
        delta = torch.zeros_like(x)
        delta[:: max(1, x.numel() // 1000)] = 1e-3
        self.updates = [make_update_frame(f.identity, swarm=swarm, fingerprint=fingerprint, seq=1, step=0,
                                          timestamp=time.time(), codec="topk:0.003+int8", delta=delta,
                                          extra={"epoch": f.node.epoch})[0] for f in self.forgers]

    def make(self, kind: str, connection: int) -> Request:
        rng = self.rng
        if kind == "mutated_bundle":  # a first contact's signed control frame, mutated
            return Request(_post("/v1/exchange", _mutate(rng, rng.choice(self.first_contacts))))
        if kind == "mutated_frame":  # a valid control frame (spending a ticket when we hold one), then a mutated frame
            forger = self.forgers[connection % FORGERS]
            ticketed = forger.ticketed
            frames = unpack_bundle(forger.request(), Limits())
            body = pack_bundle(frames + [_mutate(rng, self.updates[connection % FORGERS])])
            # Ticketed: the frame is refused, and so is any other frame of ours (the control frame binds
            # other frames than these). Not ticketed: the push is refused once (no_ticket), its frame unread.
            refused = len(frames) if ticketed else 1
            return Request(_post("/v1/exchange", body), if_answered=(refused, int(ticketed)))
        if kind == "random_body":
            return Request(_post("/v1/exchange", rng.randbytes(rng.randint(1, 512))))
        if kind == "empty_body":
            return Request(_post("/v1/exchange", b""))
        if kind == "compressed":
            encoding = rng.choice(["gzip", "deflate", "br"])
            return Request(_post("/v1/exchange", rng.randbytes(32), f"Content-Encoding: {encoding}\r\n"))
        if kind == "huge_length":
            declared = rng.choice([10**12, 2**63 - 1, 10**9])
            return Request(f"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode() + b"x" * 16)
        if kind == "truncated":
            head = b"POST /v1/exchange HTTP/1.1\r\nHost: x\r\nContent-Length: 4096\r\n\r\n"
            return Request(head + rng.randbytes(100), half_close=True)
        if kind == "malformed_http":
            return Request(rng.choice([b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + rng.randbytes(32) + b"\r\n\r\n",
                                       b"GET /v1/hello HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
                                       b"POST /v1/exchange HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                                       b"GET / HTTP/9.9\r\n\r\n",
                                       rng.randbytes(64) + b"\r\n\r\n"]))
        if kind == "wrong_method":
            return Request(rng.choice([_get("/v1/exchange"), _post("/metrics", b"x"), _post("/v1/hello", b""),
                                       b"DELETE /v1/state HTTP/1.1\r\nHost: x\r\n\r\n"]))
        if kind == "unknown_path":
            return Request(_get("/" + rng.randbytes(8).hex()))
        if kind == "hello":
            return Request(_get("/v1/hello?nonce=" + rng.choice([rng.randbytes(16).hex(), "zz", "", "%00" * 10])))
        paths = {"state": "/v1/state", "status": "/v1/status", "page": "/", "metrics": "/metrics"}
        return Request(_get(paths[kind]))


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)  # by kind
    answers: Counter = field(default_factory=Counter)  # by status code
    by_kind: dict[str, Counter] = field(default_factory=dict)  # kind -> status codes read
    unanswered: Counter = field(default_factory=Counter)  # by kind: the connection closed first
    frames_in_200: int = 0  # frames refused inside exchanges answered 200 (Request.if_answered)
    exchanges: int = 0  # exchanges the victim took (a ticket spent), of those answered 200


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    code = int(head.split(b" ", 2)[1])
    match = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
    return code, await reader.readexactly(int(match.group(1)) if match else 0)


KEEPS_CONNECTION = {(kind, code) for kind in ("mutated_bundle", "mutated_frame", "random_body") for code in (200, 400, 503)} | {
                    ("hello", 200), ("state", 200), ("state", 429), ("status", 200), ("page", 200), ("metrics", 200)}
"""Answers after which the peer keeps the connection open (the body, if any, was read whole)."""


async def _connection(address: str, index: int, work: list[str], requests: Requests, tally: Tally) -> None:
    host, port = address.rsplit(":", 1)
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    for kind in work:
        request = requests.make(kind, index)
        tally.sent[kind] += 1
        code = None
        for attempt in range(2):  # a kept connection the peer closed meanwhile: send again on a new one
            reused = stream is not None
            if stream is None:
                stream = await asyncio.open_connection(host, int(port), local_addr=(source_ip(200 + index), 0))
            reader, writer = stream
            try:
                writer.write(request.raw)
                if request.half_close:
                    writer.write_eof()
                await writer.drain()
                code, body = await asyncio.wait_for(_read_answer(reader), 30)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, OSError) as exc:
                writer.close()
                stream = None
                if reused and not request.half_close and isinstance(exc, asyncio.IncompleteReadError) and not exc.partial:
                    continue
            break
        if code is None:
            tally.unanswered[kind] += 1
        else:
            tally.answers[code] += 1
            tally.by_kind.setdefault(kind, Counter())[code] += 1
            if kind == "mutated_frame" and code == 200:
                requests.forgers[index % FORGERS].answered(body)  # its ticket for a next request
                tally.frames_in_200 += request.if_answered[0]
                tally.exchanges += request.if_answered[1]
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
    # Off: past its burst (or its work budget) each address's exchanges would be refused before the
    # decoder sees them. Benching off too: the fuzzer's addresses are refused far past their rate,
    # and a benched address's connections are reset unanswered, where this test tallies answers
    # (test_refused_flood.py floods a victim with benching on).
    victim = peers("victim", env={"GOSSIP_TTS_NET_STRANGER_EXCHANGES_PER_S": "inf",
                                  "GOSSIP_TTS_NET_ADDRESS_WORK_PER_S": "inf", "GOSSIP_TTS_NET_KEY_WORK_PER_S": "inf",
                                  "GOSSIP_TTS_NET_REFUSALS_PER_S": "inf"})
    base = f"http://{victim.wait_listening()}"
    victim.wait_for(r"^step \d+ ", timeout=120)
    fingerprint, x = read_state(base, swarm_name)
    requests = Requests(swarm_name, fingerprint, x)
    for forger in requests.forgers:  # each pushes its copy once, so that later requests carry no frame of their own
        assert forger.push(base) == 200
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
    assert after["exchanges_total"] - before["exchanges_total"] == tally.exchanges

    # Every refusal counted. The peer's answers, code by code, are those the client read (+1: the
    # /metrics read before; + the 400s written to truncated senders that had gone).
    assert sum(tally.unanswered.values()) == tally.sent["truncated"], tally.unanswered
    expected = tally.answers + Counter({200: 1, 400: tally.sent["truncated"]})
    assert responses == Counter({f'http_responses_total{{code="{c}"}}': n for c, n in expected.items()})
    # By reason: each answer other than 200 (and each truncated body) was counted once, where its
    # refusal happened: frames_refused_total (the exchange handler), http_refused_total (the guard),
    # or only http_responses_total (aiohttp's router and parser, before any handler: 404, 405, 400).
    # A mutated frame behind a valid control frame is refused inside a 200 (the exchange itself holds).
    codes = lambda kind: tally.by_kind.get(kind, Counter())  # noqa: E731
    assert sum(frames.values()) == codes("mutated_bundle")[400] + codes("random_body")[400] + tally.frames_in_200
    reasons = {"worker_busy": tally.answers[503], "state_rate": tally.answers[429], "compressed_body": tally.answers[415],
               "too_large": tally.answers[413], "no_body": codes("empty_body")[400],
               "body_incomplete": tally.sent["truncated"]}
    assert refused == +Counter({f'http_refused_total{{reason="{r}"}}': n for r, n in reasons.items()}), refused
    router = tally.answers[404] + tally.answers[405] + codes("malformed_http")[400]
    refusals = sum(n for code, n in tally.answers.items() if code != 200) + sum(tally.unanswered.values())
    assert refusals + tally.frames_in_200 == sum(frames.values()) + sum(refused.values()) + router

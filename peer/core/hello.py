"""GET /v1/hello frames: a peer's signed identity, step, listen address and known peers.

Pure functions: signing and verifying a hello is small, constant work (no tensors: a hello
naming any is refused from its header, before a payload byte is decompressed), so a driver
may do it wherever it is cheapest. A hello is bound to the asker by the asker's
fresh nonce, which it must echo, so a recorded hello is never taken for a new one; it
changes no state but the asker's neighbour table (exchanges are bound by tickets instead,
`protocol.replay`). The sequence number comes from the caller (`Session.next_hello_seq`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from peer.core.addresses import PeerInfo, valid_listen
from protocol import FrameKind, FrameRefused, Identity, Limits, RefusalReason, VerifyPolicy, decode_frame
from protocol.messages import make_control_frame

MAX_HELLO_PEERS = 64
"""Entries read from another peer's hello; the rest are ignored."""
HELLO_PAYLOAD_BYTES = 1024
"""What a hello's payload may decompress to: an empty container is 16 bytes."""


@dataclass(frozen=True)
class Hello:
    """A verified hello: who signed it and what it claims."""

    peer_id: str
    step: int
    listen: str
    peers: tuple[PeerInfo, ...]


def valid_nonce(nonce: str) -> bool:
    """A nonce a hello may echo: 8 to 64 lowercase hex characters."""
    return 8 <= len(nonce) <= 64 and all(c in "0123456789abcdef" for c in nonce)


def make_hello(identity: Identity, *, swarm: str, fingerprint: str, seq: int, step: int, now: float,
               listen: str, peers: list[PeerInfo], limits: Limits, nonce: str = "") -> bytes:
    """Sign our hello naming `peers` (each as {"id", "address"}) and echoing the asker's `nonce`."""
    entries = [{"id": p.peer_id, "address": p.address} for p in peers]
    extra = {"listen": listen, "peers": entries, "nonce": nonce if valid_nonce(nonce) else ""}
    return make_control_frame(identity, kind=FrameKind.HELLO, swarm=swarm, fingerprint=fingerprint, seq=seq,
                              step=step, timestamp=now, extra=extra, limits=limits)


def hello_policy(policy: VerifyPolicy) -> VerifyPolicy:
    """`policy` narrowed to hellos: no tensor is admitted, so one named in the header is refused
    before the payload is read, and the payload itself may expand to a few bytes only."""
    payload = min(policy.limits.max_decompressed_bytes, HELLO_PAYLOAD_BYTES)
    limits = replace(policy.limits, max_decompressed_bytes=payload)
    return replace(policy, model_spec={}, limits=limits)


def read_hello(data: bytes, policy: VerifyPolicy, now: float, nonce: str) -> Hello:
    """Verify a hello signed over our fresh `nonce` (so a recorded hello cannot be served again);
    malformed peer entries are skipped, not fatal (they are only hints)."""
    try:
        h = decode_frame(data, hello_policy(policy), now=now).header
    except FrameRefused as exc:
        if exc.reason is RefusalReason.SHAPE_MISMATCH:  # the hello policy admits no tensor at all
            detail = f"a hello carries no tensors; this one names {exc.detail}"
            raise FrameRefused(RefusalReason.BAD_HEADER, detail) from None
        raise
    if h.kind != FrameKind.HELLO:
        raise FrameRefused(RefusalReason.BAD_HEADER, f"expected a hello frame, got {h.kind.value}")
    if h.extra.get("nonce") != nonce:
        raise FrameRefused(RefusalReason.BAD_HEADER, "the hello does not echo our nonce (recorded or relayed)")
    peers = []
    raw = h.extra.get("peers", [])
    for entry in raw[:MAX_HELLO_PEERS] if isinstance(raw, list) else []:
        try:
            peers.append(PeerInfo(peer_id=entry.get("id", ""), address=entry["address"], source="exchange"))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    listen = h.extra.get("listen", "")
    if not valid_listen(listen):
        raise FrameRefused(RefusalReason.BAD_HEADER, "the hello's listen is not \"\" or HOST:PORT")
    return Hello(h.sender.hex(), h.step, listen, tuple(peers))

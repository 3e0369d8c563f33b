"""A hello carries no tensors: one that names any is refused from its header, before a payload
byte is decompressed (a k=1 `delta` would otherwise expand to the whole model on the event loop)."""

from __future__ import annotations

import pytest
import torch

import protocol.frame
from peer.core.addresses import PeerInfo
from peer.core.hello import make_hello, read_hello
from peer.core.node import limits_for
from protocol import (FrameHeader, FrameKind, FrameRefused, Identity, Limits, TensorSpec, VerifyPolicy, codec_seed,
                      encode_frame, flat_model_spec, model_fingerprint, parse_codec)

N = 1 << 16
NOW = 1_000_000.0
NONCE = "00112233aabbccdd"
FINGERPRINT = model_fingerprint({"w": ((N,), "float32")})
POLICY = VerifyPolicy(swarm="s", fingerprint=FINGERPRINT, limits=limits_for(N), model_spec=flat_model_spec(N))
ME = Identity.generate(b"\x05" * 32)


def hello_with_delta() -> bytes:
    """A signed hello whose header names one `delta` tensor of the model's size, one entry kept."""
    codec = parse_codec("topk:0.000000001")
    delta = torch.zeros(N)
    delta[7] = 1.0
    packed, _ = codec.compress(delta, codec_seed(ME.public_key, 1, "delta"))
    header = FrameHeader(swarm="s", fingerprint=FINGERPRINT, sender=ME.public_key, kind=FrameKind.HELLO, seq=1, step=0,
                         timestamp=NOW, codec=codec.spec, tensors=(TensorSpec("delta", (N,), "float32"),),
                         extra={"listen": "", "peers": [], "nonce": NONCE})
    return encode_frame(ME, header, {f"delta/{k}": v for k, v in packed.items()})


def count_payloads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    unpack = protocol.frame.unpack_payload

    def counted(*args, **kwargs):
        calls.append(1)
        return unpack(*args, **kwargs)

    monkeypatch.setattr(protocol.frame, "unpack_payload", counted)
    return calls


def test_a_hello_with_a_tensor_is_refused_before_its_payload_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    data = hello_with_delta()
    assert len(data) < 1024  # a few hundred bytes that would decode to the whole model
    payloads = count_payloads(monkeypatch)
    with pytest.raises(FrameRefused) as err:
        read_hello(data, POLICY, NOW, NONCE)
    assert err.value.reason.value == "bad_header" and "no tensors" in err.value.detail
    assert payloads == []


def test_an_honest_hello_is_read() -> None:
    peers = [PeerInfo(peer_id="ab" * 32, address="10.0.0.2:7000", source="exchange")]
    data = make_hello(ME, swarm="s", fingerprint=FINGERPRINT, seq=3, step=12, now=NOW, listen="10.0.0.1:7000",
                      peers=peers, limits=Limits(), nonce=NONCE)
    hello = read_hello(data, POLICY, NOW, NONCE)
    assert (hello.peer_id, hello.step, hello.listen) == (ME.peer_id, 12, "10.0.0.1:7000")
    assert [p.address for p in hello.peers] == ["10.0.0.2:7000"]

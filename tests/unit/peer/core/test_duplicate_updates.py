"""An update frame that arrives again is known without decoding it (`Neighbour.holds`).

It happens every publish period: our pull brings a partner's newest update, and the partner's
own request, built from what our older control frame said we held, pushes the same frame again.
Decoding it (a signature check and a model-sized expansion) only to drop it was a sixth of the
node worker's time (docs/benchmarks.md#protocol-cpu-per-publish-period). It must be skipped,
counted as before, and change nothing else."""

from __future__ import annotations

import torch

import peer.core.node as node_module
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.metrics import Metrics
from protocol import Identity
from tests.unit.exchange_helpers import exchange, push

NOW = 1.7e9
SPEC = {"w": ((512,), "float32")}


def _node(seed: int) -> GossipNode:
    cfg = GossipConfig(swarm="dup", compression="topk:0.1+int8")
    return GossipNode(cfg, Identity.generate(bytes([seed]) * 32), SPEC, torch.zeros(512), now=NOW, metrics=Metrics())


def _opened(monkeypatch) -> list[bytes]:
    """Every frame the node decodes from now on."""
    opened: list[bytes] = []
    real = node_module.open_frame

    def counting(raw, *args, **kwargs):
        opened.append(raw)
        return real(raw, *args, **kwargs)

    monkeypatch.setattr(node_module, "open_frame", counting)
    return opened


def _pushed_again(monkeypatch) -> tuple[GossipNode, GossipNode, list[bytes], torch.Tensor]:
    """(a, b, the frames b decoded, b's copy of a before): b pulls a's newest update, then a's
    request pushes it again."""
    a, b = _node(1), _node(2)
    push(a, b, NOW)  # b holds a's snapshot
    push(b, a, NOW)  # a holds b's, and b holds a ticket of a's
    a.publish(torch.randn(512, generator=torch.Generator().manual_seed(0)), 1, NOW + 1)
    exchange(b, a, NOW + 2)  # b's pull brings a's update 1
    copy = b.neighbours[a.identity.public_key].copy.x_hat.clone()
    opened = _opened(monkeypatch)
    exchange(a, b, NOW + 3)  # a's request pushes update 1 again: b's acknowledgement came after
    return a, b, opened, copy


def test_an_update_pushed_again_is_counted_a_duplicate_and_not_decoded(monkeypatch) -> None:
    a, b, opened, copy = _pushed_again(monkeypatch)
    assert b.metrics.get("updates_duplicate_total") == 1
    assert opened == []  # nothing decoded: the frame was known by its signature
    assert torch.equal(b.neighbours[a.identity.public_key].copy.x_hat, copy)


def test_a_new_run_of_the_neighbour_forgets_what_it_held(monkeypatch) -> None:
    a, b = _node(1), _node(2)
    push(a, b, NOW)
    push(b, a, NOW)
    a.publish(torch.randn(512, generator=torch.Generator().manual_seed(0)), 1, NOW + 1)
    exchange(b, a, NOW + 2)
    n = b.neighbours[a.identity.public_key]
    assert len(n.applied) == 1
    n.reset_copy(n.epoch + 1)
    assert len(n.applied) == 0 and n.copy.x_hat is None

"""At a long period the codec sends the same bytes per step as the configured one at a publish every step."""

import pytest
import torch

from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.period_codec import codec_for_period
from peer.metrics import Metrics
from protocol import Identity, decode_frame


@pytest.mark.parametrize("spec, period, want", [
    ("topk:0.1+int8", 1, "topk:0.1+int8"),
    ("topk:0.1+int8", 2, "topk:0.2+int8"),
    ("topk:0.1+int8", 7, "topk:0.4+int8"),     # the power of two below: 4
    ("topk:0.1+int8", 8, "topk:0.8+int8"),
    ("topk:0.1+int8", 16, "int8"),             # 1.6 of the entries: the value codec itself
    ("topk:0.1+int8", 300, "int8"),
    ("topk:0.01", 64, "topk:0.64"),            # no value codec named: fp16 values
    ("topk:0.01", 128, "fp16"),
    ("randk:0.05+int8", 4, "randk:0.2+int8"),
    ("int8", 64, "int8"),                      # dense codecs as they are
    ("fp32", 64, "fp32"),
])
def test_the_fraction_grows_with_the_period(spec, period, want):
    assert codec_for_period(spec, period) == want


def test_the_mixing_rate_follows_the_codec_sent():
    cfg = GossipConfig(swarm="t", compression="topk:0.1+int8")
    assert [cfg.rate_at_period(h) for h in (1, 2, 4, 64)] == pytest.approx([1.0, 2.0, 2.5, 2.5])  # γ 0.2 → 0.4 → 0.5
    assert GossipConfig(swarm="t", compression="topk:0.1+int8", per_period=False).rate_at_period(64) == 1.0
    assert GossipConfig(swarm="t", staleness="pipemare:K=2000,gamma=0.3").rate_at_period(64) == 1.0


def test_a_node_publishing_every_16_steps_sends_dense_frames():
    """`gossip_every` 1, but the worker lets us publish every 16 steps: from then on the frames go
    int8, the setting's top-10% + int8 at a publish every step; the control keeps top-10%."""
    def codecs(per_period: bool) -> list[str]:
        cfg = GossipConfig(swarm="t", compression="topk:0.1+int8", per_period=per_period)
        node = GossipNode(cfg, Identity.generate(bytes([1]) * 32), {"w": ((64,), "float32")}, torch.zeros(64),
                          now=1.0, metrics=Metrics())
        sent = []
        for k in range(0, 80, 16):
            node.publish(torch.randn(64), k, 2.0 + k)
            sent.append(decode_frame(node.outbox.since(0)[-1], node.policy, 2.0 + k).header.codec)
        return sent
    assert codecs(True) == ["topk:0.1+int8", "int8", "int8", "int8", "int8"]
    assert codecs(False) == ["topk:0.1+int8"] * 5


@pytest.mark.parametrize("period, pull", [(1, 0.2), (2, 0.4), (64, 0.5)])
def test_the_mixer_pulls_at_the_rate_of_the_codec_sent(period, pull):
    """One pull, a fresh copy at 1 (our public copy at 0): top-10% pulls γ = 0.2 of the
    difference at a publish every step, the dense rate 0.5 at a long period."""
    from peer.core.mixer import Mixer
    from peer.core.view import CopyView, MixView

    mixer = Mixer(GossipConfig(swarm="t", compression="topk:0.1+int8", staleness="constant", clip=False), 1)
    view = MixView(torch.zeros(4), (CopyView(b"\x01" * 32, 1, torch.ones(4), 10.0, pulled=1),), 0.0, 9.0)
    mixed, _ = mixer.mix(torch.zeros(4), view, 5, 11.0, period_steps=period)
    assert mixed.tolist() == pytest.approx([pull] * 4)


def test_a_frame_never_outgrows_a_quarter_of_the_outbox():
    """At 800M parameters a dense update is 800 MB: the fraction stays at the largest multiple
    whose frame fits 64 MiB, and never below the configured one."""
    cap = GossipConfig(swarm="t").max_period_frame_bytes
    assert cap == 64 * 2**20
    assert codec_for_period("topk:0.1+int8", 64, 10_000_000, cap) == "int8"            # 10 MB
    assert codec_for_period("topk:0.1+int8", 64, 100_000_000, cap) == "topk:0.4+int8"  # 60 MB of 64 MiB
    assert codec_for_period("topk:0.1+int8", 64, 800_000_000, cap) == "topk:0.1+int8"  # 120 MB: as configured
    assert GossipConfig(swarm="t").rate_at_period(64, 800_000_000) == 1.0


def test_a_sparse_codec_added_to_the_table_grows_with_the_period_and_sets_the_mixing_rate(monkeypatch):
    from protocol import codec_table
    from protocol.codec_table import CodecKind

    def build(arg, values):
        from protocol.codecs_sparse import SparseCodec

        return SparseCodec("topk", arg, values)

    monkeypatch.setattr(codec_table, "KINDS", list(codec_table.KINDS))
    codec_table.register(CodecKind("halfk", "halfk:F[+V]", "a test codec", build, sparse=True))
    # its builder makes top-k codecs, so the grown spec is top-k's: the period read the table
    assert codec_for_period("halfk:0.05+int8", 4) == "topk:0.2+int8"
    assert [GossipConfig(swarm="t", compression=f"halfk:{f}").resolved_staleness.rsplit(",", 1)[1]
            for f in ("0.05", "0.001", "1")] == ["gamma=0.1", "gamma=0.02", "gamma=0.5"]

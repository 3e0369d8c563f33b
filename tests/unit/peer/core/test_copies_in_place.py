"""The node adds updates into its copies in place (a new copy at every ingest and publish was one
more half of the model alive at each), and writes a copy only while no mix can read it: the view
it publishes first marks the copy busy, the mixer leaves busy copies alone, and `ViewSlot.settle`
waits out a mix that read an older view (peer/core/view.py)."""

from __future__ import annotations

import threading
import time

import torch

from peer.core.gossip_config import GossipConfig
from peer.core.mixer import Mixer
from peer.core.node import GossipNode
from peer.core.view import CopyView, MixView, ViewSlot
from protocol import Identity
from tests.unit.exchange_helpers import push
from tests.unit.peer.core.test_copy_precision import NOW, walk


class Watching(GossipNode):
    """Records the view the training thread would see while each frame is applied."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[MixView] = []

    def _apply(self, n, frame, signature, now) -> bool:
        self.seen.append(self.view_slot.current)
        return super()._apply(n, frame, signature, now)


def node(i: int, x: torch.Tensor, cls: type[GossipNode] = GossipNode, **kw) -> GossipNode:
    cfg = GossipConfig(swarm="t", staleness="constant", partner_steps=0.0, compression="topk:0.1+int8")
    return cls(cfg, Identity.generate(bytes([i + 1]) * 32), {"w": ((x.numel(),), "float32")}, x, now=NOW, **kw)


def test_updates_are_added_into_the_copies_the_node_holds_while_their_views_mark_them_busy() -> None:
    xs = walk(6, seed=7)
    sender, receiver = node(0, xs[0]), node(1, xs[0], Watching)
    sender.publish(xs[1], 1, NOW + 1)
    push(sender, receiver, NOW + 1)
    key = sender.identity.public_key
    held, public = receiver.neighbours[key].copy.x_hat, sender.public.x_hat
    receiver.seen.clear()
    for step, x in enumerate(xs[2:], start=2):
        sender.publish(x, step, NOW + step)
        push(sender, receiver, NOW + step)
    assert receiver.neighbours[key].copy.x_hat is held and sender.public.x_hat is public  # written in place
    assert torch.equal(held.view(torch.int16), public.view(torch.int16))  # and still the sender's copy bit for bit
    assert receiver.seen and all(key in v.busy for v in receiver.seen)  # no mix could read it meanwhile
    after = receiver.view_slot.current
    assert not after.busy and not after.public_busy and after.copies[0].distance is not None


def test_the_public_copy_is_busy_while_a_publish_writes_it() -> None:
    xs = walk(3, seed=8)
    seen: list[MixView] = []

    class Gate:
        """Entered by `ViewSlot.settle` once the view marking what is written is current."""

        def __enter__(self) -> None:
            seen.append(n.view_slot.current)

        def __exit__(self, *exc: object) -> None:
            return None

    n = node(0, xs[0], view_gate=Gate())
    version = n.view_slot.current.public_version
    n.publish(xs[1], 1, NOW + 1)
    assert [v.public_busy for v in seen] == [True]
    assert not n.view_slot.current.public_busy and n.view_slot.current.public_version != version


def test_the_mixer_leaves_a_busy_copy_and_everything_under_a_busy_public_copy_alone() -> None:
    cfg = GossipConfig(swarm="t", staleness="constant,gamma=0.5", clip=False)
    public, theirs = torch.zeros(4), torch.ones(4)
    copy = CopyView(b"a" * 32, 1, theirs, 0.0, pulled=1, distance=2.0)
    for busy, public_busy, mixed in ((frozenset(), False, True), (frozenset({copy.key}), False, False),
                                     (frozenset(), True, False)):
        view = MixView(public, (copy,), 0.0, None, (1.0,), busy=busy, public_busy=public_busy)
        mixer = Mixer(cfg)
        assert mixer.has_news(view) is mixed
        assert (mixer.change(view, k=1, now=0.0)[1].mixed == 1) is mixed


def test_settle_waits_for_a_mix_under_way_and_a_mix_starting_later_reads_the_settled_view() -> None:
    old, new = MixView(torch.zeros(2)), MixView(torch.zeros(2), busy=frozenset({b"k"}))
    slot = ViewSlot(old, threading.Lock())
    reading, release, order = threading.Event(), threading.Event(), []

    def mix() -> None:
        with slot.reading() as view:
            order.append(("read", view is old))
            reading.set()
            release.wait(5)
            order.append(("mixed", None))

    reader = threading.Thread(target=mix)
    reader.start()
    reading.wait(5)
    writer = threading.Thread(target=lambda: (slot.settle(new), order.append(("settled", None))))
    writer.start()
    time.sleep(0.2)
    assert ("settled", None) not in order  # the writer waits for the mix that read the old view
    release.set()
    reader.join(5)
    writer.join(5)
    assert order == [("read", True), ("mixed", None), ("settled", None)]
    with slot.reading() as view:
        assert view is new

"""TicketBook: single use, the ring's exact edge, holders, epochs; fixed memory under any load."""

from __future__ import annotations

import pytest

from protocol import FrameHeader, FrameKind, FrameRefused, RefusalReason, TicketBook, epoch_from, next_epoch
from protocol.replay import MAX_EPOCH

ME, S1, S2 = b"\x00" * 32, b"\x01" * 32, b"\x02" * 32
EPOCH = 77


def frame_from(sender: bytes, ticket: int, *, to: bytes = ME, to_epoch: int = EPOCH) -> FrameHeader:
    return FrameHeader(swarm="s", fingerprint="f", sender=sender, kind=FrameKind.ACK, seq=1, step=0,
                       timestamp=0.0, codec="identity", to=to, to_epoch=to_epoch, ticket=ticket)


def test_a_ticket_is_spent_once_and_only_by_its_holder() -> None:
    book = TicketBook(ME, EPOCH, window=8)
    t = book.issue(S1)
    assert t == 1 and book.issued == 1
    assert book.refusal(frame_from(S2, t)) is RefusalReason.STALE_TICKET  # issued to S1
    book.spend(frame_from(S1, t))
    assert book.refusal(frame_from(S1, t)) is RefusalReason.STALE_TICKET  # spent
    with pytest.raises(FrameRefused) as err:
        book.spend(frame_from(S1, t))
    assert err.value.reason is RefusalReason.STALE_TICKET
    anyone = book.issue(None)
    book.spend(frame_from(S2, anyone))  # a ticket issued to nobody in particular


def test_the_ring_keeps_exactly_window_tickets() -> None:
    book = TicketBook(ME, EPOCH, window=8)
    tickets = [book.issue(S1) for _ in range(9)]  # the 9th overwrites the 1st's slot
    assert book.refusal(frame_from(S1, tickets[0])) is RefusalReason.STALE_TICKET
    assert all(book.refusal(frame_from(S1, t)) is None for t in tickets[1:])  # the 8 newest are live
    assert book.refusal(frame_from(S1, 10)) is RefusalReason.STALE_TICKET  # never issued
    assert book.refusal(frame_from(S1, 2 + 8 * 1000)) is RefusalReason.STALE_TICKET  # same slot, not issued


def test_memory_is_fixed_whatever_the_number_of_senders() -> None:
    book = TicketBook(ME, EPOCH, window=16)
    size = (len(book._tickets), len(book._holders))
    for i in range(5000):
        book.issue(i.to_bytes(32, "big"))
    assert (len(book._tickets), len(book._holders)) == size == (16, 16)


def test_receiver_and_epoch_are_checked_before_the_ring() -> None:
    book = TicketBook(ME, EPOCH, window=8)
    t = book.issue(S1)
    assert book.refusal(frame_from(S1, t, to=S2)) is RefusalReason.WRONG_RECEIVER
    assert book.refusal(frame_from(S1, t, to=b"")) is RefusalReason.NO_TICKET
    assert book.refusal(frame_from(S1, 0)) is RefusalReason.NO_TICKET
    assert book.refusal(frame_from(S1, t, to_epoch=EPOCH + 1)) is RefusalReason.STALE_EPOCH
    book.renew(next_epoch(EPOCH))
    assert book.refusal(frame_from(S1, t)) is RefusalReason.STALE_EPOCH  # issued in the old epoch
    assert book.refusal(frame_from(S1, t, to_epoch=EPOCH + 1)) is None


def test_epochs() -> None:
    assert epoch_from(b"\x00" * 8) == epoch_from(b"\x00" * 8) != epoch_from(b"\x00" * 7 + b"\x01")
    assert all(1 <= epoch_from(bytes([i]) * 16) <= MAX_EPOCH for i in range(50))
    assert next_epoch(5) == 6 and next_epoch(MAX_EPOCH) == 1
    with pytest.raises(ValueError):
        epoch_from(b"short")
    for bad in (0, MAX_EPOCH + 1, True, 1.0):
        with pytest.raises(ValueError):
            TicketBook(ME, bad)
    with pytest.raises(ValueError):
        TicketBook(ME, 5).renew(5)
    for owner, window in ((b"x", 8), (ME, 0)):
        with pytest.raises(ValueError):
            TicketBook(owner, EPOCH, window=window)

"""A peer's HTTP answer is named by what it meant (peer/net/errors.py): a refused join says the
peer was busy, not only `HTTP 429`."""

from __future__ import annotations

from peer.net.errors import describe_status


def test_busy_answers_say_so_and_unknown_ones_keep_their_number():
    assert describe_status(429).startswith("HTTP 429, busy") and "asked again later" in describe_status(429)
    assert describe_status(503).startswith("HTTP 503, busy")
    assert "trusted-keys" in describe_status(403)
    assert describe_status(418) == "HTTP 418"

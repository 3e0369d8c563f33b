"""A torchrun rank is dispatched in one place, `gossip-tts peer`'s start-up: a non-zero rank
follows rank 0 there and never enters the peer app, which is rank 0's (or a lone peer's)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gossip_tts.apps import group_app, peer_app
from gossip_tts.cli import logs
from gossip_tts.cli.main import main


def test_a_follower_rank_is_dispatched_by_the_cli_alone(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    followed: list[object] = []

    def leave(status: int = 0) -> None:
        raise SystemExit(status)

    def not_for_followers(*args: object, **kwargs: object) -> None:
        pytest.fail("a follower rank entered peer_app.run, rank 0's")

    monkeypatch.setattr(group_app, "run_follower", lambda cfg: followed.append(cfg) or 0)
    monkeypatch.setattr(group_app, "leave", leave)
    monkeypatch.setattr(peer_app, "run", not_for_followers)
    try:
        result = CliRunner().invoke(main, ["peer", "--checkpoint-dir", "none", "--gossip-every", "3"])
    finally:
        logs.reset()
    assert result.exit_code == 0, result.output
    assert len(followed) == 1 and followed[0].gossip.gossip_every == 3

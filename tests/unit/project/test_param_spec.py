"""A model's parameter spec (names, shapes, dtypes) has one type, `protocol.header.ParamSpec`: the
protocol hashes it into the fingerprint, and trainers, the node and the limits name that type."""

from __future__ import annotations

import re

from tests.paths import REPO

SPELLED_OUT = re.compile(r"dict\[str, tuple\[tuple\[int, \.\.\.\], str\]\]")


def test_the_parameter_spec_type_is_spelled_out_once():
    from peer.trainer import ParamSpec
    from protocol.header import ParamSpec as defined

    assert ParamSpec is defined
    found = {str(path.relative_to(REPO)) for package in ("protocol", "peer", "async_opt", "simnet", "gossip_tts")
             for path in (REPO / package).rglob("*.py") if SPELLED_OUT.search(path.read_text())}
    assert found == {"protocol/header.py"}, sorted(found)

"""Log lines: timestamped on the console, warnings only with --quiet, one JSON object per line."""

import io
import json
import logging
import re

import pytest

from gossip_tts.cli import logs


@pytest.fixture(autouse=True)
def restore_logging():
    yield
    logs.reset()


def test_console_lines_carry_a_timestamp_and_quiet_keeps_only_warnings(tmp_path):
    out = io.StringIO()
    logs.configure(stream=out)
    logs.emitter()("listening on http://127.0.0.1:7000 peer_id=ab")
    logging.getLogger("peer.local.loop").warning("checkpoint write failed")
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} listening on http://127\.0\.0\.1:7000 peer_id=ab", lines[0])
    assert re.fullmatch(r"\S+ \S+ WARNING checkpoint write failed", lines[1])
    quiet = io.StringIO()
    logs.configure(quiet=True, stream=quiet)  # replaces the first handler, does not add a second
    logs.emitter()("step 5 loss 1.0")
    logging.getLogger("gossip_tts").error("no neighbours")
    assert out.getvalue().count("\n") == 2
    assert quiet.getvalue().count("\n") == 1 and "ERROR no neighbours" in quiet.getvalue()


def test_json_file_gets_one_object_per_line_even_when_quiet(tmp_path):
    path = tmp_path / "logs" / "peer.jsonl"
    logs.configure(quiet=True, json_file=path, stream=io.StringIO())
    logs.emitter()('step 5 loss 1.0 "quoted"\nsecond line')
    logging.getLogger("peer.net.discovery").warning("mDNS is blocked")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["message"] for r in rows] == ['step 5 loss 1.0 "quoted"\nsecond line', "mDNS is blocked"]
    assert [r["level"] for r in rows] == ["info", "warning"] and rows[1]["logger"] == "peer.net.discovery"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rows[0]["time"])


def test_a_python_warning_is_one_warning_line_without_file_and_source():
    import warnings

    original = warnings.showwarning
    out = io.StringIO()
    logs.configure(stream=out)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("identity file 'k' is readable by other users; run `chmod 600 k`", stacklevel=1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and re.fullmatch(r"\S+ \S+ WARNING identity file 'k' is readable .*chmod 600 k`", lines[0]), lines
    logs.reset()
    assert warnings.showwarning is original  # after reset, warnings are Python's own again

"""One entry in the codec table is all a new codec needs: the parser, the grammar every error and
help names, the kept fraction the mixing rate follows and docs/wire.md all read it."""

from fractions import Fraction
from pathlib import Path

import pytest

from protocol import codec_table, parse_codec
from protocol.codec_table import CodecKind, grammar, kept_fraction, markdown_table, register

ROOT = Path(__file__).resolve().parents[3]


def _halfk(arg, values):
    from protocol.codecs_sparse import SparseCodec

    return SparseCodec("topk", arg, values)


HALFK = CodecKind("halfk", "halfk:F[+V]", "a codec registered by this test", _halfk, sparse=True)


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(codec_table, "KINDS", list(codec_table.KINDS))


def test_a_registered_codec_is_parsed_listed_and_weighed(table):
    register(HALFK)
    codec = parse_codec("halfk:0.05+int8")
    assert (codec.kind, codec.fraction, codec.values.spec) == ("topk", Fraction(1, 20), "int8")
    assert grammar().endswith("randk:F[+V], halfk:F[+V]")
    with pytest.raises(ValueError, match=r"halfk:F\[\+V\]"):
        parse_codec("int4")
    assert kept_fraction("halfk:0.05") == Fraction(1, 20)
    assert "| `halfk:F[+V]` | a codec registered by this test |" in markdown_table()
    with pytest.raises(ValueError, match="only topk and randk and halfk take a value codec"):
        parse_codec("fp16+int8")


def test_a_name_is_registered_once(table):
    with pytest.raises(ValueError, match="'fp32' is already registered"):
        register(CodecKind("f32", "f32", "", _halfk, aliases=("fp32",)))


def test_the_grammar_names_every_form():
    assert grammar() == "identity, fp32, fp16, bf16, int8[:block=N], topk:F[+V], randk:F[+V]"
    assert [kept_fraction(spec) for spec in ("int8:block=64", "fp32", "topk:0.1+int8", "randk:0.25")] == [
        1, 1, Fraction(1, 10), Fraction(1, 4)]


def test_docs_wire_shows_the_table():
    assert markdown_table() in (ROOT / "docs" / "wire.md").read_text(), \
        "run `python -m protocol.codec_table` and put its table in docs/wire.md"


REGISTERED_BEFORE_THE_CLI = """
import sys
from click.testing import CliRunner
from protocol.codec_table import CodecKind, register
register(CodecKind("halfk", "halfk:F[+V]", "a test codec", lambda arg, values: None, sparse=True))
from gossip_tts.cli.main import main
result = CliRunner().invoke(main, ["peer", "--help"], terminal_width=400)
assert result.exit_code == 0, result.output
print("torch" in sys.modules, "randk:F[+V], halfk:F[+V];" in " ".join(result.output.split()))
from peer.core.gossip_config import default_gamma
print(default_gamma("halfk:0.05"))
"""


def test_a_codec_registered_in_one_place_is_in_the_peer_help_and_sets_the_mixing_rate():
    """The issue's check: one registration, seen by `gossip-tts peer --help` (which still loads no
    torch), the grammar and `default_gamma`."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", REGISTERED_BEFORE_THE_CLI], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "0.1"]

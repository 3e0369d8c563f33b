"""--trusted-keys: the allow-list of a private swarm, read strictly."""

import pytest

from peer.net.trust import load_trusted_keys


def test_keys_comments_and_blank_lines(tmp_path):
    f = tmp_path / "keys.txt"
    f.write_text("# our swarm\n" + "ab" * 32 + "  # alice\n\n" + "CD" * 32 + "\n")
    assert load_trusted_keys(f) == {bytes.fromhex("ab" * 32), bytes.fromhex("cd" * 32)}


@pytest.mark.parametrize("text,match", [("nonsense\n", r"keys.txt:1: 'nonsense' is not a public key"),
                                        ("# only a comment\n", "names no key")])
def test_bad_files_fail_naming_the_line(tmp_path, text, match):
    f = tmp_path / "keys.txt"
    f.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_trusted_keys(f)
    with pytest.raises(ValueError, match="cannot read"):
        load_trusted_keys(tmp_path / "missing.txt")

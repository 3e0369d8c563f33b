"""Identities: deterministic keys, signatures, and the key file."""

from __future__ import annotations

import json
import os
import stat
import warnings

import pytest

from gossip_tts.cli.keygen import write_key_file
from protocol import Identity, verify_signature

SEED = bytes(range(32))


def test_seeded_identity_is_deterministic_and_matches_rfc8032() -> None:
    # RFC 8032 §7.1 test 1: secret key 9d61b19d..., public key d75a9801...
    rfc = Identity.generate(bytes.fromhex(
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))
    assert rfc.peer_id == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert rfc.sign(b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b")
    assert Identity.generate(SEED).public_key == Identity.generate(SEED).public_key
    assert Identity.generate().public_key != Identity.generate().public_key
    assert len(rfc.public_key) == 32 and rfc.peer_id == rfc.public_key.hex()


@pytest.mark.parametrize("seed", [b"", bytes(31), bytes(33), "0" * 32])
def test_seed_must_be_32_bytes(seed) -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Identity.generate(seed)


def test_sign_and_verify() -> None:
    me, other = Identity.generate(SEED), Identity.generate(bytes(32))
    sig = me.sign(b"hello")
    assert len(sig) == 64
    assert verify_signature(me.public_key, b"hello", sig)
    assert not verify_signature(me.public_key, b"hellp", sig)
    assert not verify_signature(other.public_key, b"hello", sig)
    assert not verify_signature(me.public_key, b"hello", sig[:-1] + bytes([sig[-1] ^ 1]))
    assert not verify_signature(me.public_key[:31], b"hello", sig)
    assert not verify_signature(me.public_key, b"hello", sig[:63])
    assert not verify_signature(bytes(32), b"hello", sig)  # a small-order point
    assert me.peer_id[:16] in repr(me) and SEED.hex() not in repr(me)


def test_save_and_load(tmp_path) -> None:
    me = Identity.generate(SEED)
    path = tmp_path / "peer.key"
    me.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert Identity.load(path).public_key == me.public_key
    assert os.listdir(tmp_path) == ["peer.key"]  # no temp file left behind
    with pytest.raises(FileExistsError):
        Identity.generate().save(path)
    assert Identity.load(path).public_key == me.public_key
    other = Identity.generate(bytes(32))
    other.save(path, overwrite=True)
    assert Identity.load(path).public_key == other.public_key


def test_load_missing_file_says_how_to_make_one(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="gossip-tts keygen --out"):
        Identity.load(tmp_path / "nope.key")


@pytest.mark.parametrize("content,fragment", [
    (b"", "malformed"), (b"\xff\xfe", "malformed"), (b"[]", "kind"),
    (json.dumps({"kind": "other"}).encode(), "kind"),
    (json.dumps({"kind": "gossip-tts/ed25519", "seed": "00"}).encode(), "32 bytes"),
    (json.dumps({"kind": "gossip-tts/ed25519", "seed": "zz" * 32}).encode(), "malformed"),
    (json.dumps({"kind": "gossip-tts/ed25519", "seed": "00" * 32, "peer_id": "ab"}).encode(), "peer_id"),
    (b"x" * 5000, "too large"),
])
def test_load_malformed_file(tmp_path, content: bytes, fragment: str) -> None:
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(ValueError, match=fragment):
        Identity.load(path)


def test_load_warns_when_others_can_read(tmp_path) -> None:
    path = tmp_path / "peer.key"
    Identity.generate(SEED).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Identity.load(path)  # 0o600: silent
    path.chmod(0o644)
    with pytest.warns(UserWarning, match="chmod 600"):
        Identity.load(path)


def test_load_refuses_a_directory(tmp_path) -> None:
    with pytest.raises(ValueError, match="regular file"):
        Identity.load(tmp_path)


def test_write_key_file(tmp_path) -> None:
    path = tmp_path / "k.key"
    peer_id = write_key_file(path)
    assert Identity.load(path).peer_id == peer_id and len(peer_id) == 64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_key_file(path)

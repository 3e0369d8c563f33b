"""A peer's Ed25519 identity: its public key is its peer id.

Signatures use pynacl (libsodium), whose verification is strict (canonical S, no
small-order keys), so a signature cannot be altered into another valid one.
The key file is a small JSON document holding the 32-byte seed in hex; it is never pickled.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

import nacl.exceptions
import nacl.signing

__all__ = ["Identity", "verify_signature", "KEY_FILE_KIND"]

KEY_FILE_KIND = "gossip-tts/ed25519"
_KEY_FILE_MAX_BYTES = 4096


class Identity:
    """An Ed25519 signing key. `public_key` (32 bytes) identifies the peer on the wire."""

    __slots__ = ("_signing_key", "public_key", "peer_id")

    def __init__(self, signing_key: nacl.signing.SigningKey) -> None:
        self._signing_key = signing_key
        self.public_key: bytes = bytes(signing_key.verify_key)
        self.peer_id: str = self.public_key.hex()

    @classmethod
    def generate(cls, seed: bytes | None = None) -> "Identity":
        """A new identity; from the OS CSPRNG, or from a 32-byte `seed` (simnet, tests)."""
        if seed is None:
            return cls(nacl.signing.SigningKey.generate())
        if not isinstance(seed, bytes) or len(seed) != 32:
            raise ValueError("Identity seed must be exactly 32 bytes")
        return cls(nacl.signing.SigningKey(seed))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Identity":
        """Read a key file written by `save`; warns if others may read it."""
        path = Path(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"identity file {str(path)!r} not found; create one with "
                f"`gossip-tts keygen --out {path}`") from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"identity file {str(path)!r} is not a regular file")
        if st.st_size > _KEY_FILE_MAX_BYTES:
            raise ValueError(f"identity file {str(path)!r} is too large to be a key file")
        if os.name == "posix" and st.st_mode & 0o077:
            warnings.warn(f"identity file {str(path)!r} is readable by other users "
                          f"(mode {stat.S_IMODE(st.st_mode):o}); run `chmod 600 {path}`",
                          stacklevel=2)
        try:
            doc = json.loads(path.read_bytes().decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("kind") != KEY_FILE_KIND:
                raise ValueError(f"'kind' is not {KEY_FILE_KIND!r}")
            seed = bytes.fromhex(doc["seed"])
            if len(seed) != 32:
                raise ValueError("'seed' is not 32 bytes of hex")
            identity = cls.generate(seed)
            if doc.get("peer_id") != identity.peer_id:
                raise ValueError("'peer_id' does not match the key")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"identity file {str(path)!r} is malformed: {exc}; "
                             "make one with `gossip-tts keygen --out FILE`") from None
        return identity

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the key file with mode 0o600, atomically (temp file + rename).

        Refuses to replace an existing file unless `overwrite`: losing a key loses the
        peer's identity in every allow-list that names it.
        """
        path = Path(path)
        if path.exists() and not overwrite:
            raise FileExistsError(f"identity file {str(path)!r} already exists")
        doc = {"kind": KEY_FILE_KIND, "peer_id": self.peer_id,
               "seed": bytes(self._signing_key).hex()}
        data = (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()
        directory = path.parent if str(path.parent) else Path(".")
        # mkstemp creates the file with mode 0o600, so the seed is never world-readable.
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message`."""
        return self._signing_key.sign(bytes(message)).signature

    def __repr__(self) -> str:
        return f"Identity(peer_id={self.peer_id[:16]}...)"


def verify_signature(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True iff `signature` is a valid Ed25519 signature of `message` by `public_key`.

    Never raises on malformed input: a wrong-length key or signature is just invalid.
    """
    if len(public_key) != 32 or len(signature) != 64:
        return False
    try:
        nacl.signing.VerifyKey(bytes(public_key)).verify(bytes(message), bytes(signature))
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError,
            nacl.exceptions.ValueError, nacl.exceptions.TypeError):
        return False
    return True

"""`gossip-tts keygen`: create a peer identity file."""

from __future__ import annotations

import os

from protocol.identity import Identity


def write_key_file(path: str | os.PathLike[str]) -> str:
    """Generate a new Ed25519 identity, save it to `path` (mode 0o600), return its peer id.

    Refuses to overwrite an existing file: that would lose the peer's identity.
    """
    identity = Identity.generate()
    identity.save(path)
    return identity.peer_id

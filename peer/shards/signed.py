"""Signed manifests: a corpus named by the key that vouches for it, not by its hash.

`--data swarm:HASH` fixes the corpus forever; `--data swarm-key:PUBKEY` trusts whoever holds
that Ed25519 key to say what the corpus is, and to say it again later (a corpus that grows).
The signed document is canonical JSON:

    {"format": SIGNED_FORMAT, "manifest": {...}, "signature": "<128 hex>",
     "signer": "<public key, 64 hex>", "version": N}

The signature covers the canonical JSON of every field but `signature`, so the signer and
the version are signed too. `version` is how a peer tells a newer corpus from a replayed
older one: of the documents signed by its key, the highest version wins, and a peer never
goes back to a lower one than it has accepted (`gossip-tts manifest --sign` writes the Unix
time in seconds, or one more than the document it replaces). The document's bytes must be
canonical, so one document has one SHA-256, under which peers serve it like a shard.

Pure: no files, no clock. Refusals raise ManifestError subclasses whose `reason` a peer counts.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from peer.shards.manifest import (FORMAT, HEX64_RE, MAX_MANIFEST_BYTES, Manifest, ManifestError, canonical_json,
                                  exact_fields, load_json, manifest_from_dict)
from protocol import Identity, verify_signature

SIGNED_FORMAT = "gossip-tts-swarm-manifest-signed-v1"
SIGNED_MANIFEST_NAME = "swarm-manifest.signed.json"
"""The file name `gossip-tts manifest DIR --sign KEY` writes next to the tars."""
SWARM_KEY_PREFIX = "swarm-key:"
MAX_VERSION = (1 << 53) - 1
"""Versions are JSON integers every parser reads exactly."""
_FIELDS = ("format", "manifest", "signature", "signer", "version")
_SIGNATURE_RE = re.compile(r"[0-9a-f]{128}")


class UntrustedSigner(ManifestError):
    reason = "untrusted_signer"


class BadSignature(ManifestError):
    reason = "bad_signature"


@dataclass(frozen=True)
class SignedManifest:
    """A manifest, who signed it (`signer`, hex public key), its `version`, and the document's bytes."""

    manifest: Manifest
    signer: str
    version: int
    data: bytes

    @property
    def hash(self) -> str:
        """The SHA-256 of the document, under which peers serve and advertise it."""
        return hashlib.sha256(self.data).hexdigest()


def parse_swarm_key(text: str) -> bytes:
    """The 32-byte public key in `swarm-key:HEX`, or ManifestError."""
    if not isinstance(text, str) or not text.startswith(SWARM_KEY_PREFIX):
        raise ManifestError(f"not a swarm key: {text!r} (want swarm-key:<64 hex digits>)")
    key = text[len(SWARM_KEY_PREFIX):]
    if not HEX64_RE.fullmatch(key):
        raise ManifestError(f"{text!r}: the key must be 64 lowercase hex digits (an Ed25519 public key, a peer id)")
    return bytes.fromhex(key)


def sign_manifest(manifest: Manifest, identity: Identity, version: int) -> bytes:
    """The signed document for `manifest` at `version` (1..MAX_VERSION)."""
    _version(version)
    body = {"format": SIGNED_FORMAT, "manifest": manifest.to_dict(), "signer": identity.peer_id, "version": version}
    return canonical_json({**body, "signature": identity.sign(canonical_json(body)).hex()})


def read_signed_manifest(data: bytes, trusted: set[bytes]) -> SignedManifest:
    """Parse a signed document, refusing one not signed by a key in `trusted` (32-byte public keys).

    The signer is checked before the signature, and the signature before the manifest is
    parsed: a stranger's document costs one JSON parse."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"signed manifest is {len(data)} bytes, over the limit of {MAX_MANIFEST_BYTES}")
    doc = load_json(data)
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        raise ManifestError(f"an unsigned manifest, where one signed by the key is needed ({SIGNED_MANIFEST_NAME}, "
                            "written by gossip-tts manifest DIR --sign KEYFILE)")
    exact_fields(doc, _FIELDS, "signed manifest")
    if doc["format"] != SIGNED_FORMAT:
        raise ManifestError(f"signed manifest format is {doc['format']!r}, not {SIGNED_FORMAT!r}")
    signer, signature = doc["signer"], doc["signature"]
    if not (isinstance(signer, str) and HEX64_RE.fullmatch(signer)):
        raise ManifestError("signed manifest 'signer' must be a public key in 64 lowercase hex digits")
    if not (isinstance(signature, str) and _SIGNATURE_RE.fullmatch(signature)):
        raise ManifestError("signed manifest 'signature' must be 128 lowercase hex digits")
    version = _version(doc["version"])
    key = bytes.fromhex(signer)
    if key not in trusted:
        raise UntrustedSigner(f"manifest signed by {signer[:16]}…, a key this peer does not trust")
    body = {k: v for k, v in doc.items() if k != "signature"}
    if not verify_signature(key, canonical_json(body), bytes.fromhex(signature)):
        raise BadSignature("manifest signature does not verify (altered after signing?)")
    manifest = manifest_from_dict(doc["manifest"])
    if canonical_json({**doc, "manifest": manifest.to_dict()}) != bytes(data):
        raise ManifestError("signed manifest is not in canonical form (sorted keys, no spaces, shards sorted by name)")
    return SignedManifest(manifest, signer, version, bytes(data))


def _version(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_VERSION:
        raise ManifestError(f"signed manifest 'version' must be an integer in 1..{MAX_VERSION}, got {value!r}")
    return value

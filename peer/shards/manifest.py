"""The shard manifest: which shards make a corpus, named by the hash of its own bytes.

A swarm shares a corpus without a central bucket: peers fetch shards from each other by
content hash, so every byte comes from a stranger. The manifest is what lets a peer check
them. It lists each shard's name, size, SHA-256 and what it holds (codec, latent dim, frame
rate, samples, audio seconds); its canonical serialisation (sorted keys, no spaces, shards
sorted by name, ASCII) hashes to the corpus id `swarm:HASH`. Whoever knows the hash can take
the manifest's body from anyone: it either hashes to it or is refused.

A manifest may instead be signed by an Ed25519 key (`peer.shards.signed`): a peer that trusts
the key accepts it without knowing its hash in advance.

Parsing is strict, because the body is untrusted: unknown fields, missing fields, wrong
types, non-canonical bytes, duplicate names or hashes, and anything past the limits below
are refused with `ManifestError` naming the problem. Pure code: no files, no clock.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

FORMAT = "gossip-tts-swarm-manifest-v1"
MANIFEST_NAME = "swarm-manifest.json"
"""The file name `gossip-tts pack` and `gossip-tts manifest` write next to the tars."""
SWARM_PREFIX = "swarm:"
MAX_MANIFEST_BYTES = 16 << 20
"""A manifest body larger than this is refused unread (about 70,000 shards fit)."""
MAX_SHARDS = 65_536
MAX_SHARD_BYTES = 1 << 40
"""No shard is larger than 1 TiB; the fetcher's byte cap is the manifest's size anyway."""
MAX_CODEC_CHARS = 64
MAX_LATENT_DIM = 1 << 16
_NAME_RE = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,122}\.tar")
HEX64_RE = re.compile(r"[0-9a-f]{64}")
_SHARD_FIELDS = ("audio_seconds", "codec", "frame_rate", "latent_dim", "name", "samples", "sha256", "size")
_TOP_FIELDS = ("format", "shards")


class ManifestError(ValueError):
    """A manifest (or the name of one) that is refused; the text says why, `reason` names it for a counter."""

    reason = "malformed"


@dataclass(frozen=True)
class ShardEntry:
    """One shard of the corpus: where to find it by name, how to check it, what it holds."""

    name: str
    size: int
    sha256: str
    codec: str
    latent_dim: int
    frame_rate: float
    samples: int
    audio_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in _SHARD_FIELDS}


@dataclass(frozen=True)
class Manifest:
    """A corpus: its shards, sorted by name. `hash` is the SHA-256 of `canonical_bytes()`."""

    shards: tuple[ShardEntry, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", tuple(sorted(self.shards, key=lambda s: s.name)))
        _check_manifest(self)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "shards": [s.to_dict() for s in self.shards]}

    def canonical_bytes(self) -> bytes:
        return canonical_json(self.to_dict())

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    @property
    def swarm_id(self) -> str:
        """What `gossip-tts peer --data` takes: `swarm:HASH`."""
        return SWARM_PREFIX + self.hash

    @property
    def total_bytes(self) -> int:
        return sum(s.size for s in self.shards)

    def by_hash(self) -> dict[str, ShardEntry]:
        return {s.sha256: s for s in self.shards}


def canonical_json(obj: Any) -> bytes:
    """The one serialisation that is hashed and signed: sorted keys, no spaces, ASCII, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def parse_swarm_id(text: str) -> str:
    """The manifest hash in `swarm:HASH` (64 lowercase hex digits), or ManifestError."""
    if not isinstance(text, str) or not text.startswith(SWARM_PREFIX):
        raise ManifestError(f"not a swarm corpus id: {text!r} (want swarm:<64 hex digits>)")
    digest = text[len(SWARM_PREFIX):]
    if not HEX64_RE.fullmatch(digest):
        raise ManifestError(f"{text!r}: the hash must be 64 lowercase hex digits (a SHA-256)")
    return digest


def read_manifest(data: bytes, expected_hash: str | None = None) -> Manifest:
    """Parse an unsigned manifest's bytes; with `expected_hash`, refuse bytes that do not hash to it.

    The hash is checked before anything is parsed, and the bytes must be the canonical
    serialisation of what they hold (one manifest, one hash)."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest is {len(data)} bytes, over the limit of {MAX_MANIFEST_BYTES}")
    if expected_hash is not None:
        found = hashlib.sha256(data).hexdigest()
        if found != expected_hash:
            raise ManifestError(f"manifest hashes to {found}, not to the expected {expected_hash}")
    manifest = manifest_from_dict(load_json(data))
    if manifest.canonical_bytes() != bytes(data):
        raise ManifestError("manifest is not in canonical form (sorted keys, no spaces, shards sorted by name)")
    return manifest


def manifest_from_dict(doc: Any) -> Manifest:
    """A Manifest from parsed JSON, every field checked; ManifestError otherwise."""
    exact_fields(doc, _TOP_FIELDS, "manifest")
    if doc["format"] != FORMAT:
        raise ManifestError(f"manifest format is {doc['format']!r}, not {FORMAT!r}")
    shards = doc["shards"]
    if not isinstance(shards, list):
        raise ManifestError("manifest 'shards' must be a list")
    if len(shards) > MAX_SHARDS:
        raise ManifestError(f"manifest lists {len(shards)} shards, over the limit of {MAX_SHARDS}")
    return Manifest(tuple(_shard_from_dict(i, s) for i, s in enumerate(shards)))


# ---------------------------------------------------------------------------------------------- checks
def load_json(data: bytes) -> Any:
    try:
        return json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ManifestError(f"manifest is not JSON: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ManifestError(f"manifest holds {name}, which JSON does not allow")


def exact_fields(doc: Any, fields: tuple[str, ...], what: str) -> None:
    if not isinstance(doc, dict):
        raise ManifestError(f"{what} must be a JSON object")
    unknown = sorted(set(doc) - set(fields))
    missing = sorted(set(fields) - set(doc))
    if unknown:
        raise ManifestError(f"{what} has unknown field(s) {', '.join(map(repr, unknown))}")
    if missing:
        raise ManifestError(f"{what} lacks field(s) {', '.join(map(repr, missing))}")


def _int(value: Any, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ManifestError(f"{what} must be an integer in {low}..{high}, got {value!r}")
    return value


def _number(value: Any, what: str, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (positive and value == 0):
        raise ManifestError(f"{what} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _shard_from_dict(i: int, doc: Any) -> ShardEntry:
    what = f"shard {i}"
    exact_fields(doc, _SHARD_FIELDS, what)
    name = doc["name"]
    if not (isinstance(name, str) and _NAME_RE.fullmatch(name)):
        raise ManifestError(f"{what}: name {name!r} is not a plain file name ending in .tar (letters, digits, '_', '-', '.')")
    codec = doc["codec"]
    if not (isinstance(codec, str) and 0 < len(codec) <= MAX_CODEC_CHARS):
        raise ManifestError(f"{what}: codec must be a string of 1..{MAX_CODEC_CHARS} characters")
    digest = doc["sha256"]
    if not (isinstance(digest, str) and HEX64_RE.fullmatch(digest)):
        raise ManifestError(f"{what}: sha256 must be 64 lowercase hex digits")
    return ShardEntry(
        name=name, size=_int(doc["size"], f"{what}: size", 1, MAX_SHARD_BYTES), sha256=digest, codec=codec,
        latent_dim=_int(doc["latent_dim"], f"{what}: latent_dim", 1, MAX_LATENT_DIM),
        frame_rate=_number(doc["frame_rate"], f"{what}: frame_rate", positive=True),
        samples=_int(doc["samples"], f"{what}: samples", 0, 1 << 32),
        audio_seconds=_number(doc["audio_seconds"], f"{what}: audio_seconds", positive=False),
    )


def _check_manifest(m: Manifest) -> None:
    """Rules across shards: names and contents unique, one latent space for the whole corpus."""
    if not m.shards:
        raise ManifestError("manifest lists no shard")
    if len(m.shards) > MAX_SHARDS:
        raise ManifestError(f"manifest lists {len(m.shards)} shards, over the limit of {MAX_SHARDS}")
    for what, values in (("name", [s.name for s in m.shards]), ("sha256", [s.sha256 for s in m.shards])):
        if len(set(values)) != len(values):
            raise ManifestError(f"manifest lists a shard {what} twice")
    first = m.shards[0]
    for s in m.shards[1:]:
        if (s.codec, s.latent_dim, s.frame_rate) != (first.codec, first.latent_dim, first.frame_rate):
            raise ManifestError(f"shard {s.name} is codec {s.codec} dim {s.latent_dim} @ {s.frame_rate} Hz, but "
                                f"{first.name} is {first.codec} dim {first.latent_dim} @ {first.frame_rate} Hz: "
                                "one corpus holds one latent space")

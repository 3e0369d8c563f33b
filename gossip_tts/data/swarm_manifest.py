"""Writing a swarm manifest for a folder of latent tars (`gossip-tts pack` and `gossip-tts manifest`),
and signing it (`gossip-tts manifest DIR --sign KEYFILE`).

Each `*.tar` directly in the folder (not hidden) is hashed whole and read once for what it
holds: the latent space from its `__shard__.json` header, and samples and audio seconds
from its samples' JSON (`audio_seconds` where `pack` recorded it, else `target_duration`).
These are the user's own tars, read with Python's tarfile (the training reader, which reads
strangers' tars, does not use it); a JSON member over MAX_JSON_BYTES is not read.
"""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

from gossip_tts.data.tars import SHARD_INFO_NAME
from peer.shards.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, ManifestError, ShardEntry
from peer.shards.signed import SIGNED_MANIFEST_NAME, SignedManifest, read_signed_manifest, sign_manifest
from peer.shards.store import sha256_of, write_atomic
from protocol import Identity

MAX_JSON_BYTES = 1 << 20


def describe_shard(path: Path) -> ShardEntry:
    """A manifest entry for one latent tar (ManifestError if it is not one)."""
    header: dict | None = None
    samples, seconds = 0, 0.0
    try:
        with tarfile.open(path, mode="r|") as tar:
            for member in tar:
                if not member.isfile() or not member.name.endswith(".json") or member.size > MAX_JSON_BYTES:
                    continue
                f = tar.extractfile(member)
                doc = json.loads(f.read()) if f is not None else None
                if not isinstance(doc, dict):
                    continue
                if member.name == SHARD_INFO_NAME:
                    header = doc
                    continue
                samples += 1
                value = doc.get("audio_seconds", doc.get("target_duration", 0.0))
                seconds += float(value) if isinstance(value, (int, float)) else 0.0
    except (tarfile.TarError, OSError, ValueError) as exc:
        raise ManifestError(f"{path}: not a readable latent tar ({type(exc).__name__}: {exc})") from None
    if header is None:
        raise ManifestError(f"{path}: no {SHARD_INFO_NAME} header (not written by gossip-tts pack?)")
    try:
        return ShardEntry(name=path.name, size=path.stat().st_size, sha256=sha256_of(path), codec=str(header["codec"]),
                          latent_dim=int(header["latent_dim"]), frame_rate=float(header["frame_rate"]),
                          samples=samples, audio_seconds=round(seconds, 3))
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable {SHARD_INFO_NAME} header ({exc})") from None


def build_manifest(directory: Path) -> Manifest:
    """The manifest of every latent tar directly in `directory`."""
    directory = Path(directory)
    paths = sorted(p for p in directory.glob("*.tar") if p.is_file() and not p.name.startswith("."))
    if not paths:
        raise ManifestError(f"{directory} holds no .tar shard")
    return Manifest(tuple(describe_shard(p) for p in paths))


def write_manifest(directory: Path) -> Manifest:
    """(Re)write `directory/swarm-manifest.json` (atomically) for the tars in it; returns it."""
    manifest = build_manifest(directory)
    write_atomic(Path(directory) / MANIFEST_NAME, manifest.canonical_bytes())
    return manifest


def write_signed_manifest(directory: Path, identity: Identity, version: int | None = None) -> SignedManifest:
    """Write `directory/swarm-manifest.json` and, signed by `identity`, `swarm-manifest.signed.json`.

    `version` defaults to the Unix time in seconds, or one more than the version of the signed
    document already there (peers that trust the key take the highest version: a re-signed corpus
    must outrank the old one, even if this machine's clock is behind)."""
    previous = _previous_version(Path(directory) / SIGNED_MANIFEST_NAME, identity)
    if version is None:
        version = max(int(time.time()), previous + 1)
    elif version <= previous:
        raise ValueError(f"version {version} is not above {previous}, the version already signed in {directory}: "
                         "peers would keep the older document")
    manifest = write_manifest(directory)
    data = sign_manifest(manifest, identity, version)
    write_atomic(Path(directory) / SIGNED_MANIFEST_NAME, data)
    return read_signed_manifest(data, {identity.public_key})


def _previous_version(path: Path, identity: Identity) -> int:
    try:
        with open(path, "rb") as f:
            return read_signed_manifest(f.read(MAX_MANIFEST_BYTES + 1), {identity.public_key}).version
    except (OSError, ManifestError):  # none yet, or signed by another key: nothing of ours to outrank
        return 0


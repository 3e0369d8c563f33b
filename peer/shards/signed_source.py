"""Finding the newest manifest signed by the key a peer trusts (`--data swarm-key:PUBKEY`), among
its neighbours, and remembering the newest it accepted.

Each neighbour's `GET /v1/shards` advert may offer a signed document (its hash, signer and
version, `peer.shards.advert`). Only offers naming the trusted signer and a version above
what this peer already accepted are fetched, highest first, each read capped at
MAX_MANIFEST_BYTES by its hash, then checked: the bytes hash to what was offered, the
signer is the trusted key, the signature verifies, and the version inside the signed body
is the one the advert claimed. Anything else is refused, counted in
`manifests_refused_total{reason=...}`, never fetched again, and its source is not asked for
`ban_s`. A replayed older document is never adopted: an honest advert of it is below what
we hold and is not fetched; a lying one (an old document offered as a new version) fails the
version check. Of the documents that pass, the highest version wins.

`accepted_path` holds the newest document accepted for a key across restarts, so a peer
whose neighbours all replay an older version still trains on the newest it has seen;
`NewerManifestWatcher` keeps looking while the peer trains. Blocking reads: run before
training starts, or on a thread of its own.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import Callable

from peer.metrics import Metrics
from peer.shards.advert import SignedOffer, signed_offers
from peer.shards.download import SourceFailed, SourceLied, get_capped, read_advert_doc
from peer.shards.manifest import MAX_MANIFEST_BYTES, ManifestError
from peer.shards.plan import Penalties
from peer.shards.store import write_atomic
from peer.shards.signed import SignedManifest, read_signed_manifest
from peer.shards.ticker import Ticker

log = logging.getLogger(__name__)
MAX_OFFERS_PER_ADDRESS = 4
"""Offers fetched from one neighbour in one round, highest versions first (an advert may list many)."""
MAX_REMEMBERED_REFUSALS = 4096
"""Document hashes known bad, never fetched again (forgotten all at once past this many)."""


class SignedManifestFinder:
    """Reads neighbours' offers of documents signed by `key` and fetches the newest that verifies."""

    def __init__(self, key: bytes, metrics: Metrics, stall_s: float = 10.0, ban_s: float = 3600.0) -> None:
        self.key, self.signer, self.metrics, self.stall_s = key, key.hex(), metrics, stall_s
        self.penalties = Penalties(ban_s)
        self.refused: set[str] = set()

    def newest(self, addresses: list[str], above: int = 0) -> SignedManifest | None:
        """The highest-versioned document signed by our key that `addresses` offer and that verifies,
        if its version is above `above` (the version this peer already holds); else None."""
        banned = self.penalties.banned(time.monotonic())
        offers: list[tuple[SignedOffer, str]] = []
        for address in dict.fromkeys(addresses):
            if address in banned:
                continue
            try:
                doc = read_advert_doc(address, self.stall_s)
            except SourceFailed as exc:
                log.debug("no advert from %s: %s", address, exc)
                continue
            mine = [o for o in signed_offers(doc, self.signer) if o.version > above and o.hash not in self.refused]
            offers += [(o, address) for o in sorted(mine, key=lambda o: -o.version)[:MAX_OFFERS_PER_ADDRESS]]
        best: SignedManifest | None = None
        for offer, address in sorted(offers, key=lambda o: -o[0].version):
            if best is not None and offer.version <= best.version:
                break  # an honest offer can be no newer than what we already verified
            if offer.hash in self.refused or (best is not None and offer.hash == best.hash) \
                    or address in self.penalties.banned(time.monotonic()):  # caught lying earlier in this round
                continue
            signed = self._fetch(address, offer)
            if signed is not None:
                best = signed
        return best

    def _fetch(self, address: str, offer: SignedOffer) -> SignedManifest | None:
        try:
            data = get_capped(address, f"/v1/shards/{offer.hash}", MAX_MANIFEST_BYTES, self.stall_s)
        except SourceLied as exc:  # more bytes than the cap, a malformed length: the source lied
            self._refuse(address, offer, exc.reason, str(exc), document_bad=False)
            return None
        except SourceFailed as exc:  # unreachable, stalled: try the next offer
            log.info("no signed manifest from %s: %s", address, exc)
            return None
        if hashlib.sha256(data).hexdigest() != offer.hash:
            return self._refuse(address, offer, "hash_mismatch", "the bytes do not hash to the offered document",
                                document_bad=False)
        try:
            signed = read_signed_manifest(data, {self.key})
        except ManifestError as exc:
            return self._refuse(address, offer, exc.reason, str(exc), document_bad=True)
        if signed.version != offer.version:
            return self._refuse(address, offer, "version_mismatch",
                                f"offered as version {offer.version}, signed as version {signed.version} (a replay?)",
                                document_bad=False)
        log.info("signed manifest version %d (%d shards) from %s verified", signed.version,
                 len(signed.manifest.shards), address)
        return signed

    def _refuse(self, address: str, offer: SignedOffer, reason: str, detail: str, *, document_bad: bool) -> None:
        """Ban the source; remember the document's hash as bad only when its own bytes failed
        (`document_bad`). Other bytes than the hash names, too many of them, or a version the
        offer lied about convict the source alone: the same document offered honestly by
        another neighbour must still be fetched, or one liar could hide a genuine version."""
        if document_bad:
            if len(self.refused) >= MAX_REMEMBERED_REFUSALS:
                self.refused.clear()
            self.refused.add(offer.hash)
        self.penalties.penalise(address, time.monotonic())
        self.metrics.inc("manifests_refused_total", reason=reason)
        log.warning("refused signed manifest %s… from %s: %s", offer.hash[:16], address, detail)


def accepted_path(cache_dir: Path, key: bytes) -> Path:
    """Where the newest document accepted for `key` is kept (beside the shard folders)."""
    return Path(cache_dir) / f"signed-{key.hex()[:16]}.json"


def load_accepted(cache_dir: Path, key: bytes) -> SignedManifest | None:
    """The newest document accepted for `key` before, checked again (None if none or unreadable)."""
    path = accepted_path(cache_dir, key)
    try:
        with open(path, "rb") as f:
            return read_signed_manifest(f.read(MAX_MANIFEST_BYTES + 1), {key})
    except FileNotFoundError:
        return None
    except (OSError, ManifestError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None


def save_accepted(cache_dir: Path, signed: SignedManifest) -> None:
    """Keep `signed` as the newest accepted for its key (atomically)."""
    path = accepted_path(cache_dir, bytes.fromhex(signed.signer))
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, signed.data)


class NewerManifestWatcher:
    """While the peer trains on `current`, asks the neighbours every `every_s` for a newer version
    signed by the same key. One that verifies is kept as the newest accepted (the peer trains on it
    from its next start: the corpus does not change under a running trainer), reported once through
    `on_newer`, and shown as the gauge `data_manifest_newest_version`; forged or replayed offers are
    refused and counted as at start-up."""

    def __init__(self, finder: SignedManifestFinder, current: SignedManifest, addresses: Callable[[], list[str]],
                 cache_dir: Path, every_s: float, on_newer: Callable[[SignedManifest], None]) -> None:
        self.finder, self.newest, self.addresses = finder, current, addresses
        self.cache_dir, self.on_newer = Path(cache_dir), on_newer
        self._ticker = Ticker("manifest-watch", every_s, self.check, wait_first=True)
        self._gauge()

    def start(self) -> None:
        self._ticker.start()

    def close(self) -> None:
        self._ticker.close()

    def check(self) -> SignedManifest | None:
        """One round: the newer version found (and kept), or None."""
        newer = self.finder.newest(self.addresses(), self.newest.version)
        if newer is None:
            return None
        save_accepted(self.cache_dir, newer)
        self.newest = newer
        self._gauge()
        self.on_newer(newer)
        return newer

    def _gauge(self) -> None:
        self.finder.metrics.set("data_manifest_newest_version", self.newest.version)

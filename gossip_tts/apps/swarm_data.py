"""`gossip-tts peer --data swarm:HASH` (or `swarm-key:PUBKEY`): train on a corpus fetched from the
swarm, and serve it on.

Start-up, before the model is built (it reads a first batch): the manifest is read from
`--manifest` (a path, whose folder's tars become this peer's own shards, or a URL) or fetched
from the `--peer` addresses by its hash, and checked against HASH; with `swarm-key:`, the
newest manifest signed by that key among the one accepted before, `--manifest` and the
`--peer` addresses' offers (`peer.shards.signed_source`); the store opens; the
fetcher starts on the `--peer` addresses, and the peer waits until one shard is held. From
then each pass of the trainer reads the shards the store holds as the pass starts
(`ShardStore.pass_listing`, in place of its `shards.txt`). `SwarmData` is the peer's corpus
service (`peer.runtime.CorpusService`), handed to `peer.startup.build_peer`: the peer serves
its store on `/v1/shards` and, once it runs, points the fetcher at its live, verified neighbours.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, NamedTuple

from gossip_tts.data.http_get import http_get, is_http
from gossip_tts.data.sources import provide_listing
from gossip_tts.apps.peer_config import PeerAppConfig
from peer.metrics import Metrics
from peer.net.shard_routes import ShardServer
from peer.shards.config import SwarmDataConfig
from peer.shards.download import SourceFailed, get_capped
from peer.shards.fetcher import ShardFetcher
from peer.shards.manifest import MAX_MANIFEST_BYTES, SWARM_PREFIX, Manifest, ManifestError, parse_swarm_id, read_manifest
from peer.shards.signed import SWARM_KEY_PREFIX, SignedManifest, parse_swarm_key, read_signed_manifest
from peer.shards.signed_source import NewerManifestWatcher, SignedManifestFinder, load_accepted, save_accepted
from peer.shards.store import ShardStore
from protocol import Identity

log = logging.getLogger(__name__)
MANIFEST_STALL_S = 10.0
WAIT_LOG_S = 30.0


class CorpusId(NamedTuple):
    """What --data names: a manifest by its hash (`swarm:HASH`) or the key that signs it (`swarm-key:PUBKEY`)."""

    hash: str | None
    key: bytes | None


def swarm_id_of(sources: list[str]) -> CorpusId | None:
    """The corpus when --data is `swarm:HASH` or `swarm-key:PUBKEY` (alone), else None."""
    swarm = [s for s in sources if s.startswith((SWARM_PREFIX, SWARM_KEY_PREFIX))]
    if not swarm:
        return None
    if len(sources) != 1:
        raise ValueError(f"--data {swarm[0].split(':')[0]}:… names the whole corpus: give it alone, not with other --data sources")
    if swarm[0].startswith(SWARM_KEY_PREFIX):
        return CorpusId(None, parse_swarm_key(swarm[0]))
    return CorpusId(parse_swarm_id(swarm[0]), None)


def _read_given(where: str) -> tuple[bytes, Path | None]:
    """The bytes of --manifest (a path or URL, capped) and, for a path, its folder (our own shards)."""
    if not is_http(where):
        path = Path(where).expanduser()
        with open(path, "rb") as f:
            return f.read(MAX_MANIFEST_BYTES + 1), path.parent
    with http_get(where, MANIFEST_STALL_S, 120.0) as body:
        return body.read(MAX_MANIFEST_BYTES + 1), None


def load_manifest(digest: str, where: str | None, peers: list[str], stop: threading.Event,
                  emit: Callable[[str], None]) -> tuple[Manifest, Path | None]:
    """The manifest named by `digest` and the folder of our own shards (beside a local manifest)."""
    if where is not None:
        data, own_dir = _read_given(where)
        return read_manifest(data, digest), own_dir
    if not peers:
        raise ValueError("--data swarm:HASH needs the manifest: give --manifest PATH-or-URL, or --peer HOST:PORT "
                         "of a peer that has it")
    emit(f"asking {', '.join(peers)} for manifest {digest[:16]}…")
    while not stop.is_set():
        for address in peers:
            try:
                data = get_capped(address, f"/v1/shards/{digest}", MAX_MANIFEST_BYTES, MANIFEST_STALL_S, stop=stop)
                return read_manifest(data, digest), None
            except (SourceFailed, ManifestError) as exc:
                log.info("no manifest from %s: %s", address, exc)
        stop.wait(2.0)
    raise KeyboardInterrupt("stopped while waiting for the manifest")


def load_signed_manifest(finder: SignedManifestFinder, where: str | None, peers: list[str], cache_dir: Path,
                         stop: threading.Event, emit: Callable[[str], None]) -> tuple[SignedManifest, Path | None]:
    """The newest manifest signed by the finder's key among: the one this peer accepted before (kept
    in `cache_dir`), --manifest (`where`; refused if signed by another key), and what `peers` offer;
    waits for one if none of them has any. Kept as the newest accepted; returns it and the folder
    of our own shards (beside a local --manifest)."""
    kept = best = load_accepted(cache_dir, finder.key)
    own_dir = None
    if where is not None:
        data, own_dir = _read_given(where)
        try:
            given = read_signed_manifest(data, {finder.key})
        except ManifestError as exc:
            finder.metrics.inc("manifests_refused_total", reason=exc.reason)
            raise ManifestError(f"--manifest {where}: {exc}") from None
        if best is not None and given.version < best.version:
            emit(f"--manifest {where} is version {given.version}, older than version {best.version} this peer "
                 "accepted before: training on the newer")
        else:
            best = given
    if best is None and not peers:
        raise ValueError("--data swarm-key:KEY needs a signed manifest: give --manifest PATH-or-URL, or --peer "
                         "HOST:PORT of a peer that has one")
    if peers:
        emit(f"asking {', '.join(peers)} for manifests signed by {finder.signer[:16]}…")
    while True:
        newer = finder.newest(peers, best.version if best is not None else 0) if peers else None
        best = newer or best
        if best is not None:
            break
        if stop.wait(2.0):
            raise KeyboardInterrupt("stopped while waiting for a signed manifest")
    if best != kept:
        save_accepted(cache_dir, best)
    return best, own_dir


class SwarmData:
    """The store, its fetcher, its shard server and the metrics they count into, for the life
    of one peer (its `peer.runtime.CorpusService`; the peer's /metrics is these `metrics`)."""

    def __init__(self, manifest: Manifest, own_dir: Path | None, cfg: SwarmDataConfig, cache_dir: Path,
                 identity: Identity, bootstrap: list[str], metrics: Metrics | None = None,
                 signed: SignedManifest | None = None, finder: SignedManifestFinder | None = None) -> None:
        self.manifest, self.cfg, self.bootstrap = manifest, cfg, list(bootstrap)
        self.metrics = metrics or Metrics()
        self.store = ShardStore(manifest, cache_dir, cfg.cache_bytes, cfg.min_hold_s, own_dir=own_dir, signed=signed)
        self.store.open()
        self.fetcher = ShardFetcher(self.store, cfg, identity.peer_id, lambda: self.bootstrap, self.metrics)
        self.cache_dir, self.signed, self.finder = Path(cache_dir), signed, finder
        self.watcher: NewerManifestWatcher | None = None
        self.shards = ShardServer(self.store, cfg, self.metrics)
        """What the peer serves on /v1/shards."""

    def wait_for_first_shard(self, stop: threading.Event, emit: Callable[[str], None]) -> None:
        """Block until one shard is held (the trainer reads a first batch when it is built)."""
        waited = 0.0
        while not self.store.held():
            if stop.is_set():
                raise KeyboardInterrupt("stopped while waiting for the first shard")
            if waited % WAIT_LOG_S == 0:
                emit(f"waiting for a first shard of {self.manifest.swarm_id} from {', '.join(self.bootstrap) or 'nobody yet'}")
            self.fetcher.changed.wait(1.0)
            self.fetcher.changed.clear()
            waited += 1.0

    def watch_for_newer(self, addresses: Callable[[], list[str]], emit: Callable[[str], None]) -> None:
        """With a signed manifest: look for a newer version among `addresses` while training."""
        if self.signed is None or self.finder is None:
            return
        current = self.signed

        def newer(found: SignedManifest) -> None:
            emit(f"manifest version {found.version} signed by {found.signer[:16]}… verified and kept: this peer "
                 f"trains on version {current.version} until it restarts")

        self.watcher = NewerManifestWatcher(self.finder, current, addresses, self.cache_dir, self.cfg.manifest_check_s, newer)
        self.watcher.start()

    def serve(self, neighbours: Callable[[], list[str]], address: Callable[[], str],
              emit: Callable[[str], None]) -> None:
        """As the peer starts: ask its verified `neighbours()`, then the --peer addresses, for
        shards and newer signed manifests, never this peer itself (`address()`)."""

        def sources() -> list[str]:
            return neighbours() + self.bootstrap

        self.fetcher.ask_from(sources, address)
        self.watch_for_newer(lambda: [a for a in sources() if a != address()], emit)

    def close(self) -> None:
        provide_listing(str(self.store.listing), None)
        if self.watcher is not None:
            self.watcher.close()
        self.fetcher.close()


def start_swarm_data(cfg: PeerAppConfig, identity: Identity, stop: threading.Event,
                     emit: Callable[[str], None]) -> SwarmData | None:
    """For `--data swarm:HASH`: get the manifest, open the store, start fetching and wait for a first
    shard; the trainer then reads `store.listing`. None for any other --data."""
    corpus = swarm_id_of(cfg.train.sources)
    if corpus is None:
        return None
    sd = cfg.swarm_data
    cache_dir = sd.cache_dir or (Path(cfg.loop.checkpoint_dir) / "shards" if cfg.loop.checkpoint_dir else None)
    if cache_dir is None:
        raise ValueError("--data swarm:… keeps shards on disk: give --data-cache DIR (checkpoints are off)")
    metrics, signed, finder = Metrics(), None, None
    if corpus.key is not None:
        finder = SignedManifestFinder(corpus.key, metrics, MANIFEST_STALL_S, sd.ban_s)
        signed, own_dir = load_signed_manifest(finder, sd.manifest, cfg.net.peers, cache_dir, stop, emit)
        manifest = signed.manifest
        emit(f"manifest version {signed.version} signed by {signed.signer[:16]}… (document {signed.hash[:16]}…)")
    else:
        assert corpus.hash is not None
        manifest, own_dir = load_manifest(corpus.hash, sd.manifest, cfg.net.peers, stop, emit)
    data = SwarmData(manifest, own_dir, sd, cache_dir, identity, cfg.net.peers, metrics=metrics, signed=signed,
                     finder=finder)
    emit(f"corpus {manifest.swarm_id}: {len(manifest.shards)} shards, {manifest.total_bytes / 1e6:.1f} MB; "
         f"{len(data.store.own())} own, {len(data.store.held()) - len(data.store.own())} cached in {data.store.dir}")
    data.fetcher.start()
    try:
        data.wait_for_first_shard(stop, emit)
    except BaseException:
        data.close()
        raise
    provide_listing(str(data.store.listing), data.store.pass_listing)  # each pass reads what is held as it starts
    return data


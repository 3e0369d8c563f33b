"""`--data swarm:HASH` wiring: the corpus id, where the manifest comes from, the settings."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gossip_tts.cli import settings
from gossip_tts.apps.swarm_data import load_manifest, swarm_id_of
from peer.shards.manifest import MANIFEST_NAME, ManifestError
from tests.unit.shard_server_helpers import manifest_of, own_store, serve_store

BLOBS = {"a.tar": b"a" * 1000, "b.tar": b"b" * 2000}
MANIFEST = manifest_of(BLOBS)


def test_swarm_id_of() -> None:
    assert swarm_id_of(["some/folder"]) is None
    assert swarm_id_of([MANIFEST.swarm_id]) == (MANIFEST.hash, None)
    with pytest.raises(ValueError, match="alone"):
        swarm_id_of([MANIFEST.swarm_id, "other/folder"])
    with pytest.raises(ManifestError, match="64 lowercase hex"):
        swarm_id_of(["swarm:abc"])


def test_a_local_manifest_must_hash_to_the_id_and_makes_its_folder_our_own(tmp_path: Path) -> None:
    (tmp_path / MANIFEST_NAME).write_bytes(MANIFEST.canonical_bytes())
    got, own = load_manifest(MANIFEST.hash, str(tmp_path / MANIFEST_NAME), [], threading.Event(), print)
    assert got == MANIFEST and own == tmp_path
    with pytest.raises(ManifestError, match="not to the expected"):
        load_manifest("0" * 64, str(tmp_path / MANIFEST_NAME), [], threading.Event(), print)
    with pytest.raises(ValueError, match="needs the manifest"):
        load_manifest(MANIFEST.hash, None, [], threading.Event(), print)


def test_the_manifest_is_fetched_from_a_peer_by_its_hash(tmp_path: Path) -> None:
    srv, _ = serve_store(own_store(tmp_path, BLOBS))
    try:
        got, own = load_manifest(MANIFEST.hash, None, ["127.0.0.1:9", srv.address], threading.Event(), print)
        assert got == MANIFEST and own is None
        stop = threading.Event()
        stop.set()
        with pytest.raises(KeyboardInterrupt):  # nobody has it: wait until stopped
            load_manifest("1" * 64, None, [srv.address], stop, print)
    finally:
        srv.close()


def test_swarm_data_settings_come_from_flags_env_and_files(tmp_path: Path) -> None:
    resolved = settings.resolve({("swarm_data", "cache_gb"): (2.5, "--data-cache-size")}, None,
                                {"GOSSIP_TTS_SWARM_DATA_MAX_FETCHES": "3"})
    cfg = settings.build(resolved, {})
    assert cfg.swarm_data.cache_gb == 2.5 and cfg.swarm_data.max_fetches == 3 and cfg.swarm_data.cache_bytes == 2_500_000_000
    with pytest.raises(ValueError, match="MAX_FETCHES must be >= 1"):
        settings.build(settings.resolve({}, None, {"GOSSIP_TTS_SWARM_DATA_MAX_FETCHES": "0"}), {})

"""Signed manifests: the document and its refusals, adverts offering one, the newest verified one
found among neighbours (replays and strangers' keys refused and counted), and `manifest --sign`."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web
from click.testing import CliRunner

from gossip_tts.cli.main import main
from gossip_tts.apps.swarm_data import load_signed_manifest, swarm_id_of
from peer.metrics import Metrics
from peer.shards.advert import SignedOffer, advert_body, signed_offers
from peer.shards.manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, ShardEntry, canonical_json
from peer.shards.signed import (SIGNED_MANIFEST_NAME, BadSignature, UntrustedSigner, parse_swarm_key,
                                read_signed_manifest, sign_manifest)
from peer.shards.signed_source import (NewerManifestWatcher, SignedManifestFinder, accepted_path, load_accepted,
                                       save_accepted)
from tests.unit.peer.shards.test_manifest import _write_tars
from tests.unit.shard_server_helpers import Served
from protocol import Identity

OWNER, OTHER = Identity.generate(b"\x01" * 32), Identity.generate(b"\x02" * 32)


def _manifest(tag: str) -> Manifest:
    return Manifest((ShardEntry(f"{tag}.tar", 100, hashlib.sha256(tag.encode()).hexdigest(), "mel", 4, 10.0, 1, 1.0),))


V1, V2 = _manifest("old"), _manifest("new")


def test_a_signed_document_covers_its_version_and_signer() -> None:
    data = sign_manifest(V1, OWNER, 7)
    got = read_signed_manifest(data, {OWNER.public_key})
    assert (got.manifest, got.version, got.signer, got.hash) == (V1, 7, OWNER.peer_id, hashlib.sha256(data).hexdigest())
    with pytest.raises(UntrustedSigner, match="does not trust"):
        read_signed_manifest(data, {OTHER.public_key})
    for change in ({"version": 8}, {"signer": OTHER.peer_id}, {"manifest": V2.to_dict()}):  # a replay renumbered, a key swapped
        with pytest.raises(BadSignature, match="does not verify"):
            read_signed_manifest(canonical_json({**json.loads(data), **change}), {OWNER.public_key, OTHER.public_key})
    with pytest.raises(ManifestError, match="unknown field"):
        read_signed_manifest(canonical_json({**json.loads(data), "note": "x"}), {OWNER.public_key})
    with pytest.raises(ManifestError, match="canonical"):
        read_signed_manifest(json.dumps(json.loads(data), indent=1).encode(), {OWNER.public_key})
    for version in (0, -1, True, 1.5, 1 << 53):
        with pytest.raises(ManifestError, match="'version' must be an integer"):
            read_signed_manifest(canonical_json({**json.loads(data), "version": version}), {OWNER.public_key})
    with pytest.raises(ManifestError, match="over the limit"):
        read_signed_manifest(b" " * (MAX_MANIFEST_BYTES + 1), {OWNER.public_key})
    with pytest.raises(ManifestError, match="an unsigned manifest.*--sign"):
        read_signed_manifest(V1.canonical_bytes(), {OWNER.public_key})


def test_swarm_key_ids() -> None:
    assert parse_swarm_key("swarm-key:" + OWNER.peer_id) == OWNER.public_key
    assert swarm_id_of(["swarm-key:" + OWNER.peer_id]).key == OWNER.public_key
    for bad in (OWNER.peer_id, "swarm-key:" + OWNER.peer_id.upper(), "swarm-key:abc"):
        with pytest.raises(ManifestError):
            parse_swarm_key(bad)
    with pytest.raises(ValueError, match="alone"):
        swarm_id_of(["swarm-key:" + OWNER.peer_id, "some/folder"])


def test_adverts_offer_signed_documents_by_signer() -> None:
    offer = SignedOffer("ab" * 32, OWNER.peer_id, 3)
    body = advert_body(V1.hash, [s.sha256 for s in V1.shards], set(), offer)
    assert signed_offers(json.loads(json.dumps(body)), OWNER.peer_id) == [offer]
    assert signed_offers(body, OTHER.peer_id) == []  # another signer's offer is not even fetched
    for bad in ({"hash": "xy", "signer": OWNER.peer_id, "version": 3}, {"hash": "ab" * 32, "signer": OWNER.peer_id, "version": "3"},
                {"hash": "ab" * 32, "signer": OWNER.peer_id, "version": 0}, "nonsense"):
        assert signed_offers({"manifests": [{"hash": V1.hash, "have": "", "signed": bad}]}, OWNER.peer_id) == []
    assert signed_offers([], OWNER.peer_id) == []


class Offerer:
    """A neighbour offering one document as `claimed` (signer, version) and serving `data` for its hash."""

    def __init__(self, data: bytes, signer: str, version: int, served: bytes | None = None) -> None:
        self.fetches = 0
        digest = hashlib.sha256(data).hexdigest()
        body = {"manifests": [{"hash": "00" * 32, "have": "", "signed": {"hash": digest, "signer": signer, "version": version}}]}

        async def advert(request: web.Request) -> web.Response:
            return web.json_response(body)

        async def document(request: web.Request) -> web.Response:
            self.fetches += 1
            return web.Response(body=data if served is None else served)

        app = web.Application()
        app.router.add_get("/v1/shards", advert)
        app.router.add_get(f"/v1/shards/{digest}", document)
        self.served = Served(app)
        self.address = self.served.address


@pytest.fixture
def offerers():
    made: list[Offerer] = []

    def make(*args, **kwargs) -> Offerer:
        made.append(Offerer(*args, **kwargs))
        return made[-1]

    yield make
    for o in made:
        o.served.close()


def test_the_newest_verified_version_wins_and_a_renumbered_replay_is_refused(offerers) -> None:
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    replay = offerers(sign_manifest(V1, OWNER, 1), OWNER.peer_id, 99)  # a valid old document offered as version 99
    honest_old = offerers(sign_manifest(V1, OWNER, 1), OWNER.peer_id, 1)
    current = offerers(sign_manifest(V2, OWNER, 2), OWNER.peer_id, 2)
    got = finder.newest([honest_old.address, replay.address, current.address])
    assert got is not None and (got.version, got.manifest) == (2, V2)
    assert metrics.get("manifests_refused_total", reason="version_mismatch") == 1
    assert replay.address in finder.penalties.banned(time.monotonic())
    assert honest_old.fetches == 0  # offered below what was verified: never fetched
    assert finder.newest([honest_old.address, current.address], above=2) is None  # nothing newer than what we hold
    assert honest_old.fetches == 0 and current.fetches == 1


def test_a_liar_renumbering_a_genuine_document_cannot_hide_it_from_honest_offers(offerers) -> None:
    """The liar offers the genuine version-3 document as version 4 (or serves other bytes for
    its hash): it is banned, and the same document offered honestly is still taken."""
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    genuine = sign_manifest(V2, OWNER, 3)
    renumbers = offerers(genuine, OWNER.peer_id, 4)
    swaps = offerers(genuine, OWNER.peer_id, 5, served=b"{}")
    honest = offerers(genuine, OWNER.peer_id, 3)
    got = finder.newest([renumbers.address, swaps.address, honest.address])
    assert got is not None and got.version == 3 and honest.fetches == 1
    assert {r: metrics.get("manifests_refused_total", reason=r) for r in ("version_mismatch", "hash_mismatch")} \
        == {"version_mismatch": 1, "hash_mismatch": 1}
    assert {renumbers.address, swaps.address} <= finder.penalties.banned(time.monotonic())


def test_a_source_caught_lying_about_its_length_is_banned_and_counted(offerers, monkeypatch) -> None:
    """Any lie the downloader catches (here a Content-Length that is not a number) convicts the
    source as too many bytes do: banned and counted by its reason; the honest offer is taken."""
    import peer.shards.signed_source as signed_source
    from peer.shards.download import SourceLied

    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    genuine = sign_manifest(V2, OWNER, 3)
    liar, honest = offerers(genuine, OWNER.peer_id, 4), offerers(genuine, OWNER.peer_id, 3)
    real_get = signed_source.get_capped

    def get_capped(address, *args, **kwargs):
        if address == liar.address:
            raise SourceLied("bad_length", f"{address} sent Content-Length '\u00b2'")
        return real_get(address, *args, **kwargs)

    monkeypatch.setattr(signed_source, "get_capped", get_capped)
    got = finder.newest([liar.address, honest.address])
    assert got is not None and got.version == 3
    assert metrics.get("manifests_refused_total", reason="bad_length") == 1
    assert liar.address in finder.penalties.banned(time.monotonic())


def test_documents_by_other_keys_or_other_bytes_are_refused_and_counted(offerers) -> None:
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    stranger = offerers(sign_manifest(V2, OTHER, 50), OWNER.peer_id, 50)  # claims our signer in the advert
    honest_stranger = offerers(sign_manifest(V2, OTHER, 60), OTHER.peer_id, 60)
    forged = sign_manifest(V2, OWNER, 40)
    swapped = offerers(forged, OWNER.peer_id, 40, served=sign_manifest(V1, OWNER, 40))  # other bytes than offered
    huge = offerers(b"x" * 100, OWNER.peer_id, 30, served=b" " * (MAX_MANIFEST_BYTES + 10))
    assert finder.newest([stranger.address, honest_stranger.address, swapped.address, huge.address]) is None
    assert {r: metrics.get("manifests_refused_total", reason=r) for r in ("untrusted_signer", "hash_mismatch", "too_long")} \
        == {"untrusted_signer": 1, "hash_mismatch": 1, "too_long": 1}
    assert honest_stranger.fetches == 0
    finder.newest([stranger.address, swapped.address])  # refused documents and banned sources are not fetched again
    assert stranger.fetches == 1 and swapped.fetches == 1


def test_a_peer_never_goes_back_below_the_version_it_accepted(offerers, tmp_path: Path) -> None:
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    replayer = offerers(sign_manifest(V1, OWNER, 1), OWNER.peer_id, 1)
    save_accepted(tmp_path, read_signed_manifest(sign_manifest(V2, OWNER, 2), {OWNER.public_key}))
    old_file = tmp_path / "given" / SIGNED_MANIFEST_NAME
    old_file.parent.mkdir()
    old_file.write_bytes(sign_manifest(V1, OWNER, 1))
    lines: list[str] = []
    got, own = load_signed_manifest(finder, str(old_file), [replayer.address], tmp_path, threading.Event(), lines.append)
    assert (got.version, got.manifest, own) == (2, V2, old_file.parent)
    assert any("older than version 2" in line for line in lines)
    assert replayer.fetches == 0
    # A newer version offered is taken and kept as the new floor.
    newer = offerers(sign_manifest(V1, OWNER, 3), OWNER.peer_id, 3)
    got, _ = load_signed_manifest(finder, None, [replayer.address, newer.address], tmp_path, threading.Event(), print)
    assert got.version == 3 and load_accepted(tmp_path, OWNER.public_key).version == 3


def test_a_given_manifest_signed_by_another_key_is_refused(tmp_path: Path) -> None:
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics)
    (tmp_path / SIGNED_MANIFEST_NAME).write_bytes(sign_manifest(V1, OTHER, 5))
    with pytest.raises(ManifestError, match="does not trust"):
        load_signed_manifest(finder, str(tmp_path / SIGNED_MANIFEST_NAME), [], tmp_path, threading.Event(), print)
    assert metrics.get("manifests_refused_total", reason="untrusted_signer") == 1
    assert not accepted_path(tmp_path, OWNER.public_key).exists()
    with pytest.raises(ValueError, match="needs a signed manifest"):
        load_signed_manifest(finder, None, [], tmp_path, threading.Event(), print)
    accepted_path(tmp_path, OWNER.public_key).write_bytes(sign_manifest(V1, OTHER, 5))  # a kept file is checked again
    assert load_accepted(tmp_path, OWNER.public_key) is None


def test_manifest_sign_writes_a_document_peers_rank_above_the_last(tmp_path: Path) -> None:
    _write_tars(tmp_path, 2)
    OWNER.save(tmp_path / "owner.key")
    runner = CliRunner()
    result = runner.invoke(main, ["manifest", str(tmp_path), "--sign", str(tmp_path / "owner.key")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"swarm-key:{OWNER.peer_id}"
    first = read_signed_manifest((tmp_path / SIGNED_MANIFEST_NAME).read_bytes(), {OWNER.public_key})
    assert f"document {first.hash};" in result.output
    again = runner.invoke(main, ["manifest", str(tmp_path), "--sign", str(tmp_path / "owner.key")])
    assert again.exit_code == 0, again.output
    second = read_signed_manifest((tmp_path / SIGNED_MANIFEST_NAME).read_bytes(), {OWNER.public_key})
    assert second.version > first.version and second.manifest == first.manifest
    lower = runner.invoke(main, ["manifest", str(tmp_path), "--sign", str(tmp_path / "owner.key"), "--version", "5"])
    assert lower.exit_code != 0 and "not above" in lower.output
    assert runner.invoke(main, ["manifest", str(tmp_path), "--version", "5"]).exit_code != 0


def test_a_running_peer_keeps_a_newer_version_for_its_next_start(offerers, tmp_path: Path) -> None:
    metrics = Metrics(process=False)
    finder = SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0)
    current = read_signed_manifest(sign_manifest(V1, OWNER, 2), {OWNER.public_key})
    replayer = offerers(sign_manifest(V2, OWNER, 1), OWNER.peer_id, 1)
    forger = offerers(sign_manifest(V2, OTHER, 9), OWNER.peer_id, 9)
    addresses = [replayer.address, forger.address]
    told: list[int] = []
    watcher = NewerManifestWatcher(finder, current, lambda: addresses, tmp_path, 0.05, lambda s: told.append(s.version))
    assert watcher.check() is None and load_accepted(tmp_path, OWNER.public_key) is None
    assert metrics.get("manifests_refused_total", reason="untrusted_signer") == 1
    newer = offerers(sign_manifest(V2, OWNER, 3), OWNER.peer_id, 3)
    addresses.append(newer.address)
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while not told and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watcher.close()
    assert told == [3] and metrics.get("data_manifest_newest_version") == 3
    assert load_accepted(tmp_path, OWNER.public_key).manifest == V2


def test_one_neighbour_listing_many_forged_offers_costs_one_fetch(tmp_path: Path) -> None:
    forged = {}
    for version in range(100, 150):
        data = sign_manifest(V2, OTHER, version)
        forged[hashlib.sha256(data).hexdigest()] = (data, version)
    fetched: list[str] = []

    async def advert(request: web.Request) -> web.Response:
        return web.json_response({"manifests": [{"hash": "00" * 32, "have": "", "signed": {
            "hash": h, "signer": OWNER.peer_id, "version": v}} for h, (_, v) in forged.items()]})

    async def document(request: web.Request) -> web.Response:
        fetched.append(request.match_info["digest"])
        return web.Response(body=forged[request.match_info["digest"]][0])

    app = web.Application()
    app.router.add_get("/v1/shards", advert)
    app.router.add_get("/v1/shards/{digest}", document)
    served = Served(app)
    try:
        metrics = Metrics(process=False)
        assert SignedManifestFinder(OWNER.public_key, metrics, stall_s=5.0).newest([served.address]) is None
    finally:
        served.close()
    assert len(fetched) == 1 and metrics.get("manifests_refused_total", reason="untrusted_signer") == 1

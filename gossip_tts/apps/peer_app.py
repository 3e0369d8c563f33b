"""`gossip-tts peer`: build a TTS replica and train it, gossiping with the swarm (or alone)."""

from __future__ import annotations

import hashlib
import logging
import signal
import threading
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from gossip_tts.apps import group_app
from gossip_tts.model import count_parameters
from gossip_tts.apps.peer_config import PeerAppConfig
from gossip_tts.apps.swarm_data import start_swarm_data, swarm_id_of
from gossip_tts.train.parallel import init_group
from gossip_tts.train.trainer import TTSTrainer
from peer.local.averaged_weights import SoloAverage
from peer.local.group import GroupTrainer
from peer.local.loop import LoopResult, run_loop
from peer.startup import build_peer
from protocol import Identity

__all__ = ["PeerAppConfig", "default_sources", "load_identity", "run", "sigterm_stops"]


def default_sources(cache_dir: Path | None, emit=print) -> list[str]:
    """The built-in corpus (made on first use, saying so: it takes seconds) as the data source."""
    from gossip_tts.data import ensure_builtin_corpus

    def announce(folder: Path) -> None:
        emit(f"building the built-in corpus into {folder} (once, about 10 s)…")

    train_dir, _val_dir = ensure_builtin_corpus(cache_dir, announce=announce)
    emit(f"no --data given: training on the built-in corpus at {train_dir}")
    return [str(train_dir)]


def key_seed(public_key: bytes, seed: int) -> int:
    """The data-order seed of the peer with this key: each peer reads its own order of the data."""
    digest = hashlib.blake2b(public_key + seed.to_bytes(8, "little", signed=True), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def load_identity(cfg: PeerAppConfig, emit=print) -> Identity:
    """The peer's key: --key, else one kept beside the checkpoints (stable across restarts), else fresh."""
    path = cfg.key_file
    if path is None and cfg.loop.checkpoint_dir is not None:
        path = Path(cfg.loop.checkpoint_dir) / "peer.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            Identity.generate().save(path)
            emit(f"made a new peer key at {path}")
    return Identity.load(path) if path is not None else Identity.generate()


@contextmanager
def sigterm_stops(stop: threading.Event, emit) -> Iterator[None]:
    """SIGTERM (service managers, `kill`) leaves as gracefully as Ctrl+C: final checkpoint, then exit.

    The handler before it is back once the run ends: a peer run inside another program (a
    test among others) must not leave SIGTERM setting an event nobody waits on."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        emit("SIGTERM: stopping after this step")
        stop.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def run(cfg: PeerAppConfig, stop: threading.Event | None = None, emit=print) -> LoopResult:
    """Train this peer: a lone process, or rank 0 of a torchrun group (the other ranks run
    `group_app.run_follower`; `gossip_tts.cli.peer` picks which, the one place that does)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    group = init_group(cfg.parallel, cfg.train.device)
    stop = stop or threading.Event()
    with sigterm_stops(stop, emit):
        return _train(cfg, group, stop, emit)


def _train(cfg: PeerAppConfig, group, stop: threading.Event, emit) -> LoopResult:
    """Rank 0's (or a lone peer's) run: data, identity, model, then the loop alone or with the swarm."""
    if not cfg.train.sources:
        cfg = cfg.with_train(sources=default_sources(cfg.cache_dir, emit))
    identity = load_identity(cfg, emit)
    swarm = None
    if cfg.seed_from_key:
        cfg = cfg.with_train(seed=key_seed(identity.public_key, cfg.train.seed))
    trainer = None
    try:
        if swarm_id_of(cfg.train.sources) is not None:  # --data swarm:/swarm-key:: fetch a first shard before the model reads one
            if group is not None:
                raise ValueError("--data swarm:HASH / swarm-key:PUBKEY is not supported with --nproc > 1 yet: fetch the shards with a "
                                 "one-process peer, then give their folder as --data")
            swarm = start_swarm_data(cfg, identity, stop, emit)
            if swarm is not None:  # the trainer reads the store's listing, which grows as shards arrive
                cfg = cfg.with_train(sources=[str(swarm.store.listing)])
        if group is not None:
            cfg = replace(cfg, train=group_app.shared_train_config(group, cfg.train))
            emit(f"group of {group.world_size} processes ({group.strategy}, {group.backend}): rank 0 gossips for all")
        tts = TTSTrainer(cfg.train, group=group, data=cfg.data, stop=stop if group is None else None)
        trainer = tts if group is None else GroupTrainer(tts, group_app.comm_for(group), verify=cfg.parallel.verify_sync)
        emit(
            f"model {cfg.train.preset} ({count_parameters(tts.model) / 1e6:.2f}M params) on {tts.device}, "
            f"{tts.info.describe()}"
        )
        if cfg.solo:
            average = SoloAverage(cfg.gossip, trainer.param_spec())
            result = run_loop(trainer, cfg.loop, stop=stop, emit=emit, hooks=[average], extra_state=average.state,
                              restore_extra=average.restore)
        else:
            peer = build_peer(trainer, cfg.loop, cfg.gossip, cfg.net, identity, session_cfg=cfg.session, emit=emit,
                              metrics=swarm.metrics if swarm is not None else None,  # one /metrics for gossip and data
                              corpus=swarm)
            result = peer.run(stop)
        if isinstance(trainer, GroupTrainer) and cfg.parallel.verify_sync:
            emit(f"group: every rank held rank 0's parameters after each of {trainer.mixes_verified} mixes")
    finally:
        if trainer is not None:
            trainer.close()
        if swarm is not None:
            swarm.close()
        if group is not None:
            group_app.close_group()
    emit(
        f"stopped at step {result.steps}"
        + (f", loss {result.last_loss:.4f}" if result.last_loss is not None else "")
        + (f", checkpoint in {cfg.loop.checkpoint_dir}" if cfg.loop.checkpoint_dir else "")
    )
    return result

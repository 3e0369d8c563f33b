"""Building a real peer whole, before it starts: the one place its start-up is decided.

In order: the checkpoint is resumed (`--resume`), the final configs are derived from what
was given (trusted keys become the allowed keys; the trainer's capabilities and partner-step
support settle the gossip and session configs), then the node (with a resumed average), its
worker, the driver and the HTTP server are built on them. `GossipPeer.run()` only starts
what this returns. Nothing here opens a socket or starts a thread.
"""

from __future__ import annotations

import dataclasses
import secrets
import threading
import time
from typing import Callable

from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.core.node import GossipNode
from peer.core.placement import place_node
from peer.local import averaged_weights
from peer.local.loop import LOSS_HISTORY_KEY, LoopConfig, resume_if_asked
from peer.local.status_history import LossHistory
from peer.metric_help import expose_from_start
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.driver import AsyncDriver
from peer.net.http_server import HttpServer
from peer.net.node_worker import NodeWorker
from peer.net.trust import load_trusted_keys
from peer.runtime import CorpusService, GossipPeer, PeerParts
from peer.trainer import Trainer
from protocol import Identity


def final_configs(gossip_cfg: GossipConfig, session_cfg: SessionConfig, net_cfg: NetConfig, identity: Identity,
                  trainer: Trainer, emit: Callable[[str], None]) -> tuple[GossipConfig, SessionConfig]:
    """The gossip and session configs the peer runs with: a private swarm's allowed keys (read
    from `net_cfg.trusted_keys`, ours added), the trainer's capabilities, partner steps."""
    if net_cfg.trusted_keys:
        keys = load_trusted_keys(net_cfg.trusted_keys) | {identity.public_key}
        gossip_cfg = dataclasses.replace(gossip_cfg, allowed_keys=keys)
        emit(f"private swarm: talking only to the {len(keys) - 1} keys in {net_cfg.trusted_keys}")
    gossip_cfg = gossip_cfg.for_trainer(trainer.capabilities.additive_steps)
    return gossip_cfg, session_cfg.for_partner_steps(gossip_cfg.partner_steps > 0)


def build_parts(trainer: Trainer, loop_cfg: LoopConfig, gossip_cfg: GossipConfig, net_cfg: NetConfig,
                identity: Identity, *, session_cfg: SessionConfig | None = None, metrics: Metrics | None = None,
                emit: Callable[[str], None] = print, corpus: CorpusService | None = None) -> PeerParts:
    """Resume, derive the final configs, and build every part of a peer on them (see the module
    docstring); `metrics` is the registry /metrics shows (default: a new one)."""
    metrics = metrics if metrics is not None else Metrics()
    expose_from_start(metrics)
    history = LossHistory()
    resumed = resume_if_asked(trainer, loop_cfg, emit)
    gossip_cfg, session_cfg = final_configs(gossip_cfg, session_cfg or SessionConfig(), net_cfg, identity, trainer, emit)
    x0 = trainer.get_flat_params()
    placement = place_node(gossip_cfg, x0.numel(), trainer.capabilities.device, trainer.capabilities.add_in_place)
    if placement.reason:
        emit(placement.reason)
    gossip_cfg = dataclasses.replace(gossip_cfg, max_neighbours=placement.max_neighbours)
    node = GossipNode(gossip_cfg, identity, trainer.param_spec(), x0, now=time.time(), metrics=metrics,
                      entropy=secrets.token_bytes(16), view_gate=threading.Lock(),  # training mixes on its own thread
                      device=placement.device)
    if resumed is not None:  # before the node worker runs: this thread still owns the node
        averaged_weights.restore(node.average, trainer.param_spec(), *resumed)
        history.restore(resumed[1].get(LOSS_HISTORY_KEY))  # the page's curve spans the run before --resume too
    worker = NodeWorker(node, time.time)
    driver = AsyncDriver(worker, session_cfg, net_cfg, metrics, emit, on_adopt=trainer.adopt,
                         probe=trainer.probe_better if trainer.capabilities.probe else None)
    http = HttpServer(driver, worker, net_cfg, metrics, session_cfg, history,
                      corpus.shards if corpus is not None else None)
    return PeerParts(trainer=trainer, loop_cfg=dataclasses.replace(loop_cfg, resume=False),  # resumed above, once
                     gossip_cfg=gossip_cfg, session_cfg=session_cfg, identity=identity, node=node, worker=worker,
                     driver=driver, http=http, metrics=metrics, history=history, emit=emit, corpus=corpus)


def build_peer(trainer: Trainer, loop_cfg: LoopConfig, gossip_cfg: GossipConfig, net_cfg: NetConfig,
               identity: Identity, *, session_cfg: SessionConfig | None = None, metrics: Metrics | None = None,
               emit: Callable[[str], None] = print, corpus: CorpusService | None = None) -> GossipPeer:
    """A peer built whole from its configs (`build_parts`), ready to `run()`."""
    return GossipPeer(build_parts(trainer, loop_cfg, gossip_cfg, net_cfg, identity, session_cfg=session_cfg,
                                  metrics=metrics, emit=emit, corpus=corpus))

"""`PeerAppConfig`, the settings of `gossip-tts peer`, in a module that imports no torch.

`gossip-tts peer --help` reads every default from the config dataclasses (`gossip_tts.cli.settings`);
while this class lived in `gossip_tts.apps.peer_app` (which imports the model, so torch), `--help`
took seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from gossip_tts.data.limits import DataLimits
from gossip_tts.train.config import TrainConfig
from gossip_tts.train.parallel import ParallelConfig
from peer.core.config import SessionConfig
from peer.core.gossip_config import GossipConfig
from peer.local.config import LoopConfig
from peer.net.config import NetConfig
from peer.shards.config import SwarmDataConfig


@dataclass
class PeerAppConfig:
    train: TrainConfig = field(default_factory=TrainConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    gossip: GossipConfig = field(default_factory=GossipConfig)
    net: NetConfig = field(default_factory=NetConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    data: DataLimits = field(default_factory=DataLimits)
    swarm_data: SwarmDataConfig = field(default_factory=SwarmDataConfig)
    solo: bool = False
    """Train alone: no server, no discovery, no gossip."""
    key_file: Path | None = None
    """Identity to use; default: `<checkpoint-dir>/peer.key` (made on first use), else a fresh one."""
    seed_from_key: bool = True
    """Derive the data-order seed from the peer id, so that every peer reads its own order."""
    cache_dir: Path | None = None
    """Where the built-in corpus is generated when no --data is given."""

    def with_train(self, **changes: object) -> "PeerAppConfig":
        """A copy with these `TrainConfig` fields changed (validated again): how a run resolves
        its sources and seed without writing into the settings it was given."""
        return replace(self, train=replace(self.train, **changes))

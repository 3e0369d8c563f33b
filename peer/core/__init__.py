"""The sans-IO core of a peer: gossip node, neighbour table, mixer and session.

Nothing here opens a socket, starts a thread or reads a clock; the drivers
(`peer.net.driver` for a real peer, `simnet.driver.sim_peer` in simulation) perform what it decides,
and import it from here: `__all__` is what a driver needs. Each name is imported when first
asked for, so importing one light module (`peer.core.config`, which `--help` reads) does
not import torch with the node. See docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_names

if TYPE_CHECKING:
    from peer.core.actions import (
        Action, Adopt, Count, Exchange, FetchState, Forget, JoinDone, Log, Publish, SendHello,
    )
    from peer.core.addresses import PeerInfo, format_address, parse_address
    from peer.core.config import SessionConfig
    from peer.core.driver_contract import Driver, perform
    from peer.core.gossip_config import GossipConfig
    from peer.core.fetched import FetchedStates
    from peer.core.hello import make_hello, read_hello
    from peer.core.mixer import Mixer
    from peer.core.neighbour import ExchangeResult
    from peer.core.node import GossipNode
    from peer.core.session import Session
    from peer.core.table import NeighbourHealth

_HOME = {
    # what the session asks a driver to do
    **dict.fromkeys(("Action", "Adopt", "Count", "Exchange", "FetchState", "Forget", "JoinDone", "Log", "Publish",
                     "SendHello"), "peer.core.actions"),
    # the contract both drivers keep, and its dispatch
    **dict.fromkeys(("Driver", "perform"), "peer.core.driver_contract"),
    # the session and what it is built from or told
    "Session": "peer.core.session", "SessionConfig": "peer.core.config", "GossipConfig": "peer.core.gossip_config",
    **dict.fromkeys(("PeerInfo", "format_address", "parse_address"), "peer.core.addresses"),
    **dict.fromkeys(("make_hello", "read_hello"), "peer.core.hello"),
    # what a driver holds beside it
    "GossipNode": "peer.core.node", "ExchangeResult": "peer.core.neighbour", "Mixer": "peer.core.mixer",
    "FetchedStates": "peer.core.fetched",
    "NeighbourHealth": "peer.core.table",
}
"""Each public name and the module that defines it."""

__all__ = list(_HOME)


__getattr__ = lazy_names(__name__, _HOME)

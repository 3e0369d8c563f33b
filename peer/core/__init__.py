"""The sans-IO core of a peer: gossip node, neighbour table, mixer and session.

Nothing here opens a socket, starts a thread or reads a clock; the drivers
(`peer.net.driver` for a real peer, `simnet.sim_peer` in simulation) perform what it decides.
See docs/architecture.md.
"""

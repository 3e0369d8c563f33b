"""simnet's virtual-clock driver of the real peer core: the simulated peer (`sim_peer`, its server
half `sim_server`, its node worker `sim_worker`) and its corpus (`shard_peer`, `shard_transfer`,
`data_plane`). It decides nothing and knows no attack: attacking peers subclass it."""

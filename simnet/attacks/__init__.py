"""Byzantine peers and control arms, each built with its attack when the swarm is built: the lying
trainer (`trainer`), the node variants (`nodes`) and the peers that run them (`peers`)."""

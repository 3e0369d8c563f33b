"""What simulated peers live in: the scheduler and its virtual clock, links, the cost and speed
models, topology, churn, the model registry, and `SimWorld`, what each peer is handed.
Nothing here knows a peer: the driver, attacks and runs build on it."""

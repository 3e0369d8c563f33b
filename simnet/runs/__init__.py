"""Scenarios and runs: config, scenario files, the gossip swarm and the baselines, the runner,
reports and plots, and the CLI's entry point. Builds on the world, the driver and the attacks."""

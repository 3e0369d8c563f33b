"""Attacks on real peer processes on 127.0.0.1: the same fixtures as the integration tests."""

from tests.integration.conftest import corpus, swarm_name  # noqa: F401  (pytest fixtures)

"""Corpus shards shared by content hash: the manifest, adverts, the on-disk store, fetch planning and fetching.

A swarm shares its latent tars without a central bucket: each peer serves the shards it
holds (`peer.net.shard_routes`) and fetches those it lacks from neighbours, checking every byte
against the manifest's SHA-256 before anything reads it. Model-agnostic: a shard is bytes.
"""

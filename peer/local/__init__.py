"""The training thread of a peer: the loop, its checkpoints, the poison guard, averaged weights.

What happens here needs no network: a `--solo` peer runs only this; a networked one adds
`peer.net` beside it, joined through the step-boundary hook (`peer.boundary`).
See docs/architecture.md.
"""

"""The real peer's network side: the asyncio driver, its HTTP server, the node worker, discovery.

It runs on the event-loop thread and the node worker thread, and performs what
`peer.core.session.Session` decides; the training thread (`peer.local`) never imports it.
See docs/architecture.md.
"""

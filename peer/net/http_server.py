"""The HTTP server of a real peer: binding, serving and stopping its routes (`peer.net.http_app`).

It lives apart from the driver so that the face points one way: the routes ask the driver
only through its declared surface (`PeerFace`), and the driver never imports them. The
runtime starts the server first (the driver advertises the port it bound) and stops it
after the driver, as one request in progress may still need the node worker.
"""

from __future__ import annotations

import logging

from aiohttp import web

from peer.core.addresses import parse_address
from peer.core.config import SessionConfig
from peer.local.status_history import LossHistory
from peer.metrics import Metrics
from peer.net.config import NetConfig
from peer.net.errors import listen_failure
from peer.net.http_app import PeerFace, build_app
from peer.net.connection_caps import CappedSite
from peer.net.http_guard import QuietBadRequests, response_counter
from peer.net.node_worker import NodeWorker
from peer.net.refusal_bench import RefusalBench
from peer.net.shard_routes import ShardServer

log = logging.getLogger(__name__)
LINGER_S = 0.0
"""How long the server keeps reading (and dropping) the rest of a body it refused unread. 0:
the connection is closed after the answer: reading on lets refused senders keep streaming, and
buffers what is dropped (docs/benchmarks/peer.md#the-http-servers-linger-and-shutdown-timeouts)."""
READ_AHEAD_BYTES = 1 << 16
"""How much of a body aiohttp buffers ahead of the guard on each connection (its `read_bufsize`;
reading pauses past twice this, plus the one socket read of up to 256 KiB that crossed it): ~0.4
MB unread per connection on top of the body budget, where aiohttp's default of 256 KiB allows
~0.75 MB. The kernel's own socket buffer keeps an honest transfer flowing meanwhile."""
SHUTDOWN_TIMEOUT_S = 5.0
"""At stop, how long a request in progress (a shard upload, a /v1/state answer to a slow
reader) may go on before it is cancelled; the cancelled handler gets as long again to end.
Well inside the runtime's whole wait for a stop (`peer.runtime.STOP_WAIT_S`)."""


class HttpServer:
    """Serves a peer's routes on `net_cfg.listen`, its connections capped (`peer.net.connection_caps`);
    /v1/status shows `history`, the loss curve the training loop records into."""

    def __init__(self, face: PeerFace, worker: NodeWorker, net_cfg: NetConfig, metrics: Metrics,
                 session_cfg: SessionConfig, history: LossHistory, shards: ShardServer | None = None) -> None:
        self.net_cfg, self.metrics = net_cfg, metrics
        self.bench = RefusalBench.of(net_cfg)
        self._app = build_app(face, worker, net_cfg, metrics, session_cfg, history, shards, self.bench)
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Bind and serve; the port bound (`listen` may ask for port 0). A bind that fails raises
        one error naming the address and what to do (`peer.net.errors.listen_failure`)."""
        host, port = parse_address(self.net_cfg.listen, listener=True)
        self._runner = web.AppRunner(
            self._app, auto_decompress=False,  # a refused compressed body is then not inflated either
            keepalive_timeout=self.net_cfg.idle_timeout_s, lingering_time=LINGER_S, read_bufsize=READ_AHEAD_BYTES,
            access_log_class=response_counter(self.metrics), access_log=log, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            logger=QuietBadRequests(logging.getLogger("aiohttp.server"), {}),
        )
        await self._runner.setup()
        site = CappedSite(self._runner, host, port, cfg=self.net_cfg, metrics=self.metrics, bench=self.bench)
        try:
            await site.start()
        except OSError as exc:
            raise listen_failure(self.net_cfg.listen, exc) from None
        return site.port

    async def stop(self) -> None:
        """Stop serving: requests in progress get `SHUTDOWN_TIMEOUT_S`, then are cancelled."""
        if self._runner is not None:
            await self._runner.cleanup()

"""The codec of one publish at a long period: the configured codec's bytes per step, spent on a denser update.

With error feedback (CHOCO-SGD) a top-k codec sends the largest f of the entries of x − x̂ at
each publish, and the rest waits. What a period adds spreads over all entries, so x̂ trails x
by about 1 / f periods: 10 steps at a publish every step with top-10%, 640 steps at a publish
every 64, where the consensus step then averages copies that far behind and the peers barely
agree (docs/mixing.md#a-long-publish-period). At a period of H steps the fraction is f · H'
instead (H' the largest power of two not above H, so a peer switches codec rarely), and the
plain value codec once that reaches 1: the public copy trails by at most about ten steps or
one period, and a peer sends no more bytes per step than the configured codec at a publish
every step. The mixing rate follows the codec actually sent (`gossip_config.default_gamma`).

Codec specs with options (`topk:0.1,block=…`) and dense codecs are sent as configured.
"""

from __future__ import annotations

from decimal import Decimal

from peer.core.cadence import PublishPeriod
from protocol import CodecBase, parse_codec

SPARSE = ("topk", "randk")


def codec_for_period(compression: str, period_steps: int) -> str:
    """The canonical codec spec to publish with at a period of `period_steps` local steps."""
    head, plus, values = compression.partition("+")
    name, _colon, arg = head.partition(":")
    if name not in SPARSE or "," in arg or period_steps <= 1:
        return compression
    scale = 1 << (int(period_steps).bit_length() - 1)
    fraction = Decimal(arg) * scale
    if fraction >= 1:
        return parse_codec(values).spec if plus else "fp16"
    return parse_codec(f"{name}:{format(fraction.normalize(), 'f')}{plus}{values}").spec


class PeriodCodecs:
    """The node's codec per publish: it measures our period (`PublishPeriod`) and picks the
    codec for it (`codec_for_period`) when `per_period`, else always the configured one."""

    def __init__(self, compression: str, gossip_every: int, per_period: bool) -> None:
        self.compression, self.per_period = compression, per_period
        self.period = PublishPeriod(gossip_every)
        """Our steps per publish as measured (partner steps read it too)."""
        self._parsed: dict[str, CodecBase] = {compression: parse_codec(compression)}

    def published(self, step: int) -> CodecBase:
        """We publish at the trainer's `step`: the codec to send it with."""
        self.period.published(step)
        spec = codec_for_period(self.compression, self.period.steps()) if self.per_period else self.compression
        if spec not in self._parsed:
            self._parsed[spec] = parse_codec(spec)
        return self._parsed[spec]

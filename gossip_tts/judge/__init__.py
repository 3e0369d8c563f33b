"""The judge: word and character error rates (an ASR), speaker similarity (a speaker encoder)
and a MOS estimate (DNSMOS) of generated clips, beside controls that bound each figure.

The listening models come from the `[judge]` extra and are loaded only when a judge runs, so
importing this package needs none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_names

if TYPE_CHECKING:
    from .app import JudgeReport, judge, run
    from .config import JudgeConfig
    from .ears import EAR_RATE, Ears

_HOME = {
    **dict.fromkeys(("JudgeReport", "judge", "run"), "gossip_tts.judge.app"),
    "JudgeConfig": "gossip_tts.judge.config",
    **dict.fromkeys(("EAR_RATE", "Ears"), "gossip_tts.judge.ears"),
}
"""Each public name and the module that defines it, imported when first asked for: `judge --help`
reads `JudgeConfig`'s defaults without importing numpy and torch with the ears."""

__all__ = list(_HOME)

__getattr__ = lazy_names(__name__, _HOME)

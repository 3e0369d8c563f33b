"""The judge: word and character error rates (an ASR), speaker similarity (a speaker encoder)
and a MOS estimate (DNSMOS) of generated clips, beside controls that bound each figure.

The listening models come from the `[judge]` extra and are loaded only when a judge runs, so
importing this package needs none of them.
"""

from .app import JudgeConfig, JudgeReport, judge, run
from .ears import EAR_RATE, Ears

__all__ = ["EAR_RATE", "Ears", "JudgeConfig", "JudgeReport", "judge", "run"]

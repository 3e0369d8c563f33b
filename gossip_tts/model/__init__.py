"""Echo-style DiT for text-to-speech: config and presets, the model, the rectified-flow loss,
the guided Euler sampler, and a FLOP counter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_names

if TYPE_CHECKING:
    from gossip_tts.model.config import PRESETS, ModelConfig, count_parameters, model_config
    from gossip_tts.model.dit import Conditions, EchoDiT
    from gossip_tts.model.flops import forward_flops, train_flops_per_sample
    from gossip_tts.model.flow import eval_loss, flow_matching_loss, masked_mse, sample_t
    from gossip_tts.model.guidance import GUIDANCE_MODES, GuidanceConfig
    from gossip_tts.model.sampler import sample

_HOME = {
    **dict.fromkeys(("PRESETS", "ModelConfig", "count_parameters", "model_config"), "gossip_tts.model.config"),
    **dict.fromkeys(("Conditions", "EchoDiT"), "gossip_tts.model.dit"),
    **dict.fromkeys(("forward_flops", "train_flops_per_sample"), "gossip_tts.model.flops"),
    **dict.fromkeys(("eval_loss", "flow_matching_loss", "masked_mse", "sample_t"), "gossip_tts.model.flow"),
    **dict.fromkeys(("GUIDANCE_MODES", "GuidanceConfig"), "gossip_tts.model.guidance"),
    "sample": "gossip_tts.model.sampler",
}
"""Each public name and the module that defines it, imported when first asked for: reading the
guidance modes (`gossip_tts.model.guidance`, which synthesize's `--help` offers) imports no torch."""

__all__ = list(_HOME)

__getattr__ = lazy_names(__name__, _HOME)

"""Echo-style DiT for text-to-speech: config and presets, the model, the rectified-flow loss,
the guided Euler sampler, and a FLOP counter."""

from gossip_tts.model.config import PRESETS, ModelConfig, count_parameters, model_config
from gossip_tts.model.dit import Conditions, EchoDiT
from gossip_tts.model.flops import forward_flops, train_flops_per_sample
from gossip_tts.model.flow import eval_loss, flow_matching_loss, masked_mse, sample_t
from gossip_tts.model.sampler import GUIDANCE_MODES, GuidanceConfig, sample

__all__ = [
    "GUIDANCE_MODES",
    "GuidanceConfig",
    "PRESETS",
    "Conditions",
    "EchoDiT",
    "ModelConfig",
    "count_parameters",
    "eval_loss",
    "flow_matching_loss",
    "forward_flops",
    "masked_mse",
    "model_config",
    "sample",
    "sample_t",
    "train_flops_per_sample",
]

"""A tiny EchoDiT with every weight random, shared by the flow and sampler tests.

The real init zeroes the output and AdaLN up-projections, so an untrained model predicts
exactly 0; tests of the loss and the sampler need a model whose output depends on its input.
"""

import torch

from gossip_tts.model import EchoDiT, model_config


def random_tiny_model(latent_dim: int) -> EchoDiT:
    torch.manual_seed(0)
    model = EchoDiT(model_config("tiny", latent_dim))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, p.shape[-1] ** -0.5) if p.dim() > 1 else p.fill_(1.0)
    return model

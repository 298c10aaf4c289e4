"""The generator's and discriminator's objectives."""

from srgan.losses.adversarial import OBJECTIVES, Objective, r1_penalty
from srgan.losses.criterion import GeneratorCriterion
from srgan.losses.perceptual import VGGFeatures, build_vgg_features, perceptual_loss
from srgan.losses.pixel import image_loss, tv_loss

__all__ = [
    "OBJECTIVES",
    "Objective",
    "GeneratorCriterion",
    "VGGFeatures",
    "build_vgg_features",
    "image_loss",
    "perceptual_loss",
    "r1_penalty",
    "tv_loss",
]

"""GeneratorCriterion: the generator's objective, a weighted sum of image,
adversarial, perceptual (VGG) and total-variation terms, and the artefact
and colour terms: LDL, focal frequency, MS-SSIM + L1, colour and luma."""

from __future__ import annotations

import torch
from torch import nn

from srgan.configs.schema import LossConfig
from srgan.losses.adversarial import OBJECTIVES
from srgan.losses.colour import colour_loss, luma_loss
from srgan.losses.frequency import focal_frequency_loss
from srgan.losses.ldl import ldl_loss
from srgan.losses.ms_ssim import ms_ssim_l1_loss
from srgan.losses.perceptual import VGGFeatures, build_vgg_features, perceptual_loss
from srgan.losses.pixel import image_loss, tv_loss


class GeneratorCriterion(nn.Module):
    """Calling it returns the weighted total and each unweighted term. It skips
    the terms weighted 0, and builds no VGG when the perceptual weight is 0;
    building one raises SrganError when its weights cannot be had
    (build_vgg_features)."""

    def __init__(self, config: LossConfig, d_loss: str, vgg: VGGFeatures | None = None):
        super().__init__()
        self.image_kind = config.image
        self.sharpen = config.sharpen_targets  # which terms compare with the unsharp-masked HR
        self.adversarial = OBJECTIVES[d_loss].g_loss
        self.perceptual_criterion = config.perceptual.criterion
        self.weights = {
            "image": config.weights.image,
            "adversarial": config.weights.adversarial,
            "perceptual": config.weights.perceptual,
            "tv": config.weights.tv,
            "ldl": config.weights.ldl,
            "ffl": config.weights.ffl,
            "ms_ssim": config.weights.ms_ssim,
            "colour": config.weights.colour,
            "luma": config.weights.luma,
        }
        self.ms_ssim_options, self.colour_window, self.ffl_alpha = (
            config.ms_ssim,
            config.colour.window,
            config.ffl.alpha,
        )
        if self.weights["perceptual"] > 0 and vgg is None:
            vgg = build_vgg_features(config.perceptual)
        self.vgg = vgg if self.weights["perceptual"] > 0 else None

    def forward(
        self,
        sr: torch.Tensor,
        hr: torch.Tensor,
        fake_logit: torch.Tensor | None,
        real_logit: torch.Tensor | None = None,
        hr_sharp: torch.Tensor | None = None,
        ema_sr: torch.Tensor | None = None,
        adversarial_scale: float = 1.0,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`fake_logit` is D(G(z)) under the current D; None leaves the
        adversarial term out (the generator-only pretraining phase).
        `real_logit` is D(x) under the same D, for objectives that need it
        (relativistic), computed without gradient. `hr_sharp`: the unsharp-
        masked HR (losses/sharpen.py), the target of the terms that
        `self.sharpen` names; needed when it names image or perceptual.
        `ema_sr`: the EMA generator's output for the same LR, without
        gradient; needed when the ldl weight is above 0 (self.needs_ema).
        `adversarial_scale` multiplies the adversarial weight (gan.warmup_steps'
        ramp); the term itself is returned unweighted, as every term."""
        terms: dict[str, torch.Tensor] = {}
        if self.weights["image"] > 0:
            terms["image"] = image_loss(sr.float(), self.target(hr, hr_sharp, self.sharpen.image), self.image_kind)
        if self.weights["adversarial"] > 0 and fake_logit is not None:
            terms["adversarial"] = self.adversarial(real_logit, fake_logit)
        if self.vgg is not None:
            target = self.target(hr, hr_sharp, self.sharpen.perceptual)
            terms["perceptual"] = perceptual_loss(self.vgg, sr, target, self.perceptual_criterion)
        if self.weights["tv"] > 0:
            terms["tv"] = tv_loss(sr.float())
        if self.needs_ema:
            assert ema_sr is not None, "loss.weights.ldl is above 0: the step passes the EMA generator's output"
            terms["ldl"] = ldl_loss(sr.float(), hr, ema_sr.float())
        if self.weights["ffl"] > 0:
            terms["ffl"] = focal_frequency_loss(sr, hr, self.ffl_alpha)
        if self.weights["ms_ssim"] > 0:
            options = self.ms_ssim_options
            terms["ms_ssim"] = ms_ssim_l1_loss(sr, hr, options.alpha, options.channel)
        if self.weights["colour"] > 0:
            terms["colour"] = colour_loss(sr, hr, self.colour_window)
        if self.weights["luma"] > 0:
            terms["luma"] = luma_loss(sr, hr)
        if not terms:
            return sr.sum() * 0.0, terms  # every weight 0: a zero loss that still backpropagates
        weights = self.weights | {"adversarial": self.weights["adversarial"] * adversarial_scale}
        total = sum(weights[name] * value for name, value in terms.items())
        assert isinstance(total, torch.Tensor)  # `terms` is not empty, so sum() never returns its start, 0
        return total, terms

    @property
    def needs_ema(self) -> bool:
        """Whether the step must pass the EMA generator's output (LDL is weighted)."""
        return self.weights["ldl"] > 0

    @staticmethod
    def target(hr: torch.Tensor, hr_sharp: torch.Tensor | None, sharpened: bool) -> torch.Tensor:
        """The HR a term compares with: the sharpened one when the config says so."""
        if not sharpened:
            return hr
        assert hr_sharp is not None, "loss.sharpen_targets names this term: the step passes hr_sharp"
        return hr_sharp

"""Training: the alternating D/G step and the loop around it."""

from srgan.training.loop import train
from srgan.training.signals import TrainingInterrupted
from srgan.training.step import TrainingParts, gan_step

__all__ = ["TrainingInterrupted", "TrainingParts", "gan_step", "train"]

"""pi0 dimensions and settings: pi0.5's (the same PaliGemma vision tower, LM and Gemma expert
shapes), with pi0's tokenizer length. Full size is pi0.5's: SigLIP so400m + Gemma 2B + a Gemma
300M expert; the expert has plain Gemma norms and reads the state as a token (models/pi0/weights.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from embodied_ros.models.pi05.config import Pi05Config

ARCHITECTURE = "pi0"


@dataclass(frozen=True)
class Pi0Config(Pi05Config):
    FAMILY: ClassVar[str] = ARCHITECTURE
    tokenizer_max_length: int = 48  # LeRobot PI0Config's default (pi0.5: 200)

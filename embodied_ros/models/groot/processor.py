"""GR00T N1.7's processor side as LeRobot 0.6.1 runs it, as pure functions over arrays.

    view_frame      a camera frame (H, W, 3) uint8 -> the view the backbone sees: squashed to a
                    square of the target height, centre-cropped by crop/target, resized to the
                    target size (bicubic with antialiasing, in uint8 as torchvision does it)
    patch_rows      the view -> Qwen3-VL patch rows [gh*gw, 3*T*P*P] and its grid (gh, gw); a view
                    off the pixel bounds or the patch*merge grid is resized first (Qwen's smart resize)
    task_text       the instruction as the prompt gets it: lower case, only letters, digits,
                    spaces and underscores; an empty one is "Perform the task."
    prompt_text     the Qwen3-VL chat template for one user turn of views then text, each view's
                    <|image_pad|> repeated once per LM token of that view
    normalize_state raw state -> [-1, 1] by the min/max statistics (a joint whose min equals its
                    max gives 0), clipped, zero-padded to max_state_dim
    decode_actions  model actions -> physical units: clipped to [-1, 1], then the inverse map (a
                    joint whose min equals its max gives its min)

The cameras a case has are fed in sorted-name order, a missing one is one view fewer, as LeRobot's
input packing does without checkpoint modality keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from embodied_ros.backbone import qwen3_vl
from embodied_ros.sequence.resample import resize_bicubic_uint8

DEFAULT_TASK = "Perform the task."
IMAGE_PAD, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"


@dataclass(frozen=True)
class ProcessorConfig:
    """LeRobot's N1.7 processor settings a bundle carries (the defaults are LeRobot's own)."""

    image_target_size: tuple[int, int] = (256, 256)
    image_crop_size: tuple[int, ...] = (230, 230)  # (): no crop
    shortest_image_edge: int = 0  # the square's side before the crop (0: the target height)
    min_pixels: int = 65536  # Qwen3-VL's image processor bounds (size.shortest_edge / longest_edge)
    max_pixels: int = 16777216
    image_mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    image_std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    formalize_language: bool = True
    clip_state: bool = True
    clip_actions: bool = True
    embodiment_id: int = 10  # LeRobot's "new_embodiment"

    def __post_init__(self) -> None:
        height, width = self.image_target_size
        if height < 1 or width < 1:
            raise ValueError(f"processor.image_target_size must be positive, got {self.image_target_size}")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"processor pixel bounds must satisfy 0 < min <= max, got "
                             f"{self.min_pixels}, {self.max_pixels}")
        if any(s <= 0 for s in self.image_std):
            raise ValueError(f"processor.image_std must be positive, got {self.image_std}")

    @property
    def crop_fraction(self) -> float | None:
        return self.image_crop_size[0] / self.image_target_size[0] if self.image_crop_size else None


def view_frame(image: np.ndarray, config: ProcessorConfig, camera: str = "camera") -> np.ndarray:
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or min(image.shape[:2]) < 1:
        raise ValueError(f"{camera}: expected an (H, W, 3) uint8 RGB image, got {image.dtype} {image.shape}")
    height, width = config.image_target_size
    side = config.shortest_image_edge or height
    frame = resize_bicubic_uint8(image, side, side)
    fraction = config.crop_fraction
    if fraction is not None and 0.0 < fraction < 1.0:
        crop_h = max(1, int(round(frame.shape[0] * fraction)))
        crop_w = max(1, int(round(frame.shape[1] * fraction)))
        top, left = (frame.shape[0] - crop_h) // 2, (frame.shape[1] - crop_w) // 2
        frame = frame[top:top + crop_h, left:left + crop_w]
    if frame.shape[:2] != (height, width):
        frame = resize_bicubic_uint8(frame, height, width)
    return frame


def smart_size(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen's image size: both sides multiples of `factor` nearest the input, scaled into the pixel bounds."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"a {height} x {width} view is too elongated for the Qwen image processor (ratio > 200)")
    new_h, new_w = round(height / factor) * factor, round(width / factor) * factor
    if new_h * new_w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        new_h = max(factor, math.floor(height / beta / factor) * factor)
        new_w = max(factor, math.floor(width / beta / factor) * factor)
    elif new_h * new_w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        new_h, new_w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return new_h, new_w


def patch_rows(frame: np.ndarray, config: ProcessorConfig, patch: int, temporal: int,
               merge: int) -> tuple[np.ndarray, tuple[int, int]]:
    """The view's Qwen3-VL patch rows (backbone/qwen3_vl.pixel_rows) after Qwen's smart resize."""
    height, width = smart_size(frame.shape[0], frame.shape[1], patch * merge, config.min_pixels, config.max_pixels)
    if (height, width) != frame.shape[:2]:
        frame = resize_bicubic_uint8(frame, height, width)
    return qwen3_vl.pixel_rows(frame, patch, temporal, merge, config.image_mean, config.image_std)


def task_text(task: str | None, formalize: bool = True) -> str:
    text = task or DEFAULT_TASK
    if formalize:
        text = "".join(ch for ch in text.lower() if ch.isalnum() or ch.isspace() or ch == "_")
    return text


def prompt_text(task: str, view_tokens: list[int]) -> str:
    views = "".join(VISION_START + IMAGE_PAD * int(n) + VISION_END for n in view_tokens)
    return f"<|im_start|>user\n{views}{task}<|im_end|>\n"


def _span(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    span = high - low
    varies = span != 0
    return np.where(varies, span, np.float32(1.0)), varies


def normalize_state(state: np.ndarray, low: np.ndarray, high: np.ndarray, max_state_dim: int,
                    clip: bool = True) -> np.ndarray:
    state = np.asarray(state, np.float32).reshape(-1)
    span, varies = _span(low, high)
    mapped = np.float32(2.0) * (state - low) / span - np.float32(1.0)
    normalized = np.where(varies, mapped, np.float32(0.0)).astype(np.float32)
    if clip:
        normalized = np.clip(normalized, -1.0, 1.0)
    padded = np.zeros(max_state_dim, np.float32)
    padded[: normalized.size] = normalized
    return padded


def decode_actions(actions: np.ndarray, low: np.ndarray, high: np.ndarray, clip: bool = True) -> np.ndarray:
    actions = np.asarray(actions, np.float32)
    if clip:
        actions = np.clip(actions, -1.0, 1.0)
    span, varies = _span(low, high)
    physical = (actions + np.float32(1.0)) * np.float32(0.5) * span + low
    return np.where(varies, physical, low).astype(np.float32)

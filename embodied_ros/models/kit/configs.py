"""A model family's config: the fields and checks every action-chunk VLA's config shares, the config as
plain values and back, its split into a bundle's sections (model, solver, robot metadata) and back, and
the stage contract's spec of a family whose `act` samples an action chunk from noise."""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from typing import Any, ClassVar, Mapping

from embodied_ros.backbone.checks import positive, require
from embodied_ros.pipeline.stages import ModelSpec

ROBOT_KEYS = ("state_names", "action_names", "action_period_s")  # a config's robot metadata section


class ActionChunkConfig:
    """What a VLA's config dataclass derives from its fields: state and action sizes, the LM's embedding
    scale, the checks every such config makes, and the config as plain values and as a bundle's sections
    (an Euler solver's settings) and back. A family's config names its `FAMILY` and its `NESTED` configs
    ({field: class}); `TUPLE_FIELDS` are stored as lists."""

    relative_action_mask: tuple[bool, ...] = ()  # absolute actions, unless the family's config has the field
    FAMILY: ClassVar[str]
    NESTED: ClassVar[Mapping[str, type]]
    TUPLE_FIELDS: ClassVar[tuple[str, ...]] = ("camera_names", "state_names", "action_names")
    DEFAULT_NOISE_SEED: ClassVar[int] = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain nested values (JSON-safe) that `from_dict` reads back."""
        return plain_config(self, self.TUPLE_FIELDS)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        return config_from_plain(cls, values, cls.FAMILY, cls.NESTED)

    def bundle_sections(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(model config, solver settings, robot metadata) as a bundle stores them."""
        return split_bundle_sections(self.to_dict())

    @classmethod
    def from_bundle_sections(cls, model: Mapping[str, Any], solver: Mapping[str, Any], robot: Mapping[str, Any]):
        return cls.from_dict(join_bundle_sections(cls.FAMILY, model, solver, robot, cls.DEFAULT_NOISE_SEED))

    @property
    def action_dim(self) -> int:
        return len(self.action_names)

    @property
    def state_dim(self) -> int:
        return len(self.state_names)

    @property
    def embed_scale(self) -> float:
        return math.sqrt(self.lm.width)

    def check_chunk_settings(self, family: str) -> None:
        """Sizes positive, cameras present and distinct, names within the padded sizes, a positive
        control period, ordered time periods and an even expert width (sin/cos time embedding)."""
        positive(family, vocab_size=self.vocab_size, chunk_size=self.chunk_size, max_action_dim=self.max_action_dim,
                 max_state_dim=self.max_state_dim, num_inference_steps=self.num_inference_steps,
                 tokenizer_max_length=self.tokenizer_max_length)
        require(len(self.camera_names) > 0, f"{family} needs at least one camera")
        require(len(set(self.camera_names)) == len(self.camera_names), f"camera names repeat: {self.camera_names}")
        require(0 < len(self.action_names) <= self.max_action_dim,
                f"{len(self.action_names)} action names for max_action_dim {self.max_action_dim}")
        require(len(self.state_names) <= self.max_state_dim,
                f"{len(self.state_names)} state names for max_state_dim {self.max_state_dim}")
        require(self.action_period_s > 0, f"action_period_s must be positive, got {self.action_period_s}")
        require(0 < self.time_min_period < self.time_max_period,
                f"time periods must satisfy 0 < min < max, got {self.time_min_period}, {self.time_max_period}")
        width = self.expert.width
        require(width % 2 == 0, f"expert width must be even (sin/cos time embedding), got {width}")


def plain_config(config, tuple_fields: tuple[str, ...]) -> dict[str, Any]:
    """A config dataclass as plain nested values (JSON-safe), its tuple fields as lists."""
    values = asdict(config)
    for key in tuple_fields:
        values[key] = list(values[key])
    return values


def config_from_plain(cls, values: Mapping[str, Any], family: str, nested: Mapping[str, type]):
    """`cls` from `plain_config` values; the fields in `nested` are built from their own dicts first."""
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    require(not unknown, f"unknown {family} config keys: {unknown}")
    values = dict(values)
    try:
        for key, kind in nested.items():
            values[key] = kind(**values[key])
        return cls(**values)
    except (KeyError, TypeError) as error:
        raise ValueError(f"incomplete or malformed {family} config: {error}") from None


def split_bundle_sections(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Plain config values -> (model config, solver settings, robot metadata) as a bundle stores them."""
    values = dict(values)
    solver = {"method": "euler", "num_inference_steps": values.pop("num_inference_steps"),
              "noise_seed": values.pop("noise_seed")}
    robot = {key: values.pop(key) for key in ROBOT_KEYS}
    return values, solver, robot


def join_bundle_sections(family: str, model: Mapping[str, Any], solver: Mapping[str, Any],
                         robot: Mapping[str, Any], default_noise_seed: int) -> dict[str, Any]:
    """A bundle's (model config, solver settings, robot metadata) -> the plain values of its config."""
    method = solver.get("method", "euler")
    require(method == "euler", f"{family} runs the Euler solver; the bundle asks for {method!r}")
    values = dict(model)
    values["num_inference_steps"] = solver["num_inference_steps"]
    values["noise_seed"] = solver.get("noise_seed", default_noise_seed)
    values.update({key: robot[key] for key in ROBOT_KEYS})
    return values


def config_of(bundle, config_type):
    """The model config from a bundle's metadata alone (no weights read)."""
    robot = bundle.robot
    if robot is None:
        raise ValueError(f"{bundle.path}: {bundle.architecture} bundle lacks robot metadata "
                         "(state/action names, action period)")
    return config_type.from_bundle_sections(
        bundle.config, bundle.solver,
        {"state_names": robot.state_names, "action_names": robot.action_names,
         "action_period_s": robot.action_period_s})


def action_model_spec(config, architecture: str, real_time_chunking: bool = False) -> ModelSpec:
    """The stage contract's spec of a VLA that samples an action chunk from noise [chunk, max_action_dim]."""
    size = config.vision.image_size
    return ModelSpec(
        architecture=architecture, camera_names=config.camera_names, image_size=(size, size),
        state_names=config.state_names, action_names=config.action_names, chunk_size=config.chunk_size,
        action_period_s=config.action_period_s, noise_shape=(config.chunk_size, config.max_action_dim),
        world_noise_shape=None, has_world_model=False, real_time_chunking=real_time_chunking,
        noise_seed=config.noise_seed)

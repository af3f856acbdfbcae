"""LingBot-VA (lerobot's layout, lerobot_bundle.py) as the four stages of pipeline/stages.py.

    encode         camera images -> model-size frames in [-1, 1]                 [n_cam, 3, H, W]
    build_prefix   the instruction -> its UMT5 embeddings (and the negative prompt's when a stream
                   is guided), encoded once per instruction; the frames passed on
    predict_world  one chunk of the episode the world node carries (world_episode.py): keyframes
                   through the VAE streams, feedback, video then action sampling in the shared KV
                   pool -> the predicted latents and the chunk's executed rows (model space)
    act            the latest prediction's rows, unnormalized (lerobot's QUANTILES post-processor),
                   timed from that prediction's observation

Video and actions are sampled in one transformer with one KV pool, so the action stream is sampled
with the video by the world predictor and `act` draws no noise (its noise shape is empty). The
camera names the graph subscribes are the last part of lerobot's observation keys
("observation.images.top" -> "top"); the model has no state input, and the robot's joints are the
used action channels (`graph.action_names`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from embodied_ros.backbone.wan_vae import WanVAEConfig, WanVAEDecoder
from embodied_ros.models.lingbot_va import lerobot_bundle as lb
from embodied_ros.models.lingbot_va.closed_loop import camera_frames, prompt_rows
from embodied_ros.models.lingbot_va.config import ARCHITECTURE
from embodied_ros.heads.dual_stream import DualStreamConfig
from embodied_ros.models.lingbot_va.policy import ChunkConfig, unnormalize_quantiles
from embodied_ros.models.lingbot_va.world_episode import WorldEpisode, noise_sizes
from embodied_ros.pipeline.stages import ModelSpec, blank_inference
from embodied_ros.pipeline.types import ActionChunkResult, Observation, StageResult


def camera_name(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def model_spec(bundle) -> ModelSpec:
    """The graph's view of a lerobot-layout bundle, from its metadata."""
    config, graph = bundle.config[lb.SECTION], bundle.config.get(lb.GRAPH_SECTION) or lb.graph_settings(
        None, len(bundle.config[lb.SECTION]["used_action_channel_ids"]))
    factor = WanVAEConfig.from_diffusers(bundle.config["vae"]).spatial_factor
    cameras = tuple(camera_name(key) for key in config["obs_cam_keys"])
    if len(set(cameras)) != len(cameras):
        raise ValueError(f"{bundle.path}: camera keys {config['obs_cam_keys']} do not end in distinct names")
    frames, per_frame = int(config["frame_chunk_size"]), int(config["action_per_frame"])
    latent_hw = (int(config["height"]) // factor, len(cameras) * int(config["width"]) // factor)
    cfg, chunk = DualStreamConfig.from_lerobot(config), ChunkConfig.from_lerobot(config)
    names = tuple(graph["action_names"])
    return ModelSpec(
        architecture=ARCHITECTURE, camera_names=cameras, image_size=(int(config["height"]), int(config["width"])),
        state_names=names, action_names=names, chunk_size=frames * per_frame,
        action_period_s=float(graph["action_period_s"]), noise_shape=(0,),
        world_noise_shape=(sum(noise_sizes(cfg, chunk, latent_hw)),), has_world_model=True)


class LingbotVARuntime:
    def __init__(self, model: lb.LoadedModel, spec: ModelSpec,
                 load_decoder: Callable[[], WanVAEDecoder] | None = None) -> None:
        self.model, self.spec = model, spec
        self._prompt: tuple[str, np.ndarray] | None = None  # (instruction, its prompt rows)
        self._load_decoder, self._decoder = load_decoder, None  # the VAE decoder, read on first use

    def warm_up(self) -> None:
        """Two chunks of an episode on blank observations (chunk 0 and a feedback chunk compile
        every kernel the stages run)."""
        blank_inference(self, chunks=2)

    def world_episode(self) -> WorldEpisode:
        """The state the world predictor carries from run to run (one per world node)."""
        m = self.model
        factor = m.vae.cfg.spatial_factor
        latent_hw = (m.image_hw[0] // factor, len(m.camera_names) * m.image_hw[1] // factor)
        return WorldEpisode(m.ks, m.cfg, m.chunk, m.weights, m.vae, len(m.camera_names), latent_hw,
                            round(self.spec.action_period_s * 1e9))

    def observe_world(self, episode: WorldEpisode, prefix: StageResult) -> None:
        episode.observe(prefix.stamp_ns, prefix.tensors["frames"])

    # ---- stages ------------------------------------------------------------------------------

    def encode(self, observation: Observation) -> StageResult:
        images = {name: observation.images.get(camera_name(name)) for name in self.model.camera_names}
        frames = camera_frames(images, self.model.camera_names, self.model.image_hw)
        return StageResult("perception", observation.stamp_ns, {"frames": frames})

    def build_prefix(self, embeddings: StageResult, observation: Observation) -> StageResult:
        start = time.perf_counter()
        instruction = observation.instruction
        if self._prompt is None or self._prompt[0] != instruction:
            self._prompt = (instruction, np.stack(prompt_rows(self.model.prompts, self.model.chunk, instruction)))
        return StageResult("prefix", observation.stamp_ns,
                           {"frames": embeddings.tensors["frames"], "prompt": self._prompt[1]},
                           {"instruction": instruction, "infer_ms": round((time.perf_counter() - start) * 1e3, 3)})

    def predict_world(self, prefix: StageResult, noise: np.ndarray | None = None,
                      episode: WorldEpisode | None = None) -> StageResult:
        if episode is None:
            raise ValueError("lingbot_va's world predictor runs in an episode: pass runtime.world_episode()")
        if noise is None:
            raise ValueError("lingbot_va's world predictor needs its noise (pipeline/noise.py: stage_noise)")
        start = time.perf_counter()
        latents, rows, index = episode.predict(prefix.stamp_ns, prefix.tensors["frames"], prefix.meta["instruction"],
                                               list(prefix.tensors["prompt"]), noise)
        return StageResult("world", prefix.stamp_ns, {"latents": latents, "actions": rows},
                           {"chunk": index, "infer_ms": round((time.perf_counter() - start) * 1e3, 3)})

    def act(self, prefix: StageResult, world: StageResult | None, noise: np.ndarray | None = None,
            continuation: Any = None) -> ActionChunkResult:
        if world is None:
            raise ValueError("lingbot_va's action head reads a world prediction: run predict_world first")
        rows = world.tensors["actions"]
        if rows.ndim != 2 or rows.shape[1] != len(self.spec.action_names):
            raise ValueError(f"world prediction rows have shape {rows.shape}, this model makes "
                             f"(rows, {len(self.spec.action_names)}): the prediction comes from another model")
        actions = unnormalize_quantiles(rows, self.model.q01, self.model.q99)
        return ActionChunkResult(world.stamp_ns, actions, self.spec.action_period_s, self.spec.action_names)

    def world_frames(self, world: StageResult) -> dict[str, np.ndarray]:
        """A prediction's last frame per camera, for viewing: its latents through the VAE decoder
        (a fresh stream per camera) -> {camera: (H, W, 3) uint8}."""
        if self._decoder is None:
            if self._load_decoder is None:
                raise ValueError("lingbot_va: this runtime has no VAE decoder")
            self._decoder = self._load_decoder()
        frames = self._decoder.camera_frames(world.tensors["latents"], len(self.spec.camera_names))[:, :, -1]
        rgb = np.clip((frames + np.float32(1.0)) * np.float32(127.5) + np.float32(0.5), 0, 255).astype(np.uint8)
        return {camera: np.ascontiguousarray(image.transpose(1, 2, 0)) for camera, image in zip(self.spec.camera_names, rgb)}


def load_runtime(bundle, backend: str = "numba") -> LingbotVARuntime:
    return LingbotVARuntime(lb.load_model(bundle, backend), model_spec(bundle), lambda: lb.load_decoder(bundle))

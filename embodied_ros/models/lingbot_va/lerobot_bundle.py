"""LeRobot's LingBot-VA checkpoint (`LingBotVAPolicy.save_pretrained` with its frozen modules) as one
bundle, the policy loaded from it, its reference record, and parity against lerobot's records.

Checkpoint folder (what `LingBotVAPolicy.from_pretrained` reads):

    config.json                 LingBotVAConfig, "type": "lingbot_va"
    model.safetensors           transformer.* (dual-stream transformer)
    vae/                        diffusers AutoencoderKLWan (config.json, diffusion_pytorch_model.safetensors)
    text_encoder/               transformers UMT5EncoderModel (config.json, model.safetensors)
    tokenizer/spiece.model      the SentencePiece model of the T5 tokenizer
    policy_postprocessor_step_0_unnormalizer_processor.safetensors   action.q01 / action.q99

Bundle: the tensors keep their checkpoint names under `transformer.`, `vae.` and `text_encoder.`
(the VAE decoder is stored too, for decoding predicted frames; 3D conv kernels (O, C, t, k, k) are
stored as (O, C, t, k*k), the file format holding at most 4 axes, and take their shapes back from
the VAE config when loaded); config sections `lerobot` (sizes
and inference settings), `vae`, `text_encoder`; stats `action.q01/q99`; the tokenizer. Quantization
groups: modulation (kept f32 unless named), self_attn, cross_attn, ffn, embed, head (transformer),
vae, text. Plans may choose any type for the transformer groups; the VAE and the text encoder run
on float32 (an f16 store is upcast when loaded), so block types are refused for `vae` and `text`
(a block-type default stores them f16).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from embodied_ros.bundle.source import map_safetensors

from embodied_ros.backbone import umt5, wan_vae
from embodied_ros.bundle import BundleWriter, QuantPlan, ReferenceRecord, open_bundle
from embodied_ros.kernels import KernelSet
from embodied_ros.kernels.quant import QUANT_TYPES
from embodied_ros.heads import dual_stream as ds
from embodied_ros.models.lingbot_va.closed_loop import LingbotVAPolicy, NoiseSource, seeded_noise
from embodied_ros.models.lingbot_va.config import ARCHITECTURE
from embodied_ros.models.lingbot_va.policy import ChunkConfig
from embodied_ros.models.lingbot_va.prompt import PromptEncoder, T5Tokenizer

SECTION = "lerobot"  # config section that marks a bundle in lerobot's layout
POLICY_TYPE = "lingbot_va"
QUANTILES_FILE = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
FLOAT_GROUPS = ("vae", "text")  # groups stored as float types only
BLOCK_TYPES = {qtype for qtype in QUANT_TYPES if qtype != "bf16"}
# lerobot config keys the runtime reads (sizes, cameras, inference settings)
CONFIG_KEYS = ("patch_size", "num_attention_heads", "attention_head_dim", "in_channels", "out_channels", "action_dim",
               "text_dim", "freq_dim", "ffn_dim", "num_layers", "eps", "obs_cam_keys", "height", "width",
               "action_per_frame", "frame_chunk_size", "attn_window", "num_inference_steps",
               "action_num_inference_steps", "guidance_scale", "action_guidance_scale", "snr_shift",
               "action_snr_shift", "max_sequence_length", "used_action_channel_ids", "image_hflip", "camera_layout")
VAE_KEYS = ("base_dim", "decoder_base_dim", "z_dim", "dim_mult", "num_res_blocks", "temperal_downsample", "patch_size",
            "latents_mean", "latents_std", "in_channels", "is_residual", "attn_scales")
TEXT_KEYS = ("vocab_size", "d_model", "d_kv", "num_heads", "d_ff", "num_layers", "relative_attention_num_buckets",
             "relative_attention_max_distance", "layer_norm_epsilon", "feed_forward_proj")

# the graph's settings (`bundle convert --set KEY=VALUE`), a config section of their own: lerobot's
# checkpoint has no time base and names no joints
GRAPH_SECTION = "graph"
DEFAULT_ACTION_PERIOD_S = 0.1  # one row per 0.1 s control step, as select_action returns one per step


def graph_settings(settings: Mapping[str, Any] | None, used_channels: int) -> dict[str, Any]:
    """{action_period_s, action_names} from the conversion settings, checked (defaults: 0.1 s, action_<i>)."""
    settings = dict(settings or {})
    unknown = sorted(set(settings) - {"action_period_s", "action_names"})
    if unknown:
        raise ValueError(f"unknown lingbot_va conversion setting(s) {unknown}; known: ['action_names', 'action_period_s']")
    period = settings.get("action_period_s", DEFAULT_ACTION_PERIOD_S)
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not 0 < period < 10:
        raise ValueError(f"action_period_s must be a number of seconds in (0, 10), got {period!r}")
    names = settings.get("action_names", [f"action_{i}" for i in range(used_channels)])
    if (not isinstance(names, (list, tuple)) or len(names) != used_channels
            or not all(isinstance(name, str) and name for name in names) or len(set(names)) != len(names)):
        raise ValueError(f"action_names must be {used_channels} distinct names (one per used action channel), "
                         f"got {names!r}")
    return {"action_period_s": float(period), "action_names": [str(name) for name in names]}


# reference record made at conversion: a fixed episode over 3 chunks (feedback, pool eviction on
# long enough chunks) run by the numpy backend; `bundle verify` reruns it
REFERENCE_KIND = "lerobot_episode"
REFERENCE_TASK = "put the black bowl on the plate"
REFERENCE_TOLERANCE = 5e-4
_REFERENCE_SEED = 20260601
# lerobot-record parity: largest max-abs error on the step actions (|a| ~ 5) per stored type
PARITY_TOLERANCE = {"f32": 1e-4, "f16": 2e-2, "bf16": 1e-1, "q8_0": 1e-1, "q4_k": 5e-1}


def is_checkpoint(source: Path) -> bool:
    source = Path(source)
    config = source / "config.json"
    if not (config.is_file() and (source / "model.safetensors").is_file()):
        return False
    try:
        return json.loads(config.read_text()).get("type") == POLICY_TYPE
    except (OSError, ValueError):
        return False


def weight_group(name: str) -> str:
    """Quantization group of a bundle weight (see the module docstring)."""
    if name.startswith("vae."):
        return "vae"
    if name.startswith("text_encoder."):
        return "text"
    parts = name.split(".")
    if parts[-1] == "scale_shift_table":
        return "modulation"
    if parts[1] == "blocks":
        return {"attn1": "self_attn", "attn2": "cross_attn", "ffn": "ffn"}.get(parts[3], "modulation")
    if parts[1] in ("proj_out", "action_proj_out"):
        return "head"
    return "embed"


def _plan(plan: QuantPlan | str | None) -> QuantPlan:
    """The plan as given, with the modulation tables kept f32, and the VAE and the text encoder f16
    where the plan's default is a block type (they run on float weights)."""
    plan = plan if isinstance(plan, QuantPlan) else QuantPlan.parse(plan)
    types = {"modulation": "f32", **plan.types}
    for group in FLOAT_GROUPS:
        if group in plan.types and plan.types[group] in BLOCK_TYPES:
            raise ValueError(f"quantization plan: the {group} group is stored f32, f16 or bf16, "
                             f"not {plan.types[group]}")
        if plan.type_for(group) in BLOCK_TYPES:
            types[group] = "f16"
    return QuantPlan(types)


def _subset(values: Mapping[str, Any], keys: tuple[str, ...], where: Path) -> dict[str, Any]:
    missing = [key for key in keys if key not in values and key not in ("image_hflip", "camera_layout", "attn_scales")]
    if missing:
        raise ValueError(f"{where}: missing settings {missing}")
    return {key: values[key] for key in keys if key in values and values[key] not in ([], None)}


def _to_bundle(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value, np.float32)
    if value.ndim == 5:
        if value.shape[3] != value.shape[4]:
            raise ValueError(f"Wan VAE conv kernel {value.shape} is not square in space")
        return value.reshape(*value.shape[:3], -1)
    return value


def read_checkpoint(source: Path) -> tuple[dict, dict[str, np.ndarray], bytes, dict[str, np.ndarray]]:
    """(config sections, tensors by bundle name, tokenizer model, action quantiles) of a checkpoint."""
    source = Path(source)
    needed = [source / "vae" / "config.json", source / "vae" / "diffusion_pytorch_model.safetensors",
              source / "text_encoder" / "config.json", source / "text_encoder" / "model.safetensors",
              source / "tokenizer" / "spiece.model", source / QUANTILES_FILE]
    absent = [str(p.relative_to(source)) for p in needed if not p.is_file()]
    if absent:
        raise ValueError(f"{source}: a lerobot lingbot_va checkpoint with its frozen modules needs {absent}")
    policy = json.loads((source / "config.json").read_text())
    if policy.get("image_hflip") or policy.get("camera_layout", "width_concat") != "width_concat":
        raise ValueError(f"{source}: only image_hflip false and camera_layout 'width_concat' are supported")
    sections = {SECTION: _subset(policy, CONFIG_KEYS, source / "config.json"),
                "vae": _subset(json.loads(needed[0].read_text()), VAE_KEYS, needed[0]),
                "text_encoder": _subset(json.loads(needed[2].read_text()), TEXT_KEYS, needed[2])}
    tensors = dict(map_safetensors(source / "model.safetensors"))
    unexpected = sorted(name for name in tensors if not name.startswith("transformer."))
    if unexpected:
        raise ValueError(f"{source}/model.safetensors: unexpected tensors {unexpected[:4]}")
    tensors.update({f"vae.{k}": v for k, v in map_safetensors(needed[1]).items()})
    tensors.update({f"text_encoder.{k}": v for k, v in map_safetensors(needed[3]).items()})
    quantiles = map_safetensors(source / QUANTILES_FILE)
    return sections, tensors, needed[4].read_bytes(), {"q01": quantiles["action.q01"], "q99": quantiles["action.q99"]}


def convert_checkpoint(source: Path, output: Path, quant_plan: QuantPlan | str | None = None,
                       progress: bool = False, reference: bool = True,
                       settings: Mapping[str, Any] | None = None) -> Path:
    """Checkpoint folder -> bundle; with `reference`, the bundle is run once by the numpy backend on
    a fixed episode and written again with that run recorded. `settings`: the graph's (graph_settings)."""
    sections, tensors, tokenizer, quantiles = read_checkpoint(source)
    sections[GRAPH_SECTION] = graph_settings(settings, len(sections[SECTION]["used_action_channel_ids"]))
    cfg = ds.DualStreamConfig.from_lerobot(sections[SECTION])
    shapes = ds.tensor_shapes(cfg)
    transformer = {name[len("transformer."):]: value for name, value in tensors.items()
                   if name.startswith("transformer.")}
    if set(transformer) != set(shapes):
        missing, extra = sorted(set(shapes) - set(transformer)), sorted(set(transformer) - set(shapes))
        raise ValueError(f"{source}: transformer tensors differ from the config's: missing {missing[:4]}, "
                         f"extra {extra[:4]}")
    writer = BundleWriter(ARCHITECTURE, _plan(quant_plan), group_of=weight_group)
    writer.set_config(sections)
    writer.add_weights({name: _to_bundle(value) for name, value in tensors.items()})
    writer.set_stats({"action": quantiles})
    writer.set_tokenizer(tokenizer)
    writer.set_solver({"method": "euler", "world_steps": sections[SECTION]["num_inference_steps"],
                       "action_steps": sections[SECTION]["action_num_inference_steps"]})
    writer.set_source(str(source))
    writer.write(output, progress=progress)
    if reference:
        writer.set_reference(make_reference(open_bundle(output, architecture=ARCHITECTURE)))
        writer.write(output, progress=progress)
    return Path(output)


def is_bundle(bundle) -> bool:
    return SECTION in bundle.config


def _prefixed(bundle, prefix: str, stored: bool = False):
    """Weights by name under `prefix`: ready for the kernels, or (`stored`) as stored in the file."""
    def get(name: str):
        return bundle.raw(prefix + name) if stored else bundle.weight(prefix + name)
    return get


@dataclass(frozen=True)
class LoadedModel:
    """A lerobot-layout bundle's parts, as the step-loop policy and the graph's runtime use them."""

    ks: KernelSet
    cfg: ds.DualStreamConfig
    chunk: ChunkConfig
    weights: ds.DualStreamWeights
    prompts: PromptEncoder
    vae: wan_vae.WanVAEEncoder
    camera_names: tuple[str, ...]  # lerobot's observation keys, in model order
    image_hw: tuple[int, int]
    q01: np.ndarray
    q99: np.ndarray


def load_model(bundle, backend: str = "numba", **overrides: Any) -> LoadedModel:
    """The parts of a lerobot-layout bundle; `overrides` replace inference settings (e.g. guidance_scale)."""
    config = {**bundle.config[SECTION], **overrides}
    cfg = ds.DualStreamConfig.from_lerobot(config)
    ks = KernelSet(backend)
    weights = ds.load_weights(_prefixed(bundle, "transformer."), cfg)
    text_cfg = umt5.UMT5Config.from_transformers(bundle.config["text_encoder"])
    text = umt5.load_weights(_prefixed(bundle, "text_encoder.", stored=True), text_cfg)  # not kept resident
    if bundle.tokenizer_model is None:
        raise ValueError(f"{bundle.path}: the bundle has no tokenizer")
    prompts = PromptEncoder(ks, T5Tokenizer(bundle.tokenizer_model, int(config["max_sequence_length"])), text_cfg, text)
    vae_names = [name for name in bundle.weight_names if name.startswith(("vae.encoder.", "vae.quant_conv."))]
    vae = wan_vae.WanVAEEncoder(wan_vae.WanVAEConfig.from_diffusers(bundle.config["vae"]),
                                {name[len("vae."):]: bundle.weight(name) for name in vae_names})
    stats = bundle.stats["action"]
    return LoadedModel(ks, cfg, ChunkConfig.from_lerobot(config), weights, prompts, vae, tuple(config["obs_cam_keys"]),
                       (int(config["height"]), int(config["width"])), np.asarray(stats["q01"], np.float32),
                       np.asarray(stats["q99"], np.float32))


def load_policy(bundle, backend: str = "numba", noise: NoiseSource | None = None,
                **overrides: Any) -> LingbotVAPolicy:
    """The step-loop policy of a lerobot-layout bundle; `overrides` replace inference settings
    (e.g. guidance_scale). Noise defaults to a generator seeded per chunk."""
    m = load_model(bundle, backend, **overrides)
    return LingbotVAPolicy(m.ks, m.cfg, m.chunk, m.weights, m.prompts, m.vae, m.camera_names, m.image_hw, m.q01,
                           m.q99, noise or seeded_noise(_REFERENCE_SEED))


def load_decoder(bundle) -> wan_vae.WanVAEDecoder:
    """The VAE decoder of a lerobot-layout bundle (predicted latents -> frames, for viewing)."""
    names = [name for name in bundle.weight_names if name.startswith(("vae.decoder.", "vae.post_quant_conv."))]
    return wan_vae.WanVAEDecoder(wan_vae.WanVAEConfig.from_diffusers(bundle.config["vae"]),
                                 {name[len("vae."):]: bundle.weight(name) for name in names})


def run_episode(runner: LingbotVAPolicy, frames: Mapping[str, np.ndarray], task: str) -> np.ndarray:
    """Model-space actions [T, a] of an episode, camera frames [T, h, w, 3] uint8 per camera."""
    steps = len(next(iter(frames.values())))
    return np.stack([runner.select_action({name: images[t] for name, images in frames.items()}, task)
                     for t in range(steps)])


def _reference_frames(config: Mapping[str, Any], steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(_REFERENCE_SEED)
    base = rng.integers(0, 256, (len(config["obs_cam_keys"]), int(config["height"]), int(config["width"]), 3))
    drift = rng.integers(-12, 13, (steps, *base.shape))
    frames = np.clip(base[None] + np.cumsum(drift, axis=0), 0, 255).astype(np.uint8)
    return {name: frames[:, i] for i, name in enumerate(config["obs_cam_keys"])}


def make_reference(bundle) -> ReferenceRecord:
    """A fixed 3-chunk episode (seeded frames, the reference task, seeded noise) on the numpy backend."""
    config = bundle.config[SECTION]
    per_chunk = int(config["frame_chunk_size"]) * int(config["action_per_frame"])
    steps = (per_chunk - int(config["action_per_frame"])) + 2 * per_chunk
    frames = _reference_frames(config, steps)
    actions = run_episode(load_policy(bundle, "numpy"), frames, REFERENCE_TASK)
    return ReferenceRecord(inputs={f"frames.{name}": value for name, value in frames.items()},
                           expected={"actions": actions}, tolerance=REFERENCE_TOLERANCE,
                           fields={"kind": REFERENCE_KIND, "task": REFERENCE_TASK, "backend": "numpy"})


def reference_episode(bundle, backend: str = "numba") -> tuple[Callable[[], np.ndarray], np.ndarray, int]:
    """(run: the reference episode from its start -> model-space actions, the recorded actions, the
    chunks one run samples)."""
    record = bundle.reference
    if record is None or record.fields.get("kind") != REFERENCE_KIND:
        raise ValueError(f"{bundle.path}: the bundle carries no lerobot episode reference record")
    frames = {name[len("frames."):]: np.asarray(value) for name, value in record.inputs.items()}
    missing = sorted(set(bundle.config[SECTION]["obs_cam_keys"]) - set(frames))
    if missing:
        raise ValueError(f"{bundle.path}: the reference record has no frames of cameras {missing}")
    policy = load_policy(bundle, backend)

    def run() -> np.ndarray:
        policy.reset()
        return run_episode(policy, frames, record.fields["task"])

    config = bundle.config[SECTION]
    per_chunk = int(config["frame_chunk_size"]) * int(config["action_per_frame"])
    first = per_chunk - int(config["action_per_frame"])  # the first chunk's first frame is observed, not acted
    steps = len(next(iter(frames.values())))
    return run, record.expected["actions"], 1 + max(0, -(-(steps - first) // per_chunk))


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    run, expected, _ = reference_episode(bundle, backend)
    return float(np.max(np.abs(run() - expected))), float(bundle.reference.tolerance)


# ---- lerobot records (`embodied-ros parity`) -----------------------------------------------------

def recognizes_record(path: Path) -> bool:
    """A lerobot LingBot-VA record folder: cases.json + cases.npz + a lingbot_va checkpoint/."""
    path = Path(path)
    return (path / "cases.json").is_file() and (path / "cases.npz").is_file() and is_checkpoint(path / "checkpoint")


def run_record_parity(path: Path, quant: str = "f32", backend: str = "numba") -> list:
    """Convert the record's checkpoint with plan `quant`, replay every case's episode from its raw
    camera frames and task through the bundle; max abs error of the final (unnormalized) step actions."""
    from embodied_ros.models.lingbot_va.parity import CaseResult

    path = Path(path)
    meta = json.loads((path / "cases.json").read_text())
    plan = _plan(quant)
    tolerance = max(PARITY_TOLERANCE[plan.type_for(group)] for group in ("self_attn", "cross_attn", "ffn", "embed",
                                                                          "head", "vae", "text"))
    with np.load(path / "cases.npz") as arrays, tempfile.TemporaryDirectory(prefix="lingbot_parity_") as folder:
        bundle = open_bundle(convert_checkpoint(path / "checkpoint", Path(folder) / "policy.gguf", plan,
                                                reference=False), architecture=ARCHITECTURE)
        results = []
        for k, case in enumerate(meta["cases"]):
            def noise(j, video_shape, action_shape, k=k):
                return arrays[f"case{k}_chunk{j}_noise_latents"], arrays[f"case{k}_chunk{j}_noise_actions"]
            runner = load_policy(bundle, backend, noise, guidance_scale=case["guidance_scale"],
                                 action_guidance_scale=case["action_guidance_scale"])
            frames = {name: arrays[f"case{k}_images_{name.rsplit('.', 1)[-1]}"]
                      for name in bundle.config[SECTION]["obs_cam_keys"]}
            actions = runner.unnormalize(run_episode(runner, frames, case["task"]))
            error = float(np.max(np.abs(actions - arrays[f"case{k}_step_actions"])))
            results.append(CaseResult(f"case{k}", error, tolerance))
        return results

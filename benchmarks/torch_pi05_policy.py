"""LeRobot's PI05Policy (or PI0Policy, for a pi0 record) at the dimensions of a reference record,
with per-stage timing.

Runs only in the PyTorch reference environment (docs/reference.md); torch_reference.py imports it
after checking that torch and lerobot are importable.

LeRobot builds pi0.5 from fixed presets: `get_gemma_config("gemma_2b" | "gemma_300m")` for the
language model and the expert, and SigLIP-So400m settings written into the PaliGemma config inside
`PaliGemmaWithExpertModel.__init__`. To build a policy of other dimensions, `record_sized_constructors`
swaps three names in lerobot's pi0.5 module for the duration of the constructor call: the preset
lookup, and the PaliGemma / expert classes, each replaced by a subclass that resizes its config
before the parent constructor runs. Parameter names stay LeRobot's, so the record's
model.safetensors loads with `load_state_dict`.
"""
from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open

import lerobot.policies.pi0.modeling_pi0 as pi0_module
import lerobot.policies.pi05.modeling_pi05 as pi05_module
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.pi0 import PI0Config
from lerobot.policies.pi05 import PI05Config

LANGUAGE_TOKENS_KEY = "observation.language.tokens"
LANGUAGE_MASK_KEY = "observation.language.attention_mask"
UNUSED_TENSOR_SUFFIX = "lm_head.weight"  # present in LeRobot's state dict, never used by pi0.5
STATE_KEY = "observation.state"


def is_pi0(config: dict) -> bool:
    """A pi0 record describes its suffix (state token + action tokens); pi0.5's has none."""
    return "suffix" in config


def policy_module(config: dict):
    return pi0_module if is_pi0(config) else pi05_module


def read_record(record_dir: str | Path) -> tuple[dict, dict]:
    """(config.json, cases.npz as a dict of arrays) of a pi0.5 reference record folder."""
    record_dir = Path(record_dir)
    missing = [n for n in ("config.json", "model.safetensors", "cases.npz") if not (record_dir / n).exists()]
    if missing:
        raise FileNotFoundError(f"{record_dir} is not a pi0.5 reference record: missing {', '.join(missing)}")
    config = json.loads((record_dir / "config.json").read_text())
    if "language_model" not in config or "expert" not in config:
        raise ValueError(f"{record_dir}/config.json has no language_model/expert section: not a pi0.5 record")
    with np.load(record_dir / "cases.npz") as cases:
        return config, {name: cases[name] for name in cases.files}


@contextlib.contextmanager
def record_sized_constructors(config: dict):
    """Make PI05Policy(...) build the record's dimensions instead of the full-size presets."""
    vision, lm, expert = config["vision"], config["language_model"], config["expert"]
    module = policy_module(config)
    presets = {"gemma_2b": lm, "gemma_300m": expert}
    fields = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
    original = {name: getattr(module, name) for name in
                ("get_gemma_config", "PaliGemmaForConditionalGenerationWithPiGemma", "PiGemmaForCausalLM")}

    def sized_preset(variant: str):
        if variant not in presets:
            raise ValueError(f"unknown Gemma variant {variant!r}")
        return module.GemmaConfig(**{f: presets[variant][f] for f in fields})

    class SizedPaliGemma(original["PaliGemmaForConditionalGenerationWithPiGemma"]):
        def __init__(self, config):  # config: transformers PaliGemmaConfig
            v = config.vision_config
            v.hidden_size, v.intermediate_size = vision["width"], vision["mlp_dim"]
            v.num_hidden_layers, v.num_attention_heads = vision["depth"], vision["num_heads"]
            v.patch_size, v.projection_dim = vision["patch_size"], lm["width"]
            config.text_config.vocab_size = lm["vocab_size"]
            super().__init__(config=config)

    class SizedExpert(original["PiGemmaForCausalLM"]):
        def __init__(self, config):  # config: transformers GemmaConfig
            config.vocab_size = expert["vocab_size"]
            super().__init__(config=config)

    replacements = {"get_gemma_config": sized_preset, "PaliGemmaForConditionalGenerationWithPiGemma": SizedPaliGemma,
                    "PiGemmaForCausalLM": SizedExpert}
    for name, value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in original.items():
            setattr(module, name, value)


def build_policy(config: dict, weights_path: str | Path, dtype: str = "float32"):
    """PI05Policy or PI0Policy (CPU, eval) with the record's dimensions and weights.

    dtype is LeRobot's own setting: "float32", or "bfloat16" (its bfloat16 parameters with the few it
    keeps in float32). The weights are copied in tensor by tensor from the mapped file, so a
    full-size record needs no second copy of the model in memory.
    """
    size = config["vision"]["image_size"]
    cameras = {name: PolicyFeature(FeatureType.VISUAL, (3, size, size)) for name in config["camera_names"]}
    policy_config = (PI0Config if is_pi0(config) else PI05Config)(
        device="cpu", dtype=dtype, image_resolution=(size, size), chunk_size=config["chunk_size"],
        n_action_steps=config["chunk_size"], tokenizer_max_length=config["tokenizer_max_length"],
        max_action_dim=config["max_action_dim"], max_state_dim=config["max_state_dim"],
        num_inference_steps=config["num_inference_steps"],
        input_features={**cameras, "observation.state": PolicyFeature(FeatureType.STATE, (config["state_dim"],))},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (config["action_dim"],))})
    with record_sized_constructors(config):
        module = policy_module(config)
        policy = (module.PI0Policy if is_pi0(config) else module.PI05Policy)(policy_config)
    targets = policy.state_dict()  # tensors sharing the parameters' storage
    unexpected = []
    with safe_open(str(weights_path), framework="pt") as weights, torch.no_grad():
        stored = set(weights.keys())
        for name in stored:
            if name in targets:
                targets[name].copy_(weights.get_tensor(name))
            else:
                unexpected.append(name)
    missing = [k for k in targets if k not in stored and not k.endswith(UNUSED_TENSOR_SUFFIX)]
    if missing or unexpected:
        raise ValueError(f"weights do not match the policy: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return policy.eval()


def case_batch(config: dict, cases: dict, k: int) -> tuple[dict, torch.Tensor]:
    """LeRobot batch (missing cameras left out, as LeRobot expects) and the injected noise of case k."""
    order = config["cases"][k]["model_camera_order"]
    images, masks = cases[f"case{k}_images"], cases[f"case{k}_image_masks"]
    batch = {name: torch.from_numpy(images[j][None]) for j, name in enumerate(order) if masks[j]}
    batch[LANGUAGE_TOKENS_KEY] = torch.from_numpy(cases[f"case{k}_tokens"][None])
    batch[LANGUAGE_MASK_KEY] = torch.from_numpy(cases[f"case{k}_token_mask"][None])
    if is_pi0(config):  # pi0 reads the (model-space) state as a token; pi0.5 has it in the prompt
        batch[STATE_KEY] = torch.from_numpy(cases[f"case{k}_state"][None])
    return batch, torch.from_numpy(cases[f"case{k}_noise"][None])


class StageClock:
    """Times the stages of predict_action_chunk by wrapping three LeRobot calls on one policy:
    embed_image (vision tower + projector, once per camera), the language model's forward over the
    prefix (once per chunk; the expert has its own model), and denoise_step (once per Euler step)."""

    def __init__(self, policy):
        self.runs: list[dict] = []
        model = policy.model
        embedder = model.paligemma_with_expert
        language_model = embedder.paligemma.model.language_model
        self._wrap(embedder, "embed_image", "vision")
        self._wrap(language_model, "forward", "prefix")
        self._wrap(model, "denoise_step", "expert_steps")

    def _wrap(self, owner, method_name: str, stage: str) -> None:
        inner = getattr(owner, method_name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            out = inner(*args, **kwargs)
            self.runs[-1][stage].append((time.perf_counter() - start) * 1e3)
            return out
        setattr(owner, method_name, timed)  # instance attribute shadows the class method

    def start_run(self) -> None:
        self.runs.append({"vision": [], "prefix": [], "expert_steps": []})

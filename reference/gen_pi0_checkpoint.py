"""Writes test/data/pi0_tiny_checkpoint: a tiny random-weight LeRobot `PI0Policy` saved in LeRobot's
checkpoint layout (config.json, model.safetensors, pre/post-processor files with MEAN_STD stats), and
cases run end to end through LeRobot from raw inputs (uint8 images, physical state, task text) to
physical actions.

Runs in the PyTorch reference environment (lerobot 0.6.1, transformers, torch), not in the project's:

    python gen_pi0_checkpoint.py [--tokenizer-from DIR] OUT_DIR

The tokenizer is the SentencePiece model of a pi0.5 pipeline record (pieces < vocab): DIR, by
default $EMBODIED_ROS_RECORDS/pi05_tiny_checkpoint (the repository's test/data/pi05_tiny_checkpoint);
its `checkpoint/tokenizer.model` is copied into the checkpoint and LeRobot's tokenizer step, which
asks for google/paligemma-3b-pt-224, is answered with its `tokenizer_hf/` transformers files.
The model is shrunk as the other reference generators do: LeRobot's Gemma variant table and the
PaliGemma / expert constructors are replaced inside `policies/pi0/modeling_pi0.py` while the policy
is built.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

import common  # noqa: F401  (sets the offline environment before transformers is imported)

import numpy as np
import torch
from transformers import AutoTokenizer

import lerobot.policies.pi0.modeling_pi0 as pi0_modeling
import lerobot.processor.tokenizer_processor as tokenizer_processor
from lerobot.configs import FeatureType, PolicyFeature
from lerobot.policies.pi0 import PI0Config
from lerobot.policies.pi0.processor_pi0 import make_pi0_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference

TOKENIZER: Path | None = None  # the pi0.5 pipeline record whose tokenizer is used (set by main)
PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"

VISION = {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4}
GEMMA = {"lm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
         "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16}}
VOCAB, PATCH, RESOLUTION = 1024, 14, 56
CAMERAS = {"observation.images.base_0_rgb": (96, 128), "observation.images.wrist_0_rgb": (64, 64)}
STATE_NAMES = ["shoulder_pan", "shoulder_lift", "elbow", "wrist_flex", "wrist_roll", "wrist_yaw", "gripper",
               "gripper_force"]
ACTION_NAMES = STATE_NAMES[:7]
CHUNK, STEPS, TOKENS = 10, 10, 32
SEEDS = {"torch_manual_seed": 30, "weights": 31, "data": 32}
CASES = [
    {"task": "pick up the red cube and put it in the bowl", "missing_cameras": []},
    {"task": "stack the green block on the blue plate\n", "missing_cameras": [], "state_scale": 3.0},
    {"task": "open the top drawer of the white cabinet, take out the small blue screwdriver and close it",
     "missing_cameras": ["observation.images.wrist_0_rgb"]},
]


def shrink() -> None:
    gemma_keys = ("width", "depth", "mlp_dim", "num_heads", "num_kv_heads", "head_dim")
    pi0_modeling.get_gemma_config = lambda variant: pi0_modeling.GemmaConfig(
        **{k: GEMMA["lm" if variant == "gemma_2b" else "expert"][k] for k in gemma_keys})
    paligemma, expert = pi0_modeling.PaliGemmaForConditionalGenerationWithPiGemma, pi0_modeling.PiGemmaForCausalLM

    def small_paligemma(config):
        vision = config.vision_config
        vision.hidden_size, vision.intermediate_size = VISION["width"], VISION["mlp_dim"]
        vision.num_hidden_layers, vision.num_attention_heads = VISION["depth"], VISION["num_heads"]
        vision.patch_size, vision.projection_dim = PATCH, config.text_config.hidden_size
        config.text_config.vocab_size = VOCAB
        return paligemma(config=config)

    def small_expert(config):
        config.vocab_size = VOCAB
        return expert(config=config)

    pi0_modeling.PaliGemmaForConditionalGenerationWithPiGemma = small_paligemma
    pi0_modeling.PiGemmaForCausalLM = small_expert


def dataset_stats(rng: np.random.Generator) -> dict:
    """Per-joint statistics of a made-up dataset, every statistic LeRobot's normalizer may read."""
    stats = {}
    for key, dim in (("observation.state", len(STATE_NAMES)), ("action", len(ACTION_NAMES))):
        mean = rng.uniform(-1.0, 1.0, dim)
        std = rng.uniform(0.05, 2.0, dim)
        low, high = mean - 2.5 * std, mean + 2.5 * std
        stats[key] = {name: torch.tensor(value, dtype=torch.float32) for name, value in
                      {"mean": mean, "std": std, "min": low, "max": high, "q01": mean - 2.2 * std,
                       "q99": mean + 2.2 * std}.items()}
    return stats


class LocalTokenizer:
    @classmethod
    def from_pretrained(cls, name, *args, **kwargs):
        if name != PALIGEMMA_TOKENIZER:
            raise OSError(f"offline build: unexpected tokenizer {name}")
        return AutoTokenizer.from_pretrained(TOKENIZER / "tokenizer_hf")


def run_case(policy, pre, post, images, state, task, noise):
    with torch.inference_mode():
        frame = prepare_observation_for_inference({**images, "observation.state": state}, torch.device("cpu"), task,
                                                  "tiny_arm")
        batch = pre(frame)
        chunk = policy.predict_action_chunk(batch, noise=noise.clone())
        return batch, chunk, post(chunk)


def main(out: Path) -> None:
    checkpoint = out / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    shrink()
    config = PI0Config(
        device="cpu", dtype="float32", image_resolution=(RESOLUTION, RESOLUTION), chunk_size=CHUNK,
        n_action_steps=CHUNK, tokenizer_max_length=TOKENS, num_inference_steps=STEPS,
        input_features={"observation.state": PolicyFeature(FeatureType.STATE, (len(STATE_NAMES),)),
                        **{c: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for c, hw in CAMERAS.items()}},
        output_features={"action": PolicyFeature(FeatureType.ACTION, (len(ACTION_NAMES),))})
    torch.manual_seed(SEEDS["torch_manual_seed"])
    policy = pi0_modeling.PI0Policy(config).eval()
    generator = torch.Generator().manual_seed(SEEDS["weights"])
    with torch.no_grad():
        for _, p in policy.named_parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * (p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1))
    rng = np.random.default_rng(SEEDS["data"])
    stats = dataset_stats(rng)
    saved, tokenizer_processor.AutoTokenizer = tokenizer_processor.AutoTokenizer, LocalTokenizer
    try:
        pre, post = make_pi0_pre_post_processors(config, dataset_stats=stats)
    finally:
        tokenizer_processor.AutoTokenizer = saved
    policy.save_pretrained(checkpoint)
    pre.save_pretrained(checkpoint)
    post.save_pretrained(checkpoint)
    shutil.copy(TOKENIZER / "checkpoint" / "tokenizer.model", checkpoint / "tokenizer.model")

    noise_generator = torch.Generator().manual_seed(SEEDS["data"])
    mean, std = (stats["observation.state"][k].numpy() for k in ("mean", "std"))
    arrays, recorded = {}, []
    for k, case in enumerate(CASES):
        images = {cam: rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for cam, hw in CAMERAS.items()}
        state = (mean + case.get("state_scale", 1.0) * std * rng.standard_normal(len(STATE_NAMES))).astype(np.float32)
        noise = torch.randn(1, CHUNK, config.max_action_dim, generator=noise_generator)
        present = {cam: image for cam, image in images.items() if cam not in case["missing_cameras"]}
        batch, chunk, final = run_case(policy, pre, post, present, state, case["task"], noise)
        again = run_case(policy, pre, post, present, state, case["task"], noise)[2]
        assert torch.equal(final, again), "the reference is not repeatable"
        for cam, image in present.items():
            arrays[f"case{k}_{cam.rsplit('.', 1)[-1]}_uint8"] = image
        arrays[f"case{k}_state_raw"] = state
        arrays[f"case{k}_state"] = batch["observation.state"][0].numpy()
        arrays[f"case{k}_tokens"] = batch["observation.language.tokens"][0].numpy().astype(np.int64)
        arrays[f"case{k}_noise"] = noise[0].numpy()
        arrays[f"case{k}_model_actions"] = chunk[0].numpy()
        arrays[f"case{k}_actions"] = final[0].numpy()
        recorded.append({"task": case["task"], "prompt": case["task"] if case["task"].endswith("\n")
                         else case["task"] + "\n", "missing_cameras": case["missing_cameras"],
                         "max_abs_action": float(final.abs().max())})
        print(f"case{k}: actions {tuple(final.shape[1:])} max|a| {float(final.abs().max()):.3f}")
    np.savez(out / "cases.npz", **arrays)
    description = {
        "set": out.name, "what": "pi0 (lerobot PI0Policy) tiny random-weight checkpoint in lerobot's save layout",
        "model_dims": {"vision": VISION, "lm": GEMMA["lm"], "expert": GEMMA["expert"], "vocab_size": VOCAB,
                       "patch_size": PATCH},
        "state_names": STATE_NAMES, "action_names": ACTION_NAMES, "seeds": SEEDS,
        "generated_by": {"script": "reference/gen_pi0_checkpoint.py", "torch": torch.__version__,
                         "lerobot": __import__("lerobot").__version__},
        "cases": recorded}
    (out / "cases.json").write_text(json.dumps(description, indent=1) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, metavar="OUT_DIR")
    records = os.environ.get("EMBODIED_ROS_RECORDS")
    parser.add_argument("--tokenizer-from", type=Path,
                        default=Path(records) / "pi05_tiny_checkpoint" if records else None,
                        help="pi0.5 pipeline record with checkpoint/tokenizer.model and tokenizer_hf/ "
                             "(default: $EMBODIED_ROS_RECORDS/pi05_tiny_checkpoint)")
    args = parser.parse_args()
    if args.tokenizer_from is None:
        parser.error("name the tokenizer's record: --tokenizer-from DIR or EMBODIED_ROS_RECORDS")
    TOKENIZER = args.tokenizer_from.resolve()
    torch.set_num_threads(1)
    main(args.out.resolve())

#!/usr/bin/env python
"""The pi0.5 pipeline record (test/data/pi05_tiny_checkpoint): a tiny random-weight `PI05Policy` saved
the way LeRobot 0.6.1 saves a trained one (policy, pre- and postprocessor, quantile statistics), a
SentencePiece tokenizer, and cases run end to end through LeRobot: uint8 images of the raw camera
sizes, physical-unit state and task text -> physical-unit actions.

    python gen_pi05_checkpoint.py [SPEC.json] OUT_DIR    (reference environment; then checks itself in a
                                                          fresh process: --verify OUT_DIR does that alone)

1. trains a SentencePiece BPE model with Gemma-like options (byte fallback, split digits, no dummy
   prefix, no normalization; pad 0, eos 1, bos 2, unk 3, <mask>, "\\n" as a user-defined piece) on
   generated robot instructions and pi0.5 prompts, and wraps it as transformers' GemmaTokenizer
   (vocabulary in id order, merges from transformers' generate_merges; no protobuf needed);
2. builds the policy small (lerobot_tiny) and redraws its parameters (`common.last_dim_rule`);
3. computes dataset statistics with LeRobot's own compute_episode_stats / aggregate_stats on
   synthetic episodes (joint trajectories inside the spec's limits, a gripper that closes and opens);
4. builds the processors with make_pi05_pre_post_processors(config, dataset_stats=...) while
   LeRobot's look-up of the "google/paligemma-3b-pt-224" tokenizer gets the local one, and saves
   policy and processors into OUT/checkpoint (plus tokenizer.model; OUT/tokenizer_hf has the
   transformers files);
5. runs each case as LeRobot inference does (prepare_observation_for_inference, preprocessor,
   predict_action_chunk(noise=...), postprocessor) twice, and once more through LeRobot's
   predict_action (select_action queue) with the same noise; all must agree bit for bit;
6. reloads everything in a fresh process (PI05Policy.from_pretrained, make_pre_post_processors with
   the tokenizer as an override) and requires every stored array again, bit for bit.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import common
import lerobot_tiny as tiny

import numpy as np
import torch

PALIGEMMA_TOKENIZER = "google/paligemma-3b-pt-224"
CPU = torch.device("cpu")
DEFAULTS = {
    "name": "pi05_tiny_checkpoint",
    "image_size": 56, "patch_size": 14,
    "vision": {"width": 48, "depth": 2, "mlp_dim": 96, "num_heads": 4},
    "lm": {"width": 64, "depth": 2, "mlp_dim": 128, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "expert": {"width": 32, "depth": 2, "mlp_dim": 64, "num_heads": 8, "num_kv_heads": 1, "head_dim": 16},
    "vocab_size": 1024, "tokenizer_max_length": 64, "chunk_size": 10, "max_state_dim": 32, "max_action_dim": 32,
    "num_inference_steps": 10,
    "cameras": {"observation.images.base_0_rgb": [96, 128], "observation.images.wrist_0_rgb": [64, 64]},
    "state_names": ["shoulder_pan", "shoulder_lift", "elbow", "wrist_flex", "wrist_roll", "wrist_yaw", "gripper",
                    "gripper_force"],
    "action_names": ["shoulder_pan", "shoulder_lift", "elbow", "wrist_flex", "wrist_roll", "wrist_yaw", "gripper"],
    "joint_limits": {"shoulder_pan": [-2.6, 2.6], "shoulder_lift": [-1.9, 1.2], "elbow": [-0.4, 2.7],
                     "wrist_flex": [-1.7, 1.7], "wrist_roll": [-3.0, 3.0], "wrist_yaw": [-1.2, 1.9],
                     "gripper": [0.0, 1.0], "gripper_force": [0.0, 40.0]},
    "dataset": {"episodes": 20, "frames_per_episode": 150, "fps": 30, "tasks": 4, "image_stat_frames": 4},
    "robot_type": "tiny_arm",
    "tokenizer": {"vocab_size": 1024, "instruction_lines": 420, "prompt_lines": 180},
    "torch_threads": 2,
    "seeds": {"torch_manual_seed": 10, "weights": 11, "data": 12, "dataset": 13, "tokenizer_corpus": 14},
    "cases": [
        {"task": "pick up the red cube and put it in the bowl", "missing_cameras": [], "state_outliers": {}},
        {"task": "  Stack_the_green_block\non the blue plate_  \n", "missing_cameras": [],
         "state_outliers": {"elbow": -0.35, "gripper_force": 1.6}},
        {"task": "open the top drawer of the white cabinet, take out the small blue screwdriver, put it next to "
                 "the red toolbox and close the drawer again",
         "missing_cameras": ["observation.images.wrist_0_rgb"], "state_outliers": {}}],
}
TRAINER = {  # Gemma-like SentencePiece options
    "model_type": "bpe", "byte_fallback": True, "split_digits": True, "add_dummy_prefix": False,
    "normalization_rule_name": "identity", "remove_extra_whitespaces": False, "allow_whitespace_only_pieces": True,
    "character_coverage": 1.0, "pad_id": 0, "eos_id": 1, "bos_id": 2, "unk_id": 3, "pad_piece": "<pad>",
    "eos_piece": "<eos>", "bos_piece": "<bos>", "unk_piece": "<unk>", "control_symbols": ["<mask>"],
    "user_defined_symbols": ["\n"], "hard_vocab_limit": False, "shuffle_input_sentence": False}


# ---------------------------------------------------------------------------------------- tokenizer
def corpus(sizes: dict, seed: int) -> list[str]:
    """Robot instructions and pi0.5 prompts ("Task: ..., State: <bins>;\\nAction: ")."""
    draw = random.Random(seed)
    pick = draw.choice
    actions = ["pick up", "put down", "grab", "lift", "lower", "push", "pull", "slide", "rotate", "turn", "open",
               "close", "stack", "unstack", "place", "move", "insert", "remove", "take out", "hand over", "pour",
               "shake", "wipe", "fold", "press"]
    colours = ["red", "green", "blue", "yellow", "white", "black", "orange", "purple", "grey", "pink", "brown"]
    things = ["cube", "block", "ball", "cup", "mug", "bowl", "plate", "bottle", "can", "box", "lid", "drawer",
              "door", "cabinet", "towel", "sponge", "spoon", "fork", "marker", "screwdriver", "toolbox", "apple",
              "banana", "carrot", "cloth", "book", "tray", "basket", "kettle", "cable"]
    where = ["on the table", "in the bowl", "into the box", "onto the plate", "next to the cup", "on the shelf",
             "to the left", "to the right", "behind the bottle", "inside the drawer", "on top of the block",
             "into the basket", "near the edge", "in front of the robot", "onto the tray"]
    manner = ["", "", "", " slowly", " gently", " carefully", " quickly", " again", " twice", " and stop"]
    lines = [f"{pick(actions)} the {pick(colours)} {pick(things)} {pick(where)}{pick(manner)}"
             for _ in range(sizes["instruction_lines"])]
    instructions = list(lines)
    for _ in range(sizes["prompt_lines"]):
        bins = " ".join(str(draw.randint(0, 255)) for _ in range(pick([6, 7, 8, 14])))
        lines.append(f"Task: {pick(instructions)}, State: {bins};\nAction: ")
    return lines + ["Task:", "State:", "Action:", "0 1 2 3 4 5 6 7 8 9", "-1 255 128 64"]


def gemma_tokenizer(model_file: Path):
    """transformers' GemmaTokenizer for a SentencePiece BPE model, built without protobuf: the
    vocabulary in id order, merges from generate_merges, "\\n" as a plain added token."""
    import sentencepiece as spm
    from transformers import AddedToken, GemmaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    pieces = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = {pieces.id_to_piece(i): i for i in range(pieces.get_piece_size())}
    tokenizer = GemmaTokenizer(vocab=vocab, merges=generate_merges(vocab), add_bos_token=True, add_eos_token=False)
    tokenizer.add_tokens([AddedToken("\n", normalized=False, special=False)])
    assert len(tokenizer) == pieces.get_piece_size() and tokenizer.bos_token_id == 2 and tokenizer.pad_token_id == 0
    return tokenizer, pieces


# ---------------------------------------------------------------------------------------- model and data
def build_policy(spec: dict):
    import lerobot.policies.pi05.modeling_pi05 as modeling
    from lerobot.configs import FeatureType, PolicyFeature

    sizes = {**spec, "n_cameras": len(spec["cameras"]), "state_dim": len(spec["state_names"]),
             "action_dim": len(spec["action_names"])}
    features = {"observation.state": PolicyFeature(FeatureType.STATE, (len(spec["state_names"]),))}
    features.update({name: PolicyFeature(FeatureType.VISUAL, (3, *hw)) for name, hw in spec["cameras"].items()})
    policy, _ = tiny.build_pi("pi05", sizes, action_feature_names=list(spec["action_names"]), input_features=features)
    return policy, modeling


def dataset_stats(spec: dict, rng: np.random.Generator) -> dict:
    """LeRobot's statistics of synthetic episodes: six arm joints moving smoothly inside their limits, a
    gripper (0 closed .. 1 open) that closes between two random times with a grip force meanwhile, the
    action = the joint targets 3 frames ahead and a binary gripper command, and per-camera image stats."""
    stats_module = common.lerobot_compute_stats()
    sizes, limits, names = spec["dataset"], spec["joint_limits"], spec["state_names"]
    frames = sizes["frames_per_episode"]
    t = np.arange(frames) / sizes["fps"]
    features = {"observation.state": {"dtype": "float32"}, "action": {"dtype": "float32"},
                "timestamp": {"dtype": "float32"}, "frame_index": {"dtype": "int64"},
                "episode_index": {"dtype": "int64"}, "index": {"dtype": "int64"}, "task_index": {"dtype": "int64"}}
    per_episode = []
    for episode in range(sizes["episodes"]):
        columns = {}
        for name in names[:6]:
            low, high = limits[name]
            span = high - low
            centre = rng.uniform(low + 0.3 * span, high - 0.3 * span)
            wave = sum(rng.uniform(0.05, 0.2) * span * np.sin(2 * np.pi * rng.uniform(0.05, 0.6) * t
                                                               + rng.uniform(0, 2 * np.pi)) for _ in range(2))
            columns[name] = np.clip(centre + wave, low, high)
        close, release = np.sort(rng.uniform(0.5, frames / sizes["fps"] - 0.5, 2))
        holding = (t > close) & (t < release)
        columns["gripper"] = np.clip(np.where(holding, 0.04, 0.93) + rng.normal(0, 0.02, frames), 0.0, 1.0)
        columns["gripper_force"] = np.clip(np.where(holding, rng.uniform(12, 30), 0.3) + rng.normal(0, 1.0, frames),
                                           0.0, 40.0)
        state = np.stack([columns[n] for n in names], 1).astype(np.float32)
        ahead = np.minimum(np.arange(frames) + 3, frames - 1)
        action = np.concatenate([state[ahead, :6] + rng.normal(0, 0.01, (frames, 6)),
                                 (state[ahead, 6:7] > 0.5).astype(np.float64)], 1).astype(np.float32)
        data = {"observation.state": state, "action": action, "timestamp": t.astype(np.float32),
                "frame_index": np.arange(frames), "episode_index": np.full(frames, episode),
                "index": episode * frames + np.arange(frames), "task_index": np.full(frames, episode % sizes["tasks"])}
        stats = stats_module.compute_episode_stats(data, features)
        for camera, (h, w) in spec["cameras"].items():  # per-channel stats in [0, 1], shape (3, 1, 1)
            images = rng.integers(0, 256, (sizes["image_stat_frames"], 3, h, w)).astype(np.float32)
            images *= np.array([1.0, 0.9, 0.8], np.float32)[None, :, None, None]
            image_stats = stats_module.get_feature_stats(images, axis=(0, 2, 3), keepdims=True)
            stats[camera] = {k: v if k == "count" else np.squeeze(v / 255.0, axis=0) for k, v in image_stats.items()}
        per_episode.append(stats)
    return stats_module.aggregate_stats(per_episode)


class LocalTokenizer:
    """Stands in for transformers.AutoTokenizer in LeRobot's tokenizer_processor module while the
    processors are built, so the saved step still names the PaliGemma tokenizer, as a real save does."""
    tokenizer = None

    @classmethod
    def from_pretrained(cls, name, *args, **kwargs):
        if name != PALIGEMMA_TOKENIZER:
            raise OSError(f"offline reference build: nothing stands in for {name}")
        return cls.tokenizer


def run_case(policy, pre, post, images: dict, state: np.ndarray, task: str, noise: torch.Tensor, robot: str) -> dict:
    """LeRobot's inference path with what the model received captured."""
    from lerobot.policies.utils import prepare_observation_for_inference

    seen = {}
    sample = policy.model.sample_actions

    def sample_actions(images, img_masks, tokens, masks, noise=None, **kwargs):
        seen.update(images=torch.cat([common.keep(i) for i in images]),
                    masks=torch.cat([common.keep(m) for m in img_masks]), tokens=common.keep(tokens),
                    noise=common.keep(noise))
        return sample(images, img_masks, tokens, masks, noise=noise, **kwargs)

    policy.model.sample_actions = sample_actions
    try:
        with torch.inference_mode():
            observation = {**{k: v.copy() for k, v in images.items()}, "observation.state": state.copy()}
            frame = prepare_observation_for_inference(observation, CPU, task, robot)
            received = {k: v.clone() for k, v in frame.items() if isinstance(v, torch.Tensor)}
            batch = pre(frame)
            chunk = policy.predict_action_chunk(batch, noise=noise.clone())
            final = post(chunk)
    finally:
        del policy.model.sample_actions
    return {"received": received, "batch": batch, "chunk": chunk, "final": final, **seen}


def run_select_action(policy, pre, post, images, state, task, noise, robot, steps) -> torch.Tensor:
    """LeRobot's predict_action `steps` times (the select_action queue), the noise given through sample_noise."""
    from lerobot.common.control_utils import predict_action

    policy.reset()
    policy.model.sample_noise = lambda shape, device: noise.clone().to(device)
    try:
        rows = [predict_action({**{k: v.copy() for k, v in images.items()}, "observation.state": state.copy()},
                               policy, CPU, pre, post, use_amp=False, task=task, robot_type=robot)
                for _ in range(steps)]
    finally:
        del policy.model.sample_noise
        policy.reset()
    return torch.cat(rows)


def bins_of(normalized: np.ndarray) -> np.ndarray:
    """The 256 state bins pi0.5 writes into the prompt (cross-check of LeRobot's prompt only)."""
    return np.digitize(normalized, bins=np.linspace(-1, 1, 257)[:-1]) - 1


def case_arrays(k: int, result: dict, images: dict, state: np.ndarray, noise: torch.Tensor) -> dict:
    batch, arrays = result["batch"], {}
    for camera, image in images.items():
        short = camera.rsplit(".", 1)[-1]
        arrays[f"case{k}_{short}_uint8"] = image
        arrays[f"case{k}_{short}_float"] = result["received"][camera][0].numpy()
    normalized = batch["observation.state"][0].numpy()
    arrays.update({
        f"case{k}_model_images": result["images"].numpy(), f"case{k}_image_masks": result["masks"].numpy(),
        f"case{k}_state_raw": state, f"case{k}_state_normalized": normalized,
        f"case{k}_state_bins": bins_of(normalized).astype(np.int64),
        f"case{k}_tokens": batch["observation.language.tokens"][0].numpy().astype(np.int64),
        f"case{k}_attention_mask": batch["observation.language.attention_mask"][0].numpy(),
        f"case{k}_noise": noise[0].numpy(), f"case{k}_actions_model": result["chunk"][0].numpy(),
        f"case{k}_actions": result["final"][0].numpy()})
    return arrays


# ---------------------------------------------------------------------------------------- generate
def generate(spec: dict, out: Path) -> None:
    import lerobot.processor.tokenizer_processor as tokenizer_processor
    from lerobot.policies.pi05.processor_pi05 import make_pi05_pre_post_processors

    seeds, checkpoint = spec["seeds"], out / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    lines = corpus(spec["tokenizer"], seeds["tokenizer_corpus"])
    model_bytes = common.train_sentencepiece(lines, spec["tokenizer"]["vocab_size"], TRAINER, "tokenizer")
    (checkpoint / "tokenizer.model").write_bytes(model_bytes)
    tokenizer, pieces = gemma_tokenizer(checkpoint / "tokenizer.model")
    assert pieces.get_piece_size() <= spec["vocab_size"]
    probe = lines[::7]
    assert all(tokenizer(s)["input_ids"] == [2] + pieces.encode(s) for s in probe), "GemmaTokenizer != SentencePiece"
    tokenizer.save_pretrained(str(out / "tokenizer_hf"))

    policy, _ = build_policy(spec)
    common.redraw(policy, seeds["weights"], common.last_dim_rule)
    stats = dataset_stats(spec, np.random.default_rng(seeds["dataset"]))
    saved, tokenizer_processor.AutoTokenizer = tokenizer_processor.AutoTokenizer, LocalTokenizer
    LocalTokenizer.tokenizer = tokenizer
    try:
        pre, post = make_pi05_pre_post_processors(policy.config, dataset_stats=stats)
    finally:
        tokenizer_processor.AutoTokenizer = saved
    policy.save_pretrained(checkpoint)
    pre.save_pretrained(checkpoint)
    post.save_pretrained(checkpoint)

    rng, noise_rng = np.random.default_rng(seeds["data"]), common.rng(seeds["data"])
    q01 = stats["observation.state"]["q01"].astype(np.float64)
    q99 = stats["observation.state"]["q99"].astype(np.float64)
    cameras, names, length = list(spec["cameras"]), spec["state_names"], spec["tokenizer_max_length"]
    arrays, entries = {}, []
    for k, case in enumerate(spec["cases"]):
        drawn = {c: rng.integers(0, 256, (*spec["cameras"][c], 3), dtype=np.uint8) for c in cameras}
        position = rng.uniform(0.05, 0.95, len(names))  # inside q01..q99, except the outliers
        for name, value in case["state_outliers"].items():
            position[names.index(name)] = value
        state = (q01 + position * (q99 - q01)).astype(np.float32)
        noise = torch.randn(1, spec["chunk_size"], spec["max_action_dim"], generator=noise_rng)
        images = {c: drawn[c] for c in cameras if c not in case["missing_cameras"]}
        result = run_case(policy, pre, post, images, state, case["task"], noise, spec["robot_type"])
        again = run_case(policy, pre, post, images, state, case["task"], noise, spec["robot_type"])
        assert torch.equal(result["final"], again["final"]) and torch.equal(result["chunk"], again["chunk"])
        queued = run_select_action(policy, pre, post, images, state, case["task"], noise, spec["robot_type"],
                                   spec["chunk_size"])
        assert torch.equal(queued, result["final"][0]), "the select_action path differs from the chunk path"
        assert torch.equal(result["noise"], noise)
        arrays.update(case_arrays(k, result, images, state, noise))
        prompt = result["batch"]["task"][0]
        bins = arrays[f"case{k}_state_bins"]
        assert prompt.split("State: ")[1].split(";")[0] == " ".join(map(str, bins)), prompt
        encoded = [2] + pieces.encode(prompt)
        valid = int(arrays[f"case{k}_attention_mask"].sum())
        assert arrays[f"case{k}_tokens"][:valid].tolist() == encoded[:length], "tokens != SentencePiece"
        entries.append({
            "index": k, "task": case["task"], "prompt": prompt, "n_prompt_tokens_untruncated": len(encoded),
            "n_valid_tokens": valid, "truncated": len(encoded) > length, "cameras_given": list(images),
            "missing_cameras": case["missing_cameras"],
            "model_camera_order": [c for c in cameras if c in images] + [c for c in cameras if c not in images],
            "raw_image_hw": {c: list(spec["cameras"][c]) for c in images},
            "state_outliers_in_q01_q99_units": case["state_outliers"], "state_bins": bins.tolist(),
            "max_abs_action_model": float(result["chunk"].abs().max()), "deterministic_two_runs": True,
            "select_action_path_equal": True})
        print(f"case{k}: {valid} tokens, prompt {prompt!r}, max|a_model| {float(result['chunk'].abs().max()):.4f}")
    np.savez(out / "cases.npz", **arrays)
    dims = {key: spec[key] for key in ("vision", "lm", "expert", "vocab_size", "patch_size")}
    common.write_json(out / "cases.json", {
        "set": spec["name"],
        "what": "pi0.5 (lerobot PI05Policy) tiny random-weight checkpoint in lerobot's save layout + end-to-end cases",
        "model_dims": dims, "image_resolution": spec["image_size"], "tokenizer_max_length": length,
        "chunk_size": spec["chunk_size"], "num_inference_steps": spec["num_inference_steps"],
        "camera_names_config_order": cameras, "raw_camera_hw": spec["cameras"], "state_names": names,
        "action_names": spec["action_names"], "robot_type": spec["robot_type"],
        "tokenizer": {"file": "checkpoint/tokenizer.model", "hf_files": "tokenizer_hf/",
                      "vocab_size": pieces.get_piece_size(), "sentencepiece_trainer": TRAINER,
                      "special_ids": {"pad": 0, "eos": 1, "bos": 2, "unk": 3, "<mask>": 4,
                                      "newline": pieces.piece_to_id("\n")},
                      "hf_class": type(tokenizer).__name__, "add_bos_token": True, "add_eos_token": False,
                      "step_call": {"max_length": length, "truncation": True, "padding": "max_length",
                                    "padding_side": "right"},
                      "training_lines": len(lines)},
        "weight_init": tiny.PI_WEIGHT_INIT + " (lm_head and embed_tokens are drawn independently)",
        "seeds": seeds, "cases": entries,
        "generated_by": common.generated_by("reference/gen_pi05_checkpoint.py", "lerobot", "torch", "transformers",
                                            "tokenizers", "sentencepiece", "safetensors", "numpy",
                                            torch_num_threads=torch.get_num_threads())})


# ---------------------------------------------------------------------------------------- verify
def verify(out: Path) -> dict:
    """Everything reloaded from disk in this (fresh) process; every stored array recomputed."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from lerobot.policies.factory import make_pre_post_processors

    info = json.loads((out / "cases.json").read_text())
    checkpoint = out / "checkpoint"
    dims = info["model_dims"]
    import lerobot.policies.pi05.modeling_pi05 as modeling
    tiny.shrink_paligemma(modeling, dims["vision"], dims["lm"], dims["expert"], dims["vocab_size"], dims["patch_size"])
    tokenizer, pieces = gemma_tokenizer(checkpoint / "tokenizer.model")
    policy = modeling.PI05Policy.from_pretrained(checkpoint)  # LeRobot falls back to random weights on errors:
    stored, loaded = load_file(str(checkpoint / "model.safetensors")), policy.state_dict()  # compare them
    weights_equal = set(stored) == set(loaded) and all(torch.equal(stored[k], loaded[k]) for k in loaded)
    pre, post = make_pre_post_processors(policy.config, pretrained_path=checkpoint,
                                         preprocessor_overrides={"tokenizer_processor": {"tokenizer": tokenizer}})
    from_files = AutoTokenizer.from_pretrained(str(out / "tokenizer_hf"))
    length = info["tokenizer_max_length"]
    report = {"weights_equal_file": weights_equal, "tokenizer_hf_class": type(from_files).__name__, "cases": []}
    with np.load(out / "cases.npz") as z:
        recorded = {name: z[name] for name in z.files}
    for case in info["cases"]:
        k = case["index"]
        images = {c: recorded[f"case{k}_{c.rsplit('.', 1)[-1]}_uint8"] for c in case["cameras_given"]}
        state, noise = recorded[f"case{k}_state_raw"], torch.from_numpy(recorded[f"case{k}_noise"])[None]
        result = run_case(policy, pre, post, images, state, case["task"], noise, info["robot_type"])
        arrays = case_arrays(k, result, images, state, noise)
        queued = run_select_action(policy, pre, post, images, state, case["task"], noise, info["robot_type"],
                                   info["chunk_size"])
        encoded = ([2] + pieces.encode(case["prompt"]))[:length]
        padded = from_files([case["prompt"]], max_length=length, truncation=True, padding="max_length",
                            padding_side="right")["input_ids"][0]
        checks = {name[len(f"case{k}_"):]: bool(np.array_equal(value, recorded[name])) for name, value in arrays.items()}
        checks.update({"prompt": result["batch"]["task"][0] == case["prompt"],
                       "select_action_path": bool(np.array_equal(queued.numpy(), recorded[f"case{k}_actions"])),
                       "tokenizer_hf_dir_tokens": padded == recorded[f"case{k}_tokens"].tolist(),
                       "sentencepiece_tokens": encoded + [0] * (length - len(encoded))
                       == recorded[f"case{k}_tokens"].tolist()})
        report["cases"].append(checks)
    report["all_bit_exact"] = bool(weights_equal and all(all(c.values()) for c in report["cases"]))
    return report


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        common.threads(DEFAULTS["torch_threads"])
        report = verify(Path(sys.argv[2]))
        print("VERIFY " + json.dumps(report))
        sys.exit(0 if report["all_bit_exact"] else 1)
    spec, out, _ = common.command_line(DEFAULTS, __doc__, whole=("cameras", "joint_limits"))
    common.threads(spec["torch_threads"])
    generate(spec, out)
    finished = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--verify", str(out)],
                              capture_output=True, text=True)
    line = [x for x in finished.stdout.splitlines() if x.startswith("VERIFY ")]
    if finished.returncode != 0 or not line:
        print(finished.stdout[-3000:], finished.stderr[-3000:])
        sys.exit("verification in a fresh process FAILED")
    info = json.loads((out / "cases.json").read_text())
    info["verification"] = {"how": "fresh process: PI05Policy.from_pretrained(checkpoint) + lerobot.policies.factory."
                                   "make_pre_post_processors(config, pretrained_path=checkpoint, "
                                   "preprocessor_overrides={'tokenizer_processor': {'tokenizer': <GemmaTokenizer "
                                   "from checkpoint/tokenizer.model>}})",
                            **json.loads(line[-1][len("VERIFY "):])}
    common.write_json(out / "cases.json", info)
    common.readable(out)
    print(f"wrote {out}; fresh-process check: all bit-exact = {info['verification']['all_bit_exact']}")


if __name__ == "__main__":
    main()

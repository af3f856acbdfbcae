#!/usr/bin/env python
"""A pi0.5 reference record of a Meta-World checkpoint (reference environment): real env observations
(the first observation of a few seeded episodes per task, and one after some expert steps) run through
LeRobot's pre-processor, PI05Policy.predict_action_chunk and post-processor with recorded noise.

    python tools/metaworld_reference_record.py CHECKPOINT OUT --tasks reach-v3 button-press-topdown-v3

OUT holds checkpoint/ (a copy), cases.npz and cases.json in the layout `embodied-ros parity OUT` and
`embodied-ros bundle convert --reference OUT` read (case{k}_corner_uint8, case{k}_state_raw,
case{k}_noise, case{k}_tokens, case{k}_actions; the prompt and task of each case, the head counts and
state names the checkpoint's config does not carry).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from embodied_ros.pipeline.noise import stage_noise  # noqa: E402
from embodied_ros.sim.metaworld import CAMERA, MetaWorldTask  # noqa: E402

RECORD_SEEDS = (900_001, 900_002)  # neither training (1e6 + i) nor evaluation (small numbers) seeds
EXPERT_STEPS = 12


def task_cases(checkpoint: Path, task: str) -> list[dict]:
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import metaworld_policy as mwp
    from lerobot.policies.utils import prepare_observation_for_inference

    torch.set_num_threads(2)
    policy, pre, post, _ = mwp.load(checkpoint)
    cfg = policy.config
    env = MetaWorldTask(task)
    expert = env.expert()
    cases = []
    for seed in RECORD_SEEDS:
        observations = [env.reset(seed)]
        for _ in range(EXPERT_STEPS):
            last = env.step(expert())
        observations.append(last)
        for n, step in enumerate(observations):
            noise = stage_noise(seed, "action", n, (cfg.chunk_size, cfg.max_action_dim))
            obs = {mwp.CAMERA_KEY: step.image.copy(), "observation.state": step.state.copy()}
            with torch.inference_mode():
                frame = prepare_observation_for_inference(obs, torch.device("cpu"), env.text, "")
                batch = pre(frame)
                actions = post(policy.predict_action_chunk(batch, noise=torch.from_numpy(noise)[None]))[0].numpy()
            cases.append({"task": env.text, "prompt": batch["task"][0], "image": step.image.tolist(),
                          "state": step.state.tolist(), "noise": noise.tolist(), "actions": actions.tolist(),
                          "tokens": batch["observation.language.tokens"][0].numpy().tolist()})
    env.close()
    return cases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--tasks", nargs="+", default=["reach-v3", "button-press-topdown-v3"])
    p.add_argument("--task-json", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.task_json:
        Path(args.task_json).write_text(json.dumps(task_cases(args.checkpoint, args.tasks[0])))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    cases = []
    for task in args.tasks:  # one env per process
        result = args.out / f".{task}.json"
        if subprocess.run([sys.executable, __file__, str(args.checkpoint), str(args.out), "--tasks", task,
                           "--task-json", str(result)]).returncode != 0:
            return 1
        cases += json.loads(result.read_text())
        result.unlink()
    arrays = {}
    for k, c in enumerate(cases):
        arrays[f"case{k}_{CAMERA}_uint8"] = np.asarray(c["image"], dtype=np.uint8)
        arrays[f"case{k}_state_raw"] = np.asarray(c["state"], dtype=np.float32)
        arrays[f"case{k}_noise"] = np.asarray(c["noise"], dtype=np.float32)
        arrays[f"case{k}_tokens"] = np.asarray(c["tokens"], dtype=np.int64)
        arrays[f"case{k}_actions"] = np.asarray(c["actions"], dtype=np.float32)
    np.savez(args.out / "cases.npz", **arrays)
    training = json.loads((args.checkpoint / "training.json").read_text())
    (args.out / "cases.json").write_text(json.dumps({
        "what": "Meta-World observations through LeRobot's PI05Policy (pre-processor, predict_action_chunk, "
                "post-processor) with recorded noise", "camera": CAMERA,
        "model_dims": training["dims"], "state_names": training["state_names"],
        "cases": [{"index": k, "task": c["task"], "prompt": c["prompt"]} for k, c in enumerate(cases)]}, indent=1))
    if (args.out / "checkpoint").exists():
        shutil.rmtree(args.out / "checkpoint")
    shutil.copytree(args.checkpoint, args.out / "checkpoint")
    print(f"wrote {len(cases)} cases to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""The episodes of `embodied-ros eval metaworld`, run with LeRobot's PyTorch policy (reference
environment: LeRobot 0.6.1, torch, mujoco 3.3, metaworld 3.0). Same seeds, same goals, same initial
noise (step k of an episode with seed s plans from graph.noise.stage_noise(s, "action", k, ...)),
5 of each chunk's 10 actions executed, as the graph's config/metaworld.yaml schedules it.

    python tools/metaworld_eval_torch.py CHECKPOINT --tasks reach-v3 --episodes 50 --seed 0 --out DIR

Writes DIR/records.json (the graph run's format; `embodied-ros eval metaworld
--reference DIR` compares first chunks); last line `success_rate=<v>`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from embodied_ros.pipeline.noise import stage_noise  # noqa: E402
from embodied_ros.sim.metaworld import MetaWorldTask  # noqa: E402
from embodied_ros.sim.metaworld_eval import FRAMES_KEPT, episode_record, save_records, success_rate  # noqa: E402


def run_task(checkpoint: Path, task: str, seeds: list[int], max_steps: int, threads: int, json_path: str) -> list[dict]:
    import torch
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import metaworld_policy as mwp
    from lerobot.policies.utils import prepare_observation_for_inference

    torch.set_num_threads(threads)
    policy, pre, post, _ = mwp.load(checkpoint)
    cfg = policy.config
    env = MetaWorldTask(task)
    records = []
    for index, seed in enumerate(seeds):
        started = time.monotonic()
        step = env.reset(seed)
        frames = {0: step.image} if index == 0 else {}
        rewards, actions, chunk, first_chunk = [], [], None, None
        for k in range(max_steps):
            if k % cfg.n_action_steps == 0:
                noise = torch.from_numpy(stage_noise(seed, "action", k, (cfg.chunk_size, cfg.max_action_dim)))[None]
                obs = {mwp.CAMERA_KEY: step.image.copy(), "observation.state": step.state.copy()}
                with torch.inference_mode():
                    frame = prepare_observation_for_inference(obs, torch.device("cpu"), env.text, "")
                    chunk = post(policy.predict_action_chunk(pre(frame), noise=noise))[0].numpy()
                if first_chunk is None:
                    first_chunk = chunk
            action = chunk[k % cfg.n_action_steps].astype(np.float64)
            step = env.step(action)
            actions.append(action)
            rewards.append(step.reward)
            if index == 0 and k + 1 in FRAMES_KEPT:
                frames[k + 1] = step.image
            if step.success:
                break
        records.append(episode_record(task, seed, step.success, len(actions), rewards, actions, first_chunk, frames))
        print(f"{task} seed {seed}: {'success' if step.success else 'failure'} after {len(actions)} steps "
              f"({time.monotonic() - started:.1f} s)", flush=True)
        save_records(records, json_path)
    env.close()
    return records


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--tasks", nargs="+", default=["reach-v3", "button-press-topdown-v3"])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("metaworld_eval_torch"))
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--task-json", help=argparse.SUPPRESS)  # one task in this process
    args = p.parse_args()
    seeds = list(range(args.seed, args.seed + args.episodes))
    if args.task_json:
        run_task(args.checkpoint, args.tasks[0], seeds, args.max_steps, args.threads, args.task_json)
        return 0
    records = []
    with tempfile.TemporaryDirectory() as scratch:
        for task in args.tasks:  # one env per process
            result = Path(scratch) / f"{task}.json"
            command = [sys.executable, __file__, str(args.checkpoint), "--tasks", task, "--episodes", str(args.episodes),
                       "--seed", str(args.seed), "--max-steps", str(args.max_steps), "--threads", str(args.threads),
                       "--task-json", str(result)]
            if subprocess.run(command).returncode != 0:
                print(f"{task}: failed", file=sys.stderr)
                return 1
            mine = json.loads(result.read_text())
            records += mine
            print(f"{task}: {sum(r['success'] for r in mine)}/{len(mine)} successes", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "records.json").write_text(json.dumps([{k: v for k, v in r.items() if k != "frames"} for r in records]))
    print(f"records: {args.out / 'records.json'}")
    print(f"success_rate={success_rate(records):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

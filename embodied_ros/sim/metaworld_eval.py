"""Closed-loop evaluation on Meta-World: episodes through the lock-step node graph, and the report.

Each episode runs a fresh lock-step graph (so the controller starts clean and the flow noise of
step k is `stage_noise(seed, "action", k, ...)`, the episode seed being the noise seed): at every step
the env's image and state go in, the controller's command for that step comes out and is the env's
action. `run_task` runs one task's episodes (one task per process: Meta-World misbehaves with two
environments in one process); `write_report` writes the page. The reference-environment script
(tools/metaworld_eval_torch.py) runs the same episodes with LeRobot's PyTorch policy and writes the same
per-task JSON, so the two can be compared row for row.

`blocking_delay` > 0 is synchronous execution with an inference delay, as a robot whose control
loop waits for the policy sees it: every chunk the graph solves after the first (which lands at
once, as the graph lands a first chunk in every mode) costs that many env steps during which the
world goes on (a moving goal keeps moving) and the arm holds (`hold_action`), before the chunk's
first command runs. The graph itself runs as without a delay. Held steps count toward
`max_steps` like any other, and are listed per episode (`held_steps`).
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from embodied_ros.sim.metaworld import DEFAULT_MAX_STEPS, MetaWorldTask, hold_action

FRAMES_KEPT = (0, 10, 20, 40)  # steps of the first episode whose frames go into the report


def episode_record(task: str, seed: int, success: bool, steps: int, returns: list[float], actions: list,
                   first_chunk: np.ndarray, frames: dict[int, np.ndarray] | None = None,
                   held_steps: list[int] = ()) -> dict:
    return {"task": task, "seed": seed, "success": success, "steps": steps,
            "return": float(np.sum(returns)), "rewards": [round(r, 5) for r in returns],
            "actions": np.asarray(actions, dtype=np.float64).round(6).tolist(),
            "first_chunk": np.asarray(first_chunk, dtype=np.float64).tolist(), "frames": frames or {},
            "held_steps": list(held_steps)}


def run_task(config, task: str, seeds: list[int], max_steps: int = DEFAULT_MAX_STEPS, domain_id: int | None = None,
             log=print, on_episode=None, goal_speed: float = 0.0, blocking_delay: int = 0) -> list[dict]:
    """The episodes of `task` with these seeds through the graph of `config` (its bundle loaded once);
    `on_episode(records)` after each episode. `goal_speed`: m per step of a moving goal (sim/metaworld.py);
    `blocking_delay`: env steps of holding while each chunk after the first is solved (module docstring)."""
    from embodied_ros.nodes.runtime_cache import acquire_runtime

    runtime = acquire_runtime(config)
    camera = (config.inputs.cameras or runtime.spec.camera_names)[0]
    env = MetaWorldTask(task, goal_speed=goal_speed)
    records = []
    try:
        for index, seed in enumerate(seeds):
            started = time.monotonic()
            episode_config = replace(config, stages=replace(config.stages, noise_seed=seed))
            record = run_episode(episode_config, runtime, env, task, seed, camera, max_steps, domain_id,
                                 blocking_delay, keep_frames=index == 0)
            records.append(record)
            log(f"{task} seed {seed}: {'success' if record['success'] else 'failure'} after {record['steps']} steps "
                f"({time.monotonic() - started:.1f} s)")
            if on_episode is not None:
                on_episode(records)
    finally:
        env.close()
    return records


def run_episode(config, runtime, env, task: str, seed: int, camera: str, max_steps: int, domain_id: int | None,
                blocking_delay: int = 0, keep_frames: bool = False) -> dict:
    """One episode: a fresh lock-step graph, `max_steps` env steps at most (held ones included)."""
    from embodied_ros.graph.lockstep import LockstepGraph

    if blocking_delay < 0:
        raise ValueError(f"the blocking delay must be >= 0 steps, got {blocking_delay}")
    step = env.reset(seed)
    frames = {0: step.image} if keep_frames else {}
    rewards, actions, held, first_chunk = [], [], [], None
    solved_stamps: set[int] = set()

    def advance(action) -> bool:
        """One env step with `action`; True when the episode is over."""
        nonlocal step
        step = env.step(action)
        actions.append(action)
        rewards.append(step.reward)
        if keep_frames and len(actions) in FRAMES_KEPT:
            frames[len(actions)] = step.image
        return step.success or len(actions) >= max_steps

    with LockstepGraph(config, runtime=runtime, domain_id=domain_id, timeout_s=60) as graph:
        for k in range(max_steps):
            out = graph.step({camera: step.image}, step.state, instruction=env.text)
            if out.input_problem:
                raise RuntimeError(f"{task} seed {seed} step {k}: the graph refused the observation: "
                                   f"{out.input_problem}")
            if len(out.commands) != 1:
                raise RuntimeError(f"{task} seed {seed} step {k}: {len(out.commands)} commands, need one a "
                                   f"step (controller.rate_hz = 1 / schedule.step_period_s)")
            if out.chunk is not None and out.chunk.stamp_ns not in solved_stamps:
                solved_stamps.add(out.chunk.stamp_ns)
                if first_chunk is None:
                    first_chunk = out.chunk.actions
                elif out.chunk.stamp_ns == out.stamp_ns:  # solved on this step's observation: wait for it
                    over = False
                    for _ in range(blocking_delay):
                        held.append(len(actions))
                        if over := advance(hold_action(actions[-1] if actions else None)):
                            break
                    if over:
                        break
            if advance(out.commands[0].positions):
                break
    return episode_record(task, seed, step.success, len(actions), rewards, actions, first_chunk, frames, held)


def success_rate(records: list[dict]) -> float:
    return float(np.mean([r["success"] for r in records])) if records else 0.0


def compare_first_chunks(records: list[dict], reference: list[dict]) -> float:
    """Largest |difference| between the first action chunks of the same (task, seed) episodes."""
    by_key = {(r["task"], r["seed"]): np.asarray(r["first_chunk"]) for r in reference}
    diffs = [float(np.max(np.abs(np.asarray(r["first_chunk"]) - by_key[(r["task"], r["seed"])])))
             for r in records if (r["task"], r["seed"]) in by_key]
    return max(diffs) if diffs else float("nan")


def write_report(out: Path, records: list[dict], title: str, notes: list[str] = ()) -> Path:
    """index.html with the success table, return and action plots and a few frames; records.json."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    tasks = list(dict.fromkeys(r["task"] for r in records))
    rows = []
    for task in tasks:
        mine = [r for r in records if r["task"] == task]
        won = [r for r in mine if r["success"]]
        steps = np.mean([r["steps"] for r in won]) if won else float("nan")
        rows.append(f"<tr><td>{html.escape(task)}</td><td>{len(won)}/{len(mine)}</td>"
                    f"<td>{100 * len(won) / len(mine):.1f}%</td><td>{steps:.1f}</td></tr>")
    figures = []
    fig, ax = plt.subplots(figsize=(7, 3))
    for task in tasks:
        mine = [r for r in records if r["task"] == task]
        ax.plot([r["seed"] for r in mine], [r["return"] for r in mine], "o", label=task)
    ax.set_xlabel("episode seed"), ax.set_ylabel("return"), ax.legend(fontsize=8)
    fig.tight_layout(), fig.savefig(out / "returns.png", dpi=90), plt.close(fig)
    figures.append("returns.png")
    for task in tasks:
        first = next(r for r in records if r["task"] == task)
        actions = np.asarray(first["actions"])
        fig, ax = plt.subplots(figsize=(7, 2.6))
        for j, name in enumerate(("dx", "dy", "dz", "grip")[:actions.shape[1]]):
            ax.plot(actions[:, j], label=name)
        ax.set_title(f"{task}, seed {first['seed']}: actions"), ax.set_xlabel("step"), ax.legend(fontsize=8)
        fig.tight_layout(), fig.savefig(out / f"actions-{task}.png", dpi=90), plt.close(fig)
        figures.append(f"actions-{task}.png")
        for k, frame in first["frames"].items():
            name = f"frame-{task}-{k}.png"
            plt.imsave(out / name, np.flipud(np.asarray(frame, dtype=np.uint8)))  # the corner camera renders upside down
            figures.append(name)
    total = success_rate(records)
    page = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>",
            f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(n)}</p>" for n in notes),
            "<table border=1 cellpadding=4><tr><th>task</th><th>successes</th><th>rate</th>"
            "<th>mean steps to success</th></tr>", *rows, f"</table><p>overall success rate {total:.3f}</p>",
            *(f"<img src='{f}' title='{f}'>" for f in figures)]
    (out / "index.html").write_text("\n".join(page))
    kept = [{k: v for k, v in r.items() if k != "frames"} for r in records]
    (out / "records.json").write_text(json.dumps(kept))
    return out / "index.html"


def _task_main() -> int:
    """One task's episodes in this process (what `embodied-ros eval metaworld` starts per task)."""
    import argparse
    import sys

    from embodied_ros.node_infra.config import load_config

    parser = argparse.ArgumentParser(prog="python -m embodied_ros.sim.metaworld_eval")
    parser.add_argument("--config", required=True)
    parser.add_argument("--overrides", default="{}", help="JSON {dotted key: value}")
    parser.add_argument("--task", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", required=True)
    parser.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEPS)
    parser.add_argument("--domain-id", type=int)
    parser.add_argument("--json", required=True)
    parser.add_argument("--goal-speed", type=float, default=0.0, help="moving goal, m per step (sim/metaworld.py)")
    parser.add_argument("--blocking-delay", type=int, default=0,
                        help="synchronous execution with this inference delay, steps (the arm holds meanwhile)")
    args = parser.parse_args()
    try:
        config = load_config(args.config, json.loads(args.overrides))
        run_task(config, args.task, args.seeds, args.max_steps, args.domain_id,
                 log=lambda line: print(line, flush=True), on_episode=lambda records: save_records(records, args.json),
                 goal_speed=args.goal_speed, blocking_delay=args.blocking_delay)
    except (ValueError, RuntimeError, OSError, TimeoutError) as error:
        print(f"eval metaworld: {args.task}: {error}", file=sys.stderr)
        return 1
    return 0


def save_records(records: list[dict], path: str) -> None:
    """The episodes so far as JSON (frames as lists), replaced whole so a reader never sees half."""
    rows = [{**r, "frames": {str(k): np.asarray(v).tolist() for k, v in r["frames"].items()}} for r in records]
    Path(path + ".part").write_text(json.dumps(rows))
    Path(path + ".part").replace(path)


if __name__ == "__main__":
    raise SystemExit(_task_main())

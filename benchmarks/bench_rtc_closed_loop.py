"""Real-time chunking in the closed loop: Meta-World episodes through the lock-step node graph with an
added inference delay, in three modes side by side on the same episodes (seeds, goals, noise).

    python benchmarks/bench_rtc_closed_loop.py [--bundle bundles/pi05_metaworld.gguf] [--delay 3]
                                               [--tasks reach-v3 button-press-topdown-v3] [--episodes 50]
                                               [--seed 0] [--workdir /tmp/bench_rtc_closed_loop] [--no-write]

  sync       no delay: each chunk is executed from the step it was solved on (the reference)
  async      each chunk lands `--delay` steps after the observation it was solved on
             (schedule.lockstep_action_delay) while the controller runs the executing one; the new
             chunk takes over at the landing, rows by their instants
  async_rtc  the same, each chunk solved with real-time chunking toward what the controller will
             still execute of the executing one (rtc.enabled; the delay it guides with is measured)

config/metaworld.yaml plans every 5 steps with chunks of 10 actions, so a delay of 3 steps is 30%
of the chunk horizon. Reported per mode and task: successes, mean steps to success, and the command
step at chunk switches (|a[L] - a[L-1]| over the action's values at each landing step L) against the
step within chunks, from each episode's executed actions. Time is simulated, so nothing depends on
this machine's speed; one process per task and mode (Meta-World wants one environment per process),
two at a time.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

CONFIG = common.REPO_ROOT / "config" / "metaworld.yaml"
SECTION = "rtc_closed_loop"


def modes(delay: int) -> dict[str, dict]:
    return {"sync": {},
            "async": {"schedule.lockstep_action_delay": delay},
            "async_rtc": {"schedule.lockstep_action_delay": delay, "rtc.enabled": True, "rtc.delay": "measured"}}


def landing_steps(steps: int, plan_every: int, delay: int) -> list[int]:
    """Steps at which a new chunk takes over: the first at 0, then each plan's step + the delay."""
    return [k + delay for k in range(plan_every, steps, plan_every) if k + delay < steps]


def switch_steps(records: list[dict], plan_every: int, delay: int) -> tuple[list[float], list[float]]:
    """(command steps at chunk switches, command steps within chunks), max-abs over the action's values."""
    at_switch, within = [], []
    for record in records:
        actions = np.asarray(record["actions"], dtype=np.float64)
        if len(actions) < 2:
            continue
        steps = np.max(np.abs(np.diff(actions, axis=0)), axis=1)  # steps[t - 1] = |a[t] - a[t-1]|
        landings = set(landing_steps(len(actions), plan_every, delay))
        for t in range(1, len(actions)):
            (at_switch if t in landings else within).append(float(steps[t - 1]))
    return at_switch, within


def run_mode(name: str, overrides: dict, args, domain_base: int) -> dict[str, list[dict]]:
    """Every task's episodes in this mode, two tasks at a time; {task: records}."""
    seeds = [str(s) for s in range(args.seed, args.seed + args.episodes)]
    running = []
    for index, task in enumerate(args.tasks):
        out = args.workdir / f"{name}-{task}.json"
        log = open(args.workdir / f"{name}-{task}.log", "w")
        command = [sys.executable, "-m", "embodied_ros.sim.metaworld_eval", "--config", str(CONFIG),
                   "--overrides", json.dumps({"bundle": str(args.bundle), **overrides}), "--task", task,
                   "--seeds", *seeds, "--max-steps", str(args.max_steps), "--domain-id", str(domain_base + index),
                   "--json", str(out)]
        running.append((task, out, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                          cwd=common.REPO_ROOT)))
        if len(running) % 2 == 0:
            running[-2][3].wait()
    results = {}
    for task, out, log, process in running:
        if process.wait() != 0:
            raise RuntimeError(f"{name} {task}: exited with {process.returncode}; see {log.name}")
        log.close()
        results[task] = json.loads(out.read_text())
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, default=common.REPO_ROOT / "bundles" / "pi05_metaworld.gguf")
    parser.add_argument("--delay", type=int, default=3, help="added inference delay, steps (default 3)")
    parser.add_argument("--tasks", nargs="+", default=["reach-v3", "button-press-topdown-v3"])
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0, help="first episode seed")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_rtc_closed_loop"))
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    from embodied_ros.node_infra.config import load_config

    plan_every = load_config(CONFIG).schedule.period_of("action")
    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}", flush=True)
    rows = []
    for index, (name, overrides) in enumerate(modes(args.delay).items()):
        results = run_mode(name, overrides, args, 120 + 10 * index)
        delay = overrides.get("schedule.lockstep_action_delay", 0)
        for task, records in results.items():
            won = [r for r in records if r["success"]]
            at_switch, within = switch_steps(records, plan_every, delay)
            rows.append({"mode": name, "delay_steps": delay, "task": task,
                         "successes": f"{len(won)}/{len(records)}",
                         "success_rate": round(len(won) / len(records), 3),
                         "steps_to_success": round(float(np.mean([r["steps"] for r in won])), 1) if won else None,
                         "switch_step_mean": round(float(np.mean(at_switch)), 4) if at_switch else None,
                         "switch_step_p95": round(float(np.percentile(at_switch, 95)), 4) if at_switch else None,
                         "within_step_mean": round(float(np.mean(within)), 4) if within else None})
            print(json.dumps(rows[-1]), flush=True)
    table = common.markdown_table(rows)
    print(table)
    if not args.no_write:
        note = (f"Seeds {args.seed}..{args.seed + args.episodes - 1} per task, the same goals and flow noise in every "
                f"mode; {args.max_steps}-step cap; plan every {plan_every} steps, chunks of 10 actions. switch_step: "
                "max-abs change of the command at the steps where a new chunk takes over; within_step: the same "
                "between other consecutive steps (the command's ordinary rate of change).")
        common.write_section(common.BENCHMARKS_MD, SECTION, table + "\n\n" + note, command=common.command_line(),
                             machine=common.machine_line(machine))
    print(json.dumps({"rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a stage's call costs after a pause, against straight after the previous call: the fixed cost
behind the latency budgets' `stage_allowance_ms` (a graph's stage waits for its input before every
call).

    python benchmarks/bench_after_pause.py [--configs pi0_tiny,pi05_tiny,pi05_small] [--repeats 25] [--no-write]

For each config (its shipped bundle; pi05_small: the test/data record converted with the tiny
checkpoint's tokenizer), on one thread of its own (as a graph stage), the perception call and the
action call are each timed --repeats times after each way of spending the time before them: none
(back to back), a sleep of 5, 20 or 90 ms, 90 ms of a Python busy loop (the core never idles),
90 ms of sweeps over 64 MiB (every data cache flushed by this process) and a sleep of 90 ms
followed by a 10 ms busy loop (the core awake again before the call). The table gives the median of
each and its excess over back to back. The last line printed is one JSON object with every number.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_command_timing import CONFIGS, small_bundle  # noqa: E402

SECTION = "after_pause"
CHOICES = [name for name in CONFIGS if name != "lingbot_va"]  # its action call reads a world output
_SWEPT = np.zeros(64 << 20, np.uint8)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sweep(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _SWEPT.sum()


PAUSES = {
    "back_to_back": lambda: None,
    "sleep_5ms": lambda: time.sleep(0.005),
    "sleep_20ms": lambda: time.sleep(0.02),
    "sleep_90ms": lambda: time.sleep(0.09),
    "python_spin_90ms": lambda: _spin(0.09),
    "sweep_64MiB_90ms": lambda: _sweep(0.09),
    "sleep_90ms_spin_10ms": lambda: (time.sleep(0.09), _spin(0.01)),
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="pi0_tiny,pi05_tiny,pi05_small",
                        help=f"comma-separated, of {','.join(CHOICES)}")
    parser.add_argument("--repeats", type=int, default=25, help="timed calls per stage and pause")
    common.add_workdir_argument(parser, "bench_command_timing", "where the pi05_small bundle is made (once)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    args.configs = common.chosen(parser, "--configs", args.configs, CHOICES)
    if args.repeats < 3:
        parser.error("--repeats must be >= 3")
    return args


def time_after_pauses(runtime, repeats: int) -> dict[str, dict[str, float]]:
    """stage -> pause -> median ms of the call after it, on a thread of its own."""
    from embodied_ros.pipeline.timing import on_stage_thread, sample_observation

    observation = sample_observation(runtime)
    noise = np.zeros(runtime.spec.noise_shape, np.float32)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    calls = {"perception": lambda: runtime.encode(observation), "action": lambda: runtime.act(prefix, None, noise)}

    def run() -> dict[str, dict[str, float]]:
        result: dict[str, dict[str, float]] = {}
        for stage, call in calls.items():
            for _ in range(5):
                call()
            result[stage] = {}
            for pause_name, pause in PAUSES.items():
                times = []
                for _ in range(repeats):
                    pause()
                    start = time.perf_counter()
                    call()
                    times.append((time.perf_counter() - start) * 1e3)
                result[stage][pause_name] = float(np.median(times))
        return result

    return on_stage_thread(run)


def main(argv=None) -> int:
    args = parse_args(argv)
    from embodied_ros.node_infra.config import load_config
    from embodied_ros.nodes.runtime_cache import acquire_runtime

    machine = common.machine_description()
    print(f"machine: {common.machine_line(machine)}", flush=True)
    rows = []
    for name in args.configs:
        config_file, bundle_kind = CONFIGS[name]
        overrides = {"bundle": str(small_bundle(args.workdir))} if bundle_kind == "pi05_small" else {}
        runtime = acquire_runtime(load_config(common.REPO_ROOT / config_file, overrides))
        for stage, medians in time_after_pauses(runtime, args.repeats).items():
            base = medians["back_to_back"]
            row = {"config": name, "stage": stage}
            for pause_name, ms in medians.items():
                row[pause_name] = f"{ms:.3f}" if pause_name == "back_to_back" else f"{ms:.3f} ({ms - base:+.2f})"
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = common.markdown_table(rows)
    print(table)
    if not args.no_write:
        common.write_section(common.BENCHMARKS_MD, SECTION, table + "\n\n" + NOTE, command=common.command_line(),
                             machine=common.machine_line(machine))
    print(json.dumps({"machine": machine["cpu_model"], "repeats": args.repeats, "rows": rows}))
    return 0


NOTE = ("Median ms of each call (--repeats per cell) after the pause its column names, on a thread of its "
        "own, and in brackets its excess over back to back. A graph's stage pauses before every call (it waits "
        "for its input, one step period at a time), so it pays the excess of the sleep columns on every call: "
        "the budgets' stage_allowance_ms (config/budgets/two-core.yaml).")


if __name__ == "__main__":
    sys.exit(main())

"""Which kernels compile after a runtime's warm_up, run in a fresh interpreter (the test process has
compiled everything already)."""

import json
import subprocess
import sys
from pathlib import Path

_PROBE = """
import importlib, json, sys
import numpy as np
from numba.core.dispatcher import Dispatcher
from embodied_ros.bundle import open_bundle
from embodied_ros.pipeline.stages import infer
from embodied_ros.pipeline.types import Observation

def signatures():
    return {f"{m}.{n}": len(o.signatures) for m, mod in list(sys.modules.items()) if m.startswith("embodied_ros.kernels")
            for n, o in vars(mod).items() if isinstance(o, Dispatcher)}

runtime = importlib.import_module(sys.argv[3]).load_runtime(open_bundle(sys.argv[1]))
runtime.warm_up()
before = signatures()
cases = json.load(open(sys.argv[2] + "/cases.json"))["cases"]
arrays = np.load(sys.argv[2] + "/cases.npz")
for k, case in enumerate(cases):
    images = {n: arrays[f"case{k}_{n}_uint8"] for n in runtime.spec.camera_names if f"case{k}_{n}_uint8" in arrays}
    infer(runtime, Observation(k, images, arrays[f"case{k}_state_raw"], case["task"]), arrays[f"case{k}_noise"])
print(json.dumps({name: [before.get(name, 0), count] for name, count in signatures().items()
                  if count != before.get(name, 0)}))
"""


def compiled_after_warm_up(runtime_module: str, bundle_path: Path, record: Path) -> dict[str, list[int]]:
    """{kernel: [signatures after warm_up, after the record's raw cases]} for each kernel that compiled
    again; `record` holds a pipeline record's cases.json and cases.npz."""
    result = subprocess.run([sys.executable, "-c", _PROBE, str(bundle_path), str(record), runtime_module],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])

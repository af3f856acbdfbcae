"""The reference record of a world-action bundle, made when the bundle is converted.

There is no PyTorch model of the whole world-action model to record against (only Wan blocks,
see parity.py), so the record guards the runtime against regressions instead: one observation
(seeded camera images and state, an instruction) with fixed world and action noise, run through
the four stages by the numpy reference backend over the weights as stored in the bundle. Expected
are the predicted latents (world stage) and the action chunk. `embodied-ros bundle verify` reruns
it with the chosen backend.

TOLERANCE (max abs error over both outputs, which are of magnitude ~5) is 5e-4. Measured on the
small preset: the numba backend reproduces the numpy run to 1.4e-6 (f32 weights) and 1.0e-6
(q8_0); 5e-4 leaves room for other summation orders (CUDA, other BLAS) while scaling the
predicted frames' keys by 0.99 already moves the actions by 1.6e-3.
"""

from __future__ import annotations

import numpy as np

from embodied_ros.bundle import ReferenceRecord
from embodied_ros.pipeline.types import Observation

TOLERANCE = 5e-4
KIND = "world_action"
INSTRUCTION = "pick up the red block and put it in the bin"
_SEED = 20240601


def make_reference(bundle) -> ReferenceRecord:
    """Run the reference case through `bundle` with the numpy backend and record it."""
    from embodied_ros.models.lingbot_va import load_runtime

    runtime = load_runtime(bundle, "numpy")
    spec = runtime.spec
    rng = np.random.default_rng(_SEED)
    height, width = spec.image_size
    inputs = {f"image_{camera}": rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
              for camera in spec.camera_names}
    inputs["state"] = rng.uniform(-1.0, 1.0, len(spec.state_names)).astype(np.float32)
    noise = {"world": rng.standard_normal(spec.world_noise_shape).astype(np.float32),
             "action": rng.standard_normal(spec.noise_shape).astype(np.float32)}
    latents, actions = run_case(runtime, inputs, noise, INSTRUCTION)
    return ReferenceRecord(inputs=inputs, expected={"world_latents": latents, "actions": actions},
                           tolerance=TOLERANCE, noise=noise,
                           fields={"kind": KIND, "instruction": INSTRUCTION, "backend": "numpy"})


def run_case(runtime, inputs, noise, instruction: str) -> tuple[np.ndarray, np.ndarray]:
    """(predicted latents [C, F, R, W], actions [N, A]) of the reference case on `runtime`."""
    spec = runtime.spec
    missing = [camera for camera in spec.camera_names if f"image_{camera}" not in inputs]
    if missing:
        raise ValueError(f"reference record has no images of cameras {missing}: it was made for another model")
    images = {camera: np.asarray(inputs[f"image_{camera}"]) for camera in spec.camera_names}
    observation = Observation(0, images, np.asarray(inputs["state"]), instruction)
    prefix = runtime.build_prefix(runtime.encode(observation), observation)
    world = runtime.predict_world(prefix, np.asarray(noise["world"]))
    chunk = runtime.act(prefix, world, np.asarray(noise["action"]))
    return np.asarray(world.tensors["latents"]), np.asarray(chunk.actions)


def verify(bundle, backend: str = "numba") -> tuple[float, float]:
    """Rerun the bundle's world-action reference record: (max abs error, tolerance)."""
    from embodied_ros.models.lingbot_va import load_runtime

    record = bundle.reference
    if record is None or record.fields.get("kind") != KIND:
        raise ValueError(f"{bundle.path}: the bundle carries no world-action reference record")
    latents, actions = run_case(load_runtime(bundle, backend), record.inputs, record.noise,
                                record.fields["instruction"])
    error = max(float(np.max(np.abs(latents - record.expected["world_latents"]))),
                float(np.max(np.abs(actions - record.expected["actions"]))))
    return error, float(record.tolerance)

"""The device-resident runtime (embodied_ros/gpu/) on machines without a GPU: its models run on the host
engine, which performs the GPU's operations in numpy. In float32 (exact) the device math must equal the
CPU runtime to float32 precision, so that the bf16 engine's differences are its roundings alone; those
must stay within the bf16 bundle tolerance of LeRobot's recorded actions. Then the captured solve and
perception (replayed graphs), real-time chunking's guided solve, the cache across processes, refusals,
and what a machine without a GPU says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from embodied_ros.gpu.captured import Captured
from embodied_ros.gpu.host import HostEngine, from_bf16
from embodied_ros.gpu.layers import DevicePrefixCache
from embodied_ros.bundle.memory import BundleMemoryError
from embodied_ros.gpu.pi05 import FLOAT32_PRODUCTS, DevicePi05Model
from embodied_ros.gpu.smolvla import DeviceSmolVLAModel
from embodied_ros.heads import rtc
from embodied_ros.models.kit.records import TOLERANCES
from embodied_ros.models.pi05 import RECORDS as PI05_RECORDS
from embodied_ros.models.pi05.model import Pi05Model
from embodied_ros.models.pi05.weights import is_linear_weight
from embodied_ros.models.smolvla import RECORDS as SMOLVLA_RECORDS
from embodied_ros.models.smolvla import weights as smolvla_weights
from embodied_ros.models.smolvla.config import SmolVLAConfig
from embodied_ros.models.smolvla.model import SmolVLAModel
from embodied_ros.node_infra.transport import array_to_tensor
from pi05_fixtures import DATA, SMALL, TINY, case_count, record

REPO = Path(__file__).resolve().parent.parent
EXACT = 2e-5  # float32: the same operations in another order
SMOLVLA_SETS = [DATA / "smolvla_tiny", DATA / "extra" / "smolvla_three_cam_gqa"]
PI05_SETS = [TINY, SMALL, DATA / "extra" / "pi05_gqa", DATA / "extra" / "pi05_three_cam_missing"]


def smolvla_record(folder: Path):
    config = SmolVLAConfig.from_fixture_json(json.loads((folder / "config.json").read_text()))
    state = load_file(str(folder / "model.safetensors"))
    weights = smolvla_weights.stack_projections(smolvla_weights.rename_lerobot(state), config)
    return config, weights, dict(np.load(folder / "cases.npz"))


def actions(model, family: str, cases: dict, k: int, action_dim: int) -> np.ndarray:
    return (PI05_RECORDS if family == "pi05" else SMOLVLA_RECORDS).model_case(model, cases, f"case{k}", action_dim)


FAMILIES = {"pi05": (record, Pi05Model, DevicePi05Model), "smolvla": (smolvla_record, SmolVLAModel,
                                                                           DeviceSmolVLAModel)}
SETS = [("pi05", folder) for folder in PI05_SETS] + [("smolvla", folder) for folder in SMOLVLA_SETS]


@pytest.mark.parametrize("family,folder", SETS, ids=[f"{family}-{folder.name}" for family, folder in SETS])
def test_device_math_equals_the_cpu_runtime_in_float32_and_stays_within_bf16_tolerance(family, folder):
    load, cpu_model, device_model = FAMILIES[family]
    config, weights, cases = load(folder)
    reference = cpu_model(config, weights, "numpy")
    exact = device_model(config, weights, HostEngine(exact=True))
    rounding = device_model(config, weights, HostEngine())
    for k in range(len({name.split("_")[0] for name in cases if name.endswith("_noise")})):
        expected = actions(reference, family, cases, k, config.action_dim)
        assert np.abs(actions(exact, family, cases, k, config.action_dim) - expected).max() < EXACT
        bf16_error = np.abs(actions(rounding, family, cases, k, config.action_dim) - cases[f"case{k}_actions"]).max()
        assert 1e-4 < bf16_error < TOLERANCES["bf16"], f"case {k}: {bf16_error}"  # rounded, and within the bundle's


def test_a_replayed_solve_and_perception_give_what_the_first_run_gave():
    config, weights, cases = record(TINY)
    model = DevicePi05Model(config, weights, HostEngine())
    model.warm_up()  # captures perception for every camera count and the solve
    first = [actions(model, "pi05", cases, k, config.action_dim) for k in range(case_count(cases))]
    again = [actions(model, "pi05", cases, k, config.action_dim) for k in range(case_count(cases))]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_captured_work_is_replayed_on_new_inputs_and_each_result_outlives_the_next_replay():
    output = np.zeros(3, np.float32)  # as on a GPU: the graph writes the same memory on every replay
    runs = []

    def work(x):
        runs.append(1)
        output[...] = x * 2
        return output

    call = Captured(HostEngine(), work, [((3,), np.float32)])
    first = call(np.array([1, 2, 3], np.float32))
    second = call(np.array([4, 5, 6], np.float32))
    assert first.tolist() == [2, 4, 6] and second.tolist() == [8, 10, 12]
    assert len(runs) == 3  # the eager run, then one per call


def test_guided_solve_equals_the_cpu_runtime_and_changes_nothing_when_the_guidance_does_not():
    config, weights, cases = record(TINY)
    reference = Pi05Model(config, weights, "numpy")
    exact = DevicePi05Model(config, weights, HostEngine(exact=True))
    noise = cases["case0_noise"]
    cpu_cache, device_cache = (PI05_RECORDS.model_prefix(m, cases, "case0") for m in (reference, exact))
    plain = exact.sample_actions(device_cache, noise)
    identity = exact.sample_actions(device_cache, noise, lambda x, v, step: v)
    assert np.abs(identity - plain).max() < EXACT
    leftover = plain[5:, : config.action_dim] + 0.3
    guidance = rtc.chunk_guidance(rtc.RtcSettings(), leftover, 2, noise.shape, config.num_inference_steps)
    guided = exact.sample_actions(device_cache, noise, guidance)
    assert np.abs(guided - plain).max() > 1e-3  # the guidance steered the solve
    assert np.abs(guided - reference.sample_actions(cpu_cache, noise, guidance)).max() < EXACT


def test_a_cache_from_another_process_arrives_as_host_arrays_and_is_used_as_the_local_one():
    config, weights, cases = record(TINY)
    model = DevicePi05Model(config, weights, HostEngine())
    cache = PI05_RECORDS.model_prefix(model, cases, "case0")
    assert cache.keys.dtype == np.uint16 and cache.num_layers == config.expert.depth
    received = model.cache_from_tensors({name: np.array(t) for name, t in cache.tensors().items()}, cache.stamp_ns)
    noise = cases["case0_noise"]
    np.testing.assert_array_equal(model.sample_actions(received, noise), model.sample_actions(cache, noise))
    assert np.isfinite(from_bf16(received.keys)).all()


class _GpuArray:
    """What the transport sees of a CuPy array: the CUDA array interface and `get()`."""

    __cuda_array_interface__ = {}

    def __init__(self, values):
        self._values = values

    def get(self):
        return self._values


def test_a_device_array_crosses_processes_as_its_host_copy():
    values = np.arange(6, dtype=np.uint16).reshape(2, 3)
    message = array_to_tensor("keys", _GpuArray(values))
    assert message.dtype == "uint16" and list(message.shape) == [2, 3]
    assert bytes(message.data) == values.tobytes()


def test_bad_inputs_are_refused_with_the_reason():
    config, weights, cases = record(TINY)
    model = DevicePi05Model(config, weights, HostEngine())
    images = cases["case0_images"] * np.float32(2) - np.float32(1)
    mask, tokens, token_mask = (cases[f"case0_{name}"] for name in ("image_masks", "tokens", "token_mask"))
    with pytest.raises(ValueError, match="compacted prefix only"):
        model.build_prefix(model.image_tokens(images, mask), mask, tokens, token_mask, compact=False)
    with pytest.raises(ValueError, match="token ids must lie in"):
        model.build_prefix(model.image_tokens(images, mask), mask, tokens + config.vocab_size, token_mask)
    with pytest.raises(ValueError, match="vision tower expects images"):
        model.image_tokens(images[:, :, :-1], mask)
    cache = model.build_prefix(model.image_tokens(images, mask), mask, tokens, token_mask)
    with pytest.raises(ValueError, match="noise must have shape"):
        model.sample_actions(cache, np.zeros((3, 3), np.float32))
    too_long = DevicePrefixCache(np.zeros((config.expert.depth, config.max_prefix_len + 1, 16), np.uint16),
                                 np.zeros((config.expert.depth, config.max_prefix_len + 1, 16), np.uint16),
                                 np.ones(config.max_prefix_len + 1, bool))
    with pytest.raises(ValueError, match="this solve was sized for"):
        model.sample_actions(too_long, cases["case0_noise"])


def test_the_cuda_backend_without_a_gpu_says_what_it_needs():
    code = ("from embodied_ros.pipeline.stages import load_runtime\n"
            "try:\n    load_runtime('bundles/pi05_tiny.gguf', 'cuda')\n"
            "except Exception as error:\n    print(type(error).__name__, error)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stdout.startswith("CudaUnavailable"), result.stdout + result.stderr
    assert "CuPy" in result.stdout and "cupy-cuda12x" in result.stdout


def test_weights_the_gpu_cannot_hold_are_refused_before_anything_is_uploaded():
    config, weights, _ = record(TINY)

    class SmallGpu(HostEngine):
        uploads = 0

        def reserve(self, nbytes, what):
            self.asked = nbytes
            raise BundleMemoryError(f"{what} need {nbytes} bytes")

        def upload(self, array, dtype=None):
            SmallGpu.uploads += 1
            return super().upload(array, dtype)

    gpu = SmallGpu()
    with pytest.raises(BundleMemoryError, match="the model's weights need"):
        DevicePi05Model(config, weights, gpu)
    assert SmallGpu.uploads == 0
    products = sum(np.prod(np.shape(w)) for name, w in weights.items()
                   if is_linear_weight(name) and name not in FLOAT32_PRODUCTS and name != "lm.token_embd")
    others = sum(np.prod(np.shape(w)) for name, w in weights.items()
                 if not (is_linear_weight(name) and name not in FLOAT32_PRODUCTS) and name != "lm.token_embd")
    assert gpu.asked == 2 * products + 4 * others

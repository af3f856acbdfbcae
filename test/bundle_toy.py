"""A small bundle with a part of every kind, and a model family "toyfamily" that converts and verifies it.

The toy model is y = linear(relu(linear(x, layers.0)), head); its reference record holds x and the
y computed from the weights as stored (quantized per the plan), so verification passes at tolerance 1e-4 unless
the record or the weights are changed.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np

from embodied_ros.bundle import BundleWriter, ReferenceRecord, RobotMetadata, quantize
from embodied_ros.kernels import KernelSet

ARCH = "toyfamily"
PLAN = "layers=q4_k,head=q8_0,extra=bf16,half=f16"
CONFIG = {"width": 512, "hidden": {"sizes": [512, 64], "eps": 1e-6, "act": "relu", "gated": False},
          "cameras": ["wrist", "top"], "empty": []}


def toy_weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "layers.0.weight": rng.standard_normal((64, 512)).astype(np.float32) * 0.05,
        "layers.0.bias": rng.standard_normal(64).astype(np.float32),
        "head.weight": rng.standard_normal((6, 64)).astype(np.float32) * 0.1,
        "extra.table": rng.standard_normal((3, 40)).astype(np.float32),
        "half.proj": rng.standard_normal((5, 24)).astype(np.float32),
        "plain.proj": rng.standard_normal((4, 7)).astype(np.float32),
    }


def forward(weights, x: np.ndarray, backend: str = "numpy") -> np.ndarray:
    ks = KernelSet(backend)
    hidden = np.maximum(ks.linear(x, weights["layers.0.weight"], weights["layers.0.bias"]), 0)
    return ks.linear(hidden, weights["head.weight"])


def write_toy_bundle(path: Path, plan: str = PLAN, reference: bool = True, expected_shift: float = 0.0,
                     architecture: str = ARCH) -> Path:
    weights = toy_weights()
    writer = BundleWriter(architecture, plan)
    writer.set_config(CONFIG)
    writer.add_weights(weights)
    writer.set_stats({"state": {"q01": np.full(3, -1.0), "q99": np.full(3, 1.0)},
                      "action": {"mean": np.zeros(6), "std": np.ones(6)}})
    writer.set_tokenizer(bytes(range(256)) * 4)
    writer.set_solver({"method": "euler", "num_inference_steps": 10})
    writer.set_robot(RobotMetadata(["j1", "j2", "j3"], [f"a{i}" for i in range(6)], 0.02))
    writer.set_source("toy weights, seed 0")
    if reference:
        x = np.random.default_rng(1).standard_normal((3, 512)).astype(np.float32)
        stored = {name: quantize(weights[name], qtype) for name, _, qtype, _ in writer.plan_report()}
        expected = forward(stored, x) + np.float32(expected_shift)
        writer.set_reference(ReferenceRecord(
            inputs={"x": x, "mask": np.array([True, False, True]), "image": np.arange(12, dtype=np.uint8).reshape(3, 4),
                    "t": np.float32(0.25)},
            noise={"case0": np.zeros((2, 3), np.float64)},
            expected={"y": expected}, tolerance=1e-4, fields={"task": "stack the cups", "empty": ""}))
    return writer.write(path)


def verify_reference(bundle, backend: str = "numba") -> tuple[float, float]:
    record = bundle.reference
    y = forward(bundle.weights(), record.inputs["x"], backend)
    return float(np.abs(y - record.expected["y"]).max()), record.tolerance


def install_family(monkeypatch) -> None:
    """Make `embodied_ros.models.toyfamily` (with its converter) importable for this test."""
    family = types.ModuleType(f"embodied_ros.models.{ARCH}")
    family.verify_reference = verify_reference
    converter = types.ModuleType(f"embodied_ros.models.{ARCH}.convert")
    converter.detect = lambda source: Path(source).suffix == ".toy"
    converter.convert = lambda source, output, quant_plan, reference, progress, overrides=None: write_toy_bundle(
        output, str(quant_plan), reference=reference is not None)
    monkeypatch.setitem(sys.modules, family.__name__, family)
    monkeypatch.setitem(sys.modules, converter.__name__, converter)

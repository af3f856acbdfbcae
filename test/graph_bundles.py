"""Real bundles for the graph's acceptance tests: the shipped pi0.5 bundle (or one converted from
the tiny checkpoint in test data), and LingBot-VA's tiny lerobot checkpoint of test data as a bundle."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_PI05 = ROOT / "bundles" / "pi05_tiny.gguf"
PI05_CHECKPOINT = ROOT / "test" / "data" / "pi05_tiny_checkpoint" / "checkpoint"
LINGBOT_VA_CHECKPOINT = ROOT / "test" / "data" / "lingbot_va_tiny" / "checkpoint"


def pi05_bundle(tmp_path_factory) -> Path:
    if SHIPPED_PI05.is_file():
        return SHIPPED_PI05
    from embodied_ros.models.pi05.convert import convert

    assert PI05_CHECKPOINT.is_dir(), f"neither {SHIPPED_PI05} nor {PI05_CHECKPOINT} exists"
    output = tmp_path_factory.mktemp("pi05") / "pi05_tiny.gguf"
    convert(PI05_CHECKPOINT, output)
    return output


def world_action_bundle(tmp_path_factory) -> Path:
    from embodied_ros.models.lingbot_va.lerobot_bundle import convert_checkpoint

    folder = tmp_path_factory.mktemp("lingbot_va")
    return convert_checkpoint(LINGBOT_VA_CHECKPOINT, folder / "lingbot_va_tiny.gguf", reference=False)

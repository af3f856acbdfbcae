"""HY-VLA (github.com/Tencent-Hunyuan/Hy-Embodied-0.5-VLA), without PyTorch: the Hy-Embodied-0.5
Mixture-of-Transformers VLM (HYViT2 vision tower, a 2x2 pooling merger, an LM with separate text and
image weights) and a flow-matching action expert that shares its attention, as pi0's does.

The family entry points of models/__init__.py; its records are model records made by HY-VLA's own code
(reference/hy_vla/gen_records.py, parity.py here)."""

from embodied_ros.models.hy_vla.parity import RECORDS
from embodied_ros.models.hy_vla.runtime import HyVLARuntime, load_runtime, spec_of

recognizes_fixture, run_fixture_parity, verify_reference, bench_cases = (
    RECORDS.recognizes_fixture, RECORDS.run_fixture_parity, RECORDS.verify_reference, RECORDS.bench_cases)

__all__ = ["HyVLARuntime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]

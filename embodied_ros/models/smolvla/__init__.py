"""SmolVLA (SmolVLM vision + truncated Llama text model + interleaved cross/self-attention action
expert, flow matching), without PyTorch.

The family entry points of models/__init__.py; its records are flow-matching records
(models/kit/records.py: FlowRecords)."""

from embodied_ros.models.kit.records import FlowRecords
from embodied_ros.models.smolvla.runtime import SmolVLARuntime, load_runtime, spec_of

RECORDS = FlowRecords("SmolVLA", __name__, ("images", "image_masks", "tokens", "token_mask", "state"))
recognizes_fixture, run_fixture_parity, verify_reference, bench_cases = (
    RECORDS.recognizes_fixture, RECORDS.run_fixture_parity, RECORDS.verify_reference, RECORDS.bench_cases)

__all__ = ["SmolVLARuntime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]

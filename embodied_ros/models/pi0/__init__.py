"""pi0 (LeRobot PI0Policy: PaliGemma prefix + a Gemma action expert reading the state as a token
and the flow time through an MLP), without PyTorch.

The family entry points of models/__init__.py; its records are flow-matching records
(models/kit/records.py: FlowRecords)."""

from embodied_ros.models.kit.records import FlowRecords
from embodied_ros.models.pi0.runtime import Pi0Runtime, load_runtime, spec_of

RECORDS = FlowRecords("pi0", __name__, ("images", "image_masks", "tokens", "token_mask", "state"))
recognizes_fixture, run_fixture_parity, verify_reference, bench_cases = (
    RECORDS.recognizes_fixture, RECORDS.run_fixture_parity, RECORDS.verify_reference, RECORDS.bench_cases)

__all__ = ["Pi0Runtime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]

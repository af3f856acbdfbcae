"""pi0.5 (PaliGemma prefix + flow-matching action expert), without PyTorch.

The family entry points of models/__init__.py; its records are flow-matching records
(models/kit/records.py: FlowRecords)."""

from embodied_ros.models.kit.records import FlowRecords
from embodied_ros.models.pi05.runtime import Pi05Runtime, load_runtime, spec_of

RECORDS = FlowRecords("pi0.5", __name__, ("images", "image_masks", "tokens", "token_mask"))
recognizes_fixture, run_fixture_parity, verify_reference, bench_cases = (
    RECORDS.recognizes_fixture, RECORDS.run_fixture_parity, RECORDS.verify_reference, RECORDS.bench_cases)

__all__ = ["Pi05Runtime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference", "bench_cases"]

"""pi0.5 (PaliGemma prefix + flow-matching action expert), without PyTorch.

Entry points used by the rest of the package:
  load_runtime(bundle, backend)        the stage-contract runtime (pipeline/stages.py)
  spec_of(bundle)                      its ModelSpec from the bundle's metadata
  RECORDS                              its recorded cases (models/kit/records.py, FlowRecords): the
                                       `parity` command's recognizes_fixture / run_fixture_parity,
                                       verify_reference(bundle, backend) for `bundle verify`
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
"""

from embodied_ros.models.kit.records import FlowRecords
from embodied_ros.models.pi05.runtime import Pi05Runtime, load_runtime, spec_of

RECORDS = FlowRecords("pi0.5", __name__, ("images", "image_masks", "tokens", "token_mask"))
recognizes_fixture, run_fixture_parity, verify_reference = (RECORDS.recognizes_fixture, RECORDS.run_fixture_parity,
                                                           RECORDS.verify_reference)

__all__ = ["Pi05Runtime", "load_runtime", "spec_of", "RECORDS", "recognizes_fixture", "run_fixture_parity",
           "verify_reference"]

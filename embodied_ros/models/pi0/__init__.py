"""pi0 (LeRobot PI0Policy: PaliGemma prefix + a Gemma action expert reading the state as a token
and the flow time through an MLP), without PyTorch.

Entry points used by the rest of the package:
  load_runtime(bundle, backend)        the stage-contract runtime (pipeline/stages.py)
  spec_of(bundle)                      its ModelSpec from the bundle's metadata
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
"""

from embodied_ros.models.pi0.parity import recognizes_fixture, run_fixture_parity, verify_reference
from embodied_ros.models.pi0.runtime import Pi0Runtime, load_runtime, spec_of

__all__ = ["Pi0Runtime", "load_runtime", "spec_of", "recognizes_fixture", "run_fixture_parity", "verify_reference"]

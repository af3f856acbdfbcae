"""pi0.5 (PaliGemma prefix + flow-matching action expert), without PyTorch.

Entry points used by the rest of the package:
  load_runtime(bundle, backend)        the stage-contract runtime (pipeline/stages.py)
  model_spec(bundle)                   its ModelSpec, from the bundle's metadata alone
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
"""

from embodied_ros.models.pi05.parity import recognizes_fixture, run_fixture_parity, verify_reference
from embodied_ros.models.pi05.runtime import Pi05Runtime, load_runtime, model_spec

__all__ = ["Pi05Runtime", "load_runtime", "model_spec", "recognizes_fixture", "run_fixture_parity", "verify_reference"]

"""SmolVLA (SmolVLM vision + truncated Llama text model + interleaved cross/self-attention action
expert, flow matching), without PyTorch.

Entry points used by the rest of the package:
  load_runtime(bundle, backend)        the stage-contract runtime (pipeline/stages.py)
  spec_of(bundle)                      its ModelSpec from the bundle's metadata
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
"""

from embodied_ros.models.smolvla.parity import recognizes_fixture, run_fixture_parity, verify_reference
from embodied_ros.models.smolvla.runtime import SmolVLARuntime, load_runtime, spec_of

__all__ = ["SmolVLARuntime", "load_runtime", "spec_of", "recognizes_fixture", "run_fixture_parity", "verify_reference"]

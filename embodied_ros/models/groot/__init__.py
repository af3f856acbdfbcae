"""GR00T N1.7 (LeRobot GrootPolicy): a Qwen3-VL backbone (backbone/qwen3_vl.py) and a flow-matching
DiT action head (heads/groot_dit.py), without PyTorch.

Entry points used by the rest of the package:
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
  runtime.load_model(bundle, backend)  the model-space model
"""

from embodied_ros.models.groot.parity import recognizes_fixture, run_fixture_parity, verify_reference

__all__ = ["recognizes_fixture", "run_fixture_parity", "verify_reference"]

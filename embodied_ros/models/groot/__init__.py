"""GR00T N1.7 (LeRobot GrootPolicy): a Qwen3-VL backbone (backbone/qwen3_vl.py) and a flow-matching
DiT action head (heads/groot_dit.py), with LeRobot's processor side (processor.py), without PyTorch.

Entry points used by the rest of the package:
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  bench_cases(bundle, record, backend)   the `bench` command's hook (models/kit/bench.py)
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress, overrides)
  load_runtime(bundle, backend), spec_of(bundle)   the graph's stage runtime (runtime.py); a bundle
                                       without a tokenizer and statistics runs in model space only
                                       (runtime.load_model)
"""

from embodied_ros.models.groot.parity import bench_cases, recognizes_fixture, run_fixture_parity, verify_reference
from embodied_ros.models.groot.runtime import load_runtime, spec_of

__all__ = ["load_runtime", "spec_of", "recognizes_fixture", "run_fixture_parity", "verify_reference", "bench_cases"]

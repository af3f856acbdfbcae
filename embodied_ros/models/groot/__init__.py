"""GR00T N1.7 (LeRobot GrootPolicy): a Qwen3-VL backbone (backbone/qwen3_vl.py) and a flow-matching
DiT action head (heads/groot_dit.py), without PyTorch.

Entry points used by the rest of the package:
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
  runtime.load_model(bundle, backend)  the model-space model
  load_runtime(bundle, backend)        refuses: the graph's stage runtime needs the processor side
                                       (view resizing, Qwen's tokenizer, state/action normalization)
"""

from embodied_ros.models.groot.parity import recognizes_fixture, run_fixture_parity, verify_reference



def load_runtime(bundle, backend: str = "numba"):
    raise ValueError(f"{bundle.path}: GR00T N1.7 bundles run in model space only (`embodied-ros parity`, "
                     "`bundle verify`); the graph needs its processor side (view resizing, Qwen tokenizer, "
                     "state and action normalization), which this runtime does not have yet")


__all__ = ["load_runtime", "recognizes_fixture", "run_fixture_parity", "verify_reference"]

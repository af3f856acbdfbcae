"""GR00T N1.7 (LeRobot GrootPolicy): a Qwen3-VL backbone (backbone/qwen3_vl.py) and a flow-matching
DiT action head (heads/groot_dit.py), without PyTorch.

Entry points used by the rest of the package:
  verify_reference(bundle, backend)    re-run a bundle's reference record: (max error, tolerance)
  recognizes_fixture(path), run_fixture_parity(path, quant)   the `parity` command's hook
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)
  runtime.load_model(bundle, backend)  the model-space model
  load_runtime(bundle, backend), spec_of(bundle)   refuse: the graph's stage runtime needs the processor side
                                       (view resizing, Qwen's tokenizer, state/action normalization)
"""

from embodied_ros.models.groot.parity import recognizes_fixture, run_fixture_parity, verify_reference


def _model_space_only(bundle) -> ValueError:
    return ValueError(f"{bundle.path}: GR00T N1.7 bundles run in model space only (`embodied-ros parity`, "
                      "`bundle verify`); the graph needs its processor side (view resizing, Qwen tokenizer, "
                      "state and action normalization), which this runtime does not have yet")


def load_runtime(bundle, backend: str = "numba"):
    raise _model_space_only(bundle)


def spec_of(bundle):
    raise _model_space_only(bundle)


__all__ = ["load_runtime", "spec_of", "recognizes_fixture", "run_fixture_parity", "verify_reference"]

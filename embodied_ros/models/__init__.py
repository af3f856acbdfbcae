"""Model families: one subpackage per bundle architecture (`general.architecture`), found by name
(bundle/families.py). A family package exposes

  load_runtime(bundle, backend)   its stage-contract runtime (pipeline/stages.py)
  spec_of(bundle)                 its ModelSpec, from the bundle's metadata alone
  recognizes_fixture(folder), run_fixture_parity(folder, quant, backend)
                                  the `parity` command's hooks over its reference records
  verify_reference(bundle, backend)   `bundle verify`: (max abs error, tolerance) of the bundle's record
  convert.detect(source), convert.convert(source, output, quant_plan, reference, progress)

and test/test_families.py holds every family found here to it. `kit/` is what families share."""

"""Model families: one subpackage per bundle architecture (`general.architecture`), found by name."""

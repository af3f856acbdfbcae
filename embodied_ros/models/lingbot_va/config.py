"""The family's bundle architecture name (`general.architecture` of its bundles)."""

ARCHITECTURE = "lingbot_va"

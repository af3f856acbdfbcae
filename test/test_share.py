"""Data files resolve in the source checkout (the install space is checked by test_colcon_build)."""

import pytest

from embodied_ros.node_infra.paths import default_config, fastdds_profile
from embodied_ros.share import SOURCE_ROOT, is_source_checkout, package_root, share_path


def test_source_checkout_files_resolve_to_the_checkout():
    assert is_source_checkout() and package_root() == SOURCE_ROOT
    assert default_config() == SOURCE_ROOT / "config" / "pi05.yaml" and default_config().is_file()
    assert fastdds_profile().is_file()
    assert share_path("kernels", "gemm.cu").is_file() and share_path("msg").is_dir()


def test_a_missing_data_file_is_named():
    with pytest.raises(FileNotFoundError, match="config/no_such.yaml is missing"):
        share_path("config", "no_such.yaml")

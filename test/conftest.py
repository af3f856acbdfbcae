"""Shared test fixtures."""

import pytest

from domains import next_domain


@pytest.fixture
def ros_domain_id(monkeypatch) -> int:
    """A DDS domain of this test's own, discovery limited to this machine.

    Tests of several processes run side by side; separate domains keep their topics apart.
    """
    domain_id = next_domain()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain_id

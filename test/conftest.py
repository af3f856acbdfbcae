"""Shared test fixtures."""

import itertools
import os

import pytest

_domain_ids = itertools.count()


@pytest.fixture
def ros_domain_id(monkeypatch) -> int:
    """A DDS domain of this test's own, discovery limited to this machine.

    Tests of several processes run side by side; separate domains keep their topics apart.
    """
    domain_id = 1 + (os.getpid() * 7 + next(_domain_ids)) % 100
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id))
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return domain_id

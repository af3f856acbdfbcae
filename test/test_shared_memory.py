"""Shared-memory segments of Fast DDS participants whose process is gone are removed when a graph process
starts; a live participant's are not, nor a young one's."""

import fcntl
import os
import signal
import subprocess
import sys
import time

from embodied_ros.node_infra.shared_memory import SHM_FOLDER, remove_dead_segments
from embodied_ros.share import child_environment

def _segment(folder, name, size=4096, age_s=3600.0):
    (folder / name).write_bytes(b"\0" * size)
    (folder / f"{name}_el").touch()
    os.utime(folder / f"{name}_el", (time.time() - age_s, time.time() - age_s))


def test_only_old_unlocked_segments_go(tmp_path):
    _segment(tmp_path, "fastdds_0123456789abcdef", size=5000)  # dead
    _segment(tmp_path, "fastrtps_fedcba9876543210", size=300)  # dead, Fast DDS 2's name
    _segment(tmp_path, "fastdds_1111111111111111")  # alive: its lock is held
    _segment(tmp_path, "fastdds_2222222222222222", age_s=5)  # dead, but maybe still being made
    (tmp_path / "fastdds_port7411").write_bytes(b"\0" * 10)  # a port: Fast DDS reuses those itself
    (tmp_path / "fastdds_port7411_el").touch()
    os.utime(tmp_path / "fastdds_port7411_el", (time.time() - 3600, time.time() - 3600))
    with open(tmp_path / "fastdds_1111111111111111_el", "ab") as owner:
        fcntl.flock(owner, fcntl.LOCK_EX)
        assert remove_dead_segments(tmp_path) == (2, 5300)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fastdds_1111111111111111", "fastdds_1111111111111111_el", "fastdds_2222222222222222",
        "fastdds_2222222222222222_el", "fastdds_port7411", "fastdds_port7411_el"]
    assert remove_dead_segments(tmp_path / "missing") == (0, 0)


_PARTICIPANT = """
import os, sys, time, rclpy
from rclpy.context import Context
from embodied_ros.node_infra.paths import using_dds_environment
before = set(os.listdir(sys.argv[1]))
with using_dds_environment():
    context = Context()
    rclpy.init(context=context, domain_id=int(sys.argv[2]))
    node = rclpy.create_node("segment_owner", context=context)
print(" ".join(sorted(set(os.listdir(sys.argv[1])) - before)), flush=True)
sys.stdin.read()  # until the test closes it
node.destroy_node()
rclpy.shutdown(context=context)
"""


def test_a_killed_participants_segment_goes_and_a_live_ones_stays(ros_domain_id):
    """Fast DDS's real segments: two participants in child processes, one killed (its segment stays
    behind, as after a crash), one alive."""
    children, segments = [], []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", _PARTICIPANT, str(SHM_FOLDER), str(ros_domain_id)],
                                 env=child_environment(os.environ), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
        children.append(child)
        [segment] = [name for name in child.stdout.readline().split() if name.endswith("_el") and "port" not in name]
        segments.append(segment[:-len("_el")])
    try:
        children[0].send_signal(signal.SIGKILL)
        children[0].wait(timeout=10)
        assert (SHM_FOLDER / segments[0]).exists()
        removed, freed = remove_dead_segments(min_age_s=0)
        assert removed >= 1 and freed >= 1 << 20
        assert not (SHM_FOLDER / segments[0]).exists() and not (SHM_FOLDER / f"{segments[0]}_el").exists()
        assert (SHM_FOLDER / segments[1]).exists() and children[1].poll() is None
    finally:
        for child in children:
            child.stdin.close()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    assert children[1].returncode == 0 and not (SHM_FOLDER / segments[1]).exists()  # closed by its owner


def test_a_graph_process_removes_them_when_it_starts_and_says_so():
    name = "fastdds_" + os.urandom(8).hex()
    _segment(SHM_FOLDER, name, size=3 << 20)
    code = ("import sys\nfrom embodied_ros.nodes.run import stopped_by_signals\n"
            "with stopped_by_signals(sys.argv):\n    pass\n")
    done = subprocess.run([sys.executable, "-c", code], env=child_environment(os.environ), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (SHM_FOLDER / name).exists()
    assert "removed " in done.stderr and "shared-memory segments of ended processes" in done.stderr, done.stderr

"""A separate graph's own log folder goes with a clean stop and stays when a node failed or the
caller named the folder (the logs a failure needs are kept)."""

import shutil

from embodied_ros.graph.processes import SeparateGraph
from embodied_ros.node_infra.config import load_config
from domains import next_domain
from graph_bundles import pi05_bundle
from graph_harness import wait_for


def _controller_alone(tmp_path_factory, log_dir=None) -> SeparateGraph:
    config = load_config(None, {"bundle": str(pi05_bundle(tmp_path_factory)), "layout": "separate"})
    graph = SeparateGraph(config, ("controller",), domain_id=next_domain(), log_dir=log_dir)
    graph.start()
    wait_for(lambda: "waiting for the first action chunk" in graph.log("controller"), 60, "the controller to start")
    return graph


def test_a_clean_stop_removes_the_graphs_own_logs(tmp_path_factory):
    graph = _controller_alone(tmp_path_factory)
    assert graph.stop() == {"controller": 0}
    assert not graph.log_dir.exists()


def test_a_failed_node_or_a_named_folder_keeps_the_logs(tmp_path_factory, tmp_path):
    graph = _controller_alone(tmp_path_factory)
    graph.kill("controller")
    assert graph.stop()["controller"] != 0
    assert (graph.log_dir / "controller.log").is_file()
    shutil.rmtree(graph.log_dir)
    named = _controller_alone(tmp_path_factory, log_dir=tmp_path)
    assert named.stop() == {"controller": 0}
    assert (tmp_path / "controller.log").is_file()

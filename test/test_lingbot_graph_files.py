"""config/lingbot_va.yaml: the world predictor samples every third step, the other stages run every step."""

from embodied_ros.node_infra.config import load_config
from graph_bundles import ROOT


def test_config_predicts_every_third_step_and_perceives_every_step():
    config = load_config(ROOT / "config" / "lingbot_va.yaml")
    assert (config.schedule.world, config.schedule.action, config.schedule.prefix, config.schedule.perception) == (3, 1, 1, 1)

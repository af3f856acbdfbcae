"""What a first try of `up` and `replay` gets wrong, answered in one line: a bundle given where the config
goes runs on its family's config (or is explained), a file that is no YAML config says so, and a bundle
converted without a tokenizer is flagged at conversion and refused by `up` before anything loads."""

from pathlib import Path

import pytest
from bundle_toy import ARCH, write_toy_bundle

from embodied_ros.bundle.families import known_families
from embodied_ros.cli.graph_config import load_graph_config
from embodied_ros.cli.main import main
from embodied_ros.node_infra.config import load_config
from embodied_ros.graph.up import UpReport
from graph_bundles import ROOT

PI05 = ROOT / "bundles" / "pi05_tiny.gguf"
LINGBOT = ROOT / "bundles" / "lingbot_va_small.gguf"


def _one_line_exit(argv) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    message = str(exited.value.code)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("family", known_families())
def test_up_given_a_bundle_for_its_config_runs_it_on_its_familys_config(monkeypatch, capsys, family):
    config = f"{family}.yaml"
    bundle = Path(load_config(family).bundle)
    ran = {}

    def run_up(graph_config, **options):
        ran["config"] = graph_config
        return UpReport("composed", graph_config.bundle, 1.0, 0.5, {"action": {}}, {}, {})

    monkeypatch.setattr("embodied_ros.graph.up.run_up", run_up)
    monkeypatch.setattr("embodied_ros.graph.up.format_report", lambda report: "report")
    assert main(["up", str(bundle), "--set", "schedule.action=2"]) == 0
    told = capsys.readouterr().out.splitlines()[0]
    assert told == (f"{bundle} is a model bundle: running it on {ROOT / 'config' / config} (its family's config; "
                    f"to choose another: CONFIG --bundle {bundle})")
    shipped = load_config(ROOT / "config" / config)
    assert ran["config"].bundle == str(bundle) and ran["config"].schedule.world == shipped.schedule.world
    assert ran["config"].schedule.perception == shipped.schedule.perception and ran["config"].schedule.action == 2


def test_a_bundle_for_the_config_and_another_bundle_is_one_line():
    message = _one_line_exit(["up", str(PI05), "--bundle", str(LINGBOT)])
    assert message == (f"embodied-ros up: {PI05} is a model bundle, not a graph config: give a config YAML (or none) "
                       f"with --bundle {LINGBOT}")


def test_a_bundle_of_a_family_without_a_shipped_config_says_to_use_bundle(tmp_path):
    toy = write_toy_bundle(tmp_path / "toy.gguf")
    with pytest.raises(ValueError, match=rf"no config ships for its family '{ARCH}': give a config YAML with "
                                         rf"--bundle "):
        load_graph_config(str(toy), None, [])


def test_replay_takes_a_bundle_for_its_config_and_refuses_one_for_its_bag(capsys):
    said = []
    config = load_graph_config(str(LINGBOT), None, ["schedule.mode=lockstep"], say=said.append)
    assert config.bundle == str(LINGBOT) and config.schedule.world == 3 and config.schedule.mode == "lockstep"
    assert len(said) == 1 and "lingbot_va.yaml" in said[0]
    assert main(["replay", str(PI05), "--no-progress"]) == 2
    assert capsys.readouterr().err == (f"replay: error: {PI05} is a model bundle, not a bag: "
                                       f"replay BAG --bundle {PI05}\n")


def test_a_file_that_is_no_yaml_config_is_one_line(tmp_path):
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)))
    assert _one_line_exit(["up", str(binary)]).startswith(f"embodied-ros up: {binary}: not a YAML config: 'utf-8'")
    broken = tmp_path / "broken.yaml"
    broken.write_text("schedule: [1, 2\n")
    assert _one_line_exit(["up", str(broken)]).startswith(f"embodied-ros up: {broken}: not a YAML config: ")
    assert _one_line_exit(["up", "--set", "schedule.action=[1"]).startswith("embodied-ros up: --set schedule.action: ")


def test_a_bundle_without_a_tokenizer_is_flagged_at_conversion_and_refused_by_up(tmp_path, capsys):
    out = tmp_path / "no_tokenizer.gguf"
    assert main(["bundle", "convert", str(ROOT / "test" / "data" / "pi05_tiny"), str(out), "--no-progress"]) == 0
    warning = capsys.readouterr().err.strip()
    assert warning == (f"bundle convert: warning: {out}: the bundle has no tokenizer, so the graph cannot turn an "
                       "instruction into tokens; convert the checkpoint again with its SentencePiece tokenizer.model "
                       "beside the weights or given as --tokenizer FILE")
    refused = _one_line_exit(["up", "--bundle", str(out), "--duration", "1"])
    assert refused == f"embodied-ros up: {out}: " + warning.split(f"{out}: ", 1)[1]
    assert _one_line_exit(["up", str(out)]) == refused  # the same, given where the config goes
    assert capsys.readouterr().out.startswith(f"{out} is a model bundle: running it on ")  # nothing loaded after


def test_conversion_with_a_tokenizer_gives_no_warning(tmp_path, capsys):
    checkpoint = ROOT / "test" / "data" / "pi05_tiny"
    tokenizer = ROOT / "test" / "data" / "pi05_tiny_checkpoint" / "checkpoint" / "tokenizer.model"
    assert main(["bundle", "convert", str(checkpoint), str(tmp_path / "b.gguf"), "--tokenizer", str(tokenizer),
                 "--no-progress"]) == 0
    assert "warning" not in capsys.readouterr().err

"""The graph split over two hosts (two network namespaces on a veth pair, embodied_ros/testbed/):
what crosses the link at each cut, the wire precision's action error, the stream on shaped links
next to the same graph on one host, and the faults (link cuts, the inference host killed, loss bursts).

    sudo python benchmarks/bench_two_hosts.py [--parts cuts,precision,links,faults] [--configs pi05_small,pi05_small_jpeg,smolvla_small,smolvla_small_jpeg,smolvla_tiny]
        [--duration 15] [--repeats 10] [--workdir DIR] [--no-write]

Parts:
  cuts       bytes per observation crossing the link when the split is after the observation node
             (observations and chunks cross), after perception (image tokens) or after the prefix
             (the prefix K/V), at each wire precision, and the Mbit/s at the graph's step rate
  precision  the action error each wire precision costs: perception and prefix outputs narrowed and
             widened as the wire does, and the observation's images through each image codec, the
             same noise, against float32 and raw images (max |difference|)
  links      the default split (observation node and controller on the robot's side) on shaped
             links (unshaped, 1 Gbit/s, 100 and 20 Mbit/s, 100 Mbit/s with 1% and 5% random loss)
             and the same graph in one namespace: chunk rate, the age of the observation behind each
             chunk at the robot's side (p50/p99), command period error p99, bytes per second on the link
  faults     `--repeats` times each on the first config: the link cut for 2 s and for 30 s, kill -9 of
             every inference process and their restart, 2 s of 50% loss: the hold after the last
             chunk's end, the resume after the heal, commands from chunks made before the fault
  decode     640x480 JPEG (quality 90) and PNG decode time (Pillow)
smolvla_small is benchmarks/specs/smolvla_small.json's reference record (made in --workdir by the PyTorch
reference generator, $EMBODIED_ROS_REF_PYTHON, when absent) converted with the tiny SmolVLA checkpoint's
tokenizer. Needs root (network namespaces). Writes BENCHMARKS.md sections two_hosts_<part> unless --no-write.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from bench_command_timing import small_bundle  # noqa: E402

from embodied_ros.inputs.compressed import compressed_to_rgb8, rgb8_to_compressed  # noqa: E402
from embodied_ros.node_infra.config import IMAGE_CODECS, WIRE_DTYPES, TransportConfig, load_config  # noqa: E402
from embodied_ros.node_infra.transport import ResultStore, decode_output, encode_output  # noqa: E402
from embodied_ros.pipeline.noise import stage_noise  # noqa: E402
from embodied_ros.pipeline.stages import load_runtime, read_spec  # noqa: E402
from embodied_ros.pipeline.types import Observation  # noqa: E402
from embodied_ros.sim import robot  # noqa: E402
from embodied_ros.testbed.network import LinkShape, TwoHosts  # noqa: E402
from embodied_ros.testbed.split_graph import SplitGraph  # noqa: E402
from rclpy.serialization import serialize_message  # noqa: E402

CONFIGS = {"pi05_small": ("pi05", {}), "pi05_small_jpeg": ("pi05", {"transport.image_codec": "jpeg"}),
           "smolvla_small": ("smolvla", {}), "smolvla_small_jpeg": ("smolvla", {"transport.image_codec": "jpeg"}),
           "smolvla_tiny": ("smolvla", {}),
           "pi05_tiny": ("pi05", {})}  # name -> (config, settings)
SMOLVLA_SMALL_SPEC = common.REPO_ROOT / "benchmarks" / "specs" / "smolvla_small.json"
SMOLVLA_TOKENIZER = common.REPO_ROOT / "test" / "data" / "smolvla_tiny_checkpoint" / "checkpoint" / "tokenizer.json"
SHAPES = {"one host": None, "unshaped pair": LinkShape(), "1 Gbit/s": LinkShape(1000), "100 Mbit/s": LinkShape(100),
          "20 Mbit/s": LinkShape(20), "100 Mbit/s, 1% loss": LinkShape(100, 1),
          "100 Mbit/s, 5% loss": LinkShape(100, 5)}
PARTS = ("cuts", "precision", "links", "faults", "decode")
INTRO = """The graph split over two network namespaces of one machine joined by a veth pair (embodied_ros/testbed/,
docs/graph.md "Two hosts"): the observation node, the controller and the synthetic robot on the robot's
side, the model's nodes on the inference side, DDS over UDP only (config/fastdds_two_hosts.xml). Both
sides share the same 2 cores: compute is this machine's, not a GPU box's. Chunk age: the age of the
observation behind each chunk when the chunk reaches the robot's side. Mbit/s: each interface's transmit
counter over the measured seconds (discovery and resends included). "one host": every node in one
namespace, same profile. pi05_small: test/data/pi05_small converted (3 cameras, 224x224, images sent at
that size); smolvla_small: benchmarks/specs/smolvla_small.json (3 cameras, 128x128, SigLIP 192x4, 8 LM
layers 384 wide, 25 M parameters) recorded by LeRobot's code and converted; smolvla_tiny: the shipped
bundle (2 cameras, 64x64). Faults: the hold is measured from the end of the last chunk
the robot's side had; a trajectory point is meant one period ahead, so the controller holds up to one
period before that end. Stale commands: commands that moved the arm after the hold and before the first
chunk made from an observation taken after the fault began."""
WARM_UP_S = 3.0
RESUME_WAIT_S = 60.0  # a fault the graph has not resumed from within this counts as not resumed
STREAM_WAIT_S = 90.0  # start-up (loading, discovery) takes 5-15 s; a graph that needs longer never will


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--configs", default="pi05_small,smolvla_small")
    parser.add_argument("--duration", type=float, default=15.0, help="seconds measured per link")
    parser.add_argument("--repeats", type=int, default=10, help="repeats of each fault")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "bench_two_hosts")
    parser.add_argument("--no-write", action="store_true")
    return parser.parse_args(argv)


def graph_config(name: str, workdir: Path, overrides: dict | None = None):
    config, settings = CONFIGS[name]
    values = {"diagnostics.period_s": 0.5, **settings, **(overrides or {})}
    if name.startswith("pi05_small"):
        values["bundle"] = str(small_bundle(workdir))
    elif name.startswith("smolvla_small"):
        values["bundle"] = str(smolvla_small_bundle(workdir))
    return load_config(config, values)


def smolvla_small_bundle(workdir: Path) -> Path:
    """The smolvla_small reference record (made by the reference generator when absent) as a bundle."""
    record, path = workdir / "smolvla_small", workdir / "smolvla_small.gguf"
    if not path.is_file():
        if not (record / "cases.npz").is_file():
            python = common.reference_python()
            if not Path(python).exists():
                raise SystemExit(f"smolvla_small needs its reference record: set {common.REFERENCE_PYTHON_ENV} "
                                 f"(reference/install.sh) or put the record at {record}")
            subprocess.run([python, str(common.REPO_ROOT / "reference" / "gen_smolvla.py"), str(SMOLVLA_SMALL_SPEC),
                            str(record)], check=True, env=common.reference_environment(), capture_output=True,
                           cwd=common.REPO_ROOT / "reference")
        subprocess.run([sys.executable, "-m", "embodied_ros.cli.main", "bundle", "convert", str(record), str(path),
                        "--tokenizer", str(SMOLVLA_TOKENIZER), "--no-progress"], check=True)
    return path


def scene_observation(spec, stamp_ns: int = 1) -> Observation:
    images = {camera: robot.render_view(view, robot.rest_positions(spec.state_names), spec.image_size)
              for view, camera in enumerate(spec.camera_names)}
    return Observation(stamp_ns, images, np.linspace(-0.5, 0.5, len(spec.state_names), dtype=np.float32),
                       "pick up the red cube")


def wire_bytes(stage: str, payload, wire_dtype: str, image_codec: str = "raw") -> int:
    wire = TransportConfig(wire_dtype=wire_dtype, image_codec=image_codec)
    return len(serialize_message(encode_output(stage, 1, 0, payload, 0, None, wire)))


def part_cuts(name: str, workdir: Path) -> str:
    config = graph_config(name, workdir)
    runtime = load_runtime(config.bundle)
    observation = scene_observation(runtime.spec)
    embeddings = runtime.encode(observation)
    prefix = runtime.build_prefix(embeddings, observation)
    chunk = runtime.act(prefix, runtime.predict_world(prefix, None, None), None)
    chunk_bytes = chunk.actions.size * 4 + 200
    steps_per_s = 1.0 / config.schedule.step_period_s
    rows = []
    for dtype in WIRE_DTYPES:
        cuts = {"observation (default)": wire_bytes("observation", observation, dtype),
                "image tokens (after perception)": wire_bytes("perception", embeddings, dtype)
                + wire_bytes("observation", observation, dtype),
                "prefix K/V (after the prefix)": wire_bytes("prefix", prefix, dtype)}
        for cut, size in cuts.items():
            if dtype != "float32" and cut.startswith("observation"):
                continue  # observations travel exact whatever the wire precision
            rows.append({"config": name, "cut": cut, "wire": dtype, "KB per step": f"{size / 1e3:.1f}",
                         "Mbit/s at the step rate": f"{(size + chunk_bytes) * 8 * steps_per_s / 1e6:.2f}"})
    for codec in IMAGE_CODECS[1:]:
        size = wire_bytes("observation", observation, "float32", codec)
        rows.append({"config": name, "cut": "observation (default)", "wire": f"{codec} images",
                     "KB per step": f"{size / 1e3:.1f}",
                     "Mbit/s at the step rate": f"{(size + chunk_bytes) * 8 * steps_per_s / 1e6:.2f}"})
    return common.markdown_table(rows)


def part_precision(name: str, workdir: Path) -> str:
    config = graph_config(name, workdir)
    runtime = load_runtime(config.bundle)
    spec, store = runtime.spec, ResultStore()
    rows = []
    errors = {wire: [] for wire in [*WIRE_DTYPES[1:], *(f"{codec} images" for codec in IMAGE_CODECS[1:])]}
    scale = []
    for case in range(5):
        observation = scene_observation(spec, stamp_ns=case + 1)
        noise = stage_noise(7, "action", case, spec.noise_shape)
        embeddings = runtime.encode(observation)
        exact = runtime.act(runtime.build_prefix(embeddings, observation), None, noise).actions
        scale.append(np.abs(exact).max())
        for wire in errors:
            if wire.endswith(" images"):  # the observation's images through the codec, the rest exact
                sent = TransportConfig(image_codec=wire.split()[0])
                received = decode_output(encode_output("observation", 1, 0, observation, 0, None, sent), store)
                prefix = runtime.build_prefix(runtime.encode(received), received)
            else:
                sent = TransportConfig(wire_dtype=wire)
                wired = decode_output(encode_output("perception", 1, 0, embeddings, 0, None, sent), store)
                prefix = decode_output(encode_output("prefix", 1, 0, runtime.build_prefix(wired, observation), 0,
                                                     None, sent), store)
            errors[wire].append(float(np.abs(runtime.act(prefix, None, noise).actions - exact).max()))
    for dtype, values in errors.items():
        rows.append({"config": name, "wire": dtype, "action error max": f"{max(values):.2e}",
                     "median": f"{np.median(values):.2e}", "largest |action|": f"{max(scale):.2f}"})
    return common.markdown_table(rows)


def run_split(name: str, workdir: Path, shape: LinkShape | None, duration_s: float, domain: int) -> dict:
    config = graph_config(name, workdir)
    if shape is None:  # the same graph on one host: every node in the robot's namespace
        config = load_config(None, {**_flat(config), "split.robot_nodes": list(config.split.nodes_of("all"))})
    spec = read_spec(config.bundle)
    with TwoHosts() as net:
        net.set_shape(shape or LinkShape())
        graph = SplitGraph(net, config, spec, domain, Path(tempfile.mkdtemp(dir=workdir)))
        graph.start()
        try:
            if not graph.wait_streaming(0, STREAM_WAIT_S):
                return {"never_streamed": True}  # a link too slow for the observations
            time.sleep(WARM_UP_S)
            start_ns, start_bytes = time.time_ns(), net.link_bytes()
            time.sleep(duration_s)
            end_ns, end_bytes = time.time_ns(), net.link_bytes()
            figures = graph.recording.stream_figures(start_ns, end_ns, 1.0 / config.controller.rate_hz)
            seconds = (end_ns - start_ns) / 1e9
            figures["robot_to_inference_mbit_s"] = (end_bytes["robot"] - start_bytes["robot"]) * 8 / seconds / 1e6
            figures["inference_to_robot_mbit_s"] = (end_bytes["inference"] - start_bytes["inference"]) * 8 / seconds / 1e6
            figures["holds"] = sum(1 for t, m in graph.recording.states if start_ns <= t < end_ns
                                   and m.startswith("holding"))
            return figures
        finally:
            graph.stop()


def _flat(config) -> dict:
    from embodied_ros.node_infra.config import to_parameters

    return {key: value for key, value in to_parameters(config).items() if value != []}


def part_links(name: str, workdir: Path, duration_s: float, domain: int) -> str:
    rows = []
    for label, shape in SHAPES.items():
        figures = run_split(name, workdir, shape, duration_s, domain)
        if figures.get("never_streamed"):
            rows.append({"config": name, "link": label, "chunks Hz": f"never streamed in {STREAM_WAIT_S:.0f} s"})
            print(rows[-1], flush=True)
            continue
        rows.append({"config": name, "link": label, "chunks Hz": f"{figures['chunk_rate_hz']:.2f}",
                     "chunk age p50/p99 ms": f"{figures['chunk_age_p50_ms']:.1f} / {figures['chunk_age_p99_ms']:.1f}",
                     "period error p99 ms": f"{figures['period_error_p99_ms']:.2f}",
                     "holds": figures["holds"],
                     "to inference / to robot Mbit/s": f"{figures['robot_to_inference_mbit_s']:.2f} / "
                                                       f"{figures['inference_to_robot_mbit_s']:.2f}"})
        print(rows[-1], flush=True)
    return common.markdown_table(rows)


def part_faults(name: str, workdir: Path, repeats: int, domain: int) -> str:
    config = graph_config(name, workdir)
    spec = read_spec(config.bundle)
    period_ms = 1e3 / config.controller.rate_hz
    outcomes: dict[str, list] = {"link cut 2 s": [], "link cut 30 s": [], "kill -9 of the inference host": [],
                                 "2 s of 50% loss": []}
    failures: dict[str, int] = {kind: 0 for kind in outcomes}
    with TwoHosts() as net:
        graph = SplitGraph(net, config, spec, domain, Path(tempfile.mkdtemp(dir=workdir)), respawn=True)
        graph.start()
        try:
            if not graph.wait_streaming(0, 180):
                raise RuntimeError(f"never streamed\n{graph.logs()}")
            for _ in range(repeats):
                for kind in outcomes:
                    time.sleep(2.0)
                    fault_ns = time.time_ns()
                    healed_ns = inject(kind, net, graph)
                    if not graph.wait_streaming(healed_ns, RESUME_WAIT_S):
                        failures[kind] += 1
                        print(f"{kind}: no resume within {RESUME_WAIT_S:.0f} s", flush=True)
                        recover(graph)
                        continue
                    time.sleep(1.0)
                    try:
                        outcomes[kind].append(graph.recording.fault_outcome(fault_ns, healed_ns,
                                                                            round(period_ms * 1e6)))
                    except ValueError as error:  # a loss burst that never emptied the chunk: no hold
                        outcomes[kind].append(None)
                        print(f"{kind}: {error}", flush=True)
                    print(kind, outcomes[kind][-1], flush=True)
        finally:
            graph.stop()
    rows = []
    for kind, results in outcomes.items():
        held = [r for r in results if r is not None]
        delays = [r.hold_delay_ms for r in held]
        resumes = [r.resume_ms for r in held]
        rows.append({"fault": kind, "runs": len(results) + failures[kind], "resumed by itself": len(results),
                     "held": len(held), "held within one period": sum(d <= period_ms for d in delays),
                     "hold - chunk end ms (max)": f"{max(delays):+.1f}" if delays else "-",
                     "resume ms p50 / max": f"{np.median(resumes):.0f} / {max(resumes):.0f}" if resumes else "-",
                     "stale commands": sum(r.stale_commands for r in held)})
    restarts = ", ".join(f"{name} (exit {code})" for name, code in graph.respawned) or "none"
    return (common.markdown_table(rows) + "\n\nInference processes that ended on their own and were restarted, as "
            f"launch's respawn:=true does (a stalled process exits after compute.stall_exit_s): {restarts}.")


def recover(graph: SplitGraph) -> None:
    """After a fault the graph did not resume from: the inference processes restarted, so the next
    faults start from a streaming graph (RuntimeError when even that does not bring it back)."""
    graph.kill_inference()
    restarted_ns = time.time_ns()
    graph.restart_inference()
    if not graph.wait_streaming(restarted_ns, RESUME_WAIT_S):
        raise RuntimeError(f"the graph did not stream again after a restart of its inference processes\n"
                           f"{graph.logs()}")


def inject(kind: str, net: TwoHosts, graph: SplitGraph) -> int:
    """Make the fault, end it; the instant it ended (ns)."""
    if kind.startswith("link cut"):
        net.cut()
        time.sleep(float(kind.split()[2]))
        healed_ns = time.time_ns()
        net.heal()
        return healed_ns
    if kind.startswith("kill"):
        graph.kill_inference()
        time.sleep(0.5)
        healed_ns = time.time_ns()
        graph.restart_inference()
        return healed_ns
    shape = net.shape
    net.set_shape(LinkShape(shape.rate_mbit, 50))
    time.sleep(2.0)
    healed_ns = time.time_ns()
    net.set_shape(shape)
    return healed_ns


def part_decode() -> str:
    frame = robot.render_view(0, robot.rest_positions(("a", "b", "c")), (480, 640))
    rows = []
    for codec in ("jpeg", "png"):
        msg = rgb8_to_compressed(frame, codec, quality=90)
        timing = common.time_repeats(lambda: compressed_to_rgb8(msg), repeats=50, warmup=3)
        error = np.abs(compressed_to_rgb8(msg).astype(int) - frame.astype(int))
        rows.append({"640x480": codec, "bytes": len(msg.data), "decode ms (median)": f"{timing.median_ms:.2f}",
                     "pixel error mean / max": f"{error.mean():.2f} / {error.max()}"})
    return common.markdown_table(rows)


def main(argv=None) -> None:
    args = parse_args(argv)
    parts = args.parts.split(",")
    configs = args.configs.split(",")
    args.workdir.mkdir(parents=True, exist_ok=True)
    domain = 40
    made = {
        "cuts": lambda: ("What crosses the link at each cut", "\n\n".join(part_cuts(c, args.workdir) for c in configs)),
        "precision": lambda: ("Wire precision: action error",
                              "\n\n".join(part_precision(c, args.workdir) for c in configs)),
        "decode": lambda: ("Compressed cameras: decode time", part_decode()),
        "links": lambda: ("Shaped links", "\n\n".join(part_links(c, args.workdir, args.duration, domain)
                                                         for c in configs)),
        "faults": lambda: (f"Faults ({configs[0]}, {args.repeats} of each)",
                           part_faults(configs[0], args.workdir, args.repeats, domain)),
    }
    for part in parts:  # each part's section written as soon as it is done
        title, table = made[part]()
        text = "\n".join([INTRO if part == "links" else "", f"{title}:", "", table]).strip()
        print(text, flush=True)
        if not args.no_write:
            common.write_section(common.REPO_ROOT / "BENCHMARKS.md", f"two_hosts_{part}", text,
                                 command=common.command_line(), machine=common.machine_line())


if __name__ == "__main__":
    main()

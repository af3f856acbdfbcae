"""BitVLA's PyTorch code timed on given model-space inputs (the PyTorch side of benchmarks/bench_bitvla.py).

Run in the reference environment of install.sh:

    VENV/bin/python time_reference.py run CHECKPOINT INPUTS.npz --repeats 5 --threads 2 --source BITVLA_CHECKOUT
        loads the released-layout checkpoint with BitVLAForActionPrediction (float32, eager attention) and its
        OFT head and proprio projector, and times `predict_action` on INPUTS.npz (`pixel_values`
        [cameras, 3, S, S], `input_ids` [L], `proprio` [P] if the model reads one); prints JSON with the times
        (ms) and the normalized actions of the last run
    VENV/bin/python time_reference.py make SPEC.json OUT --source BITVLA_CHECKOUT
        writes a random-weight checkpoint of SPEC (gen_records.py's spec format) in the released layout
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_records  # noqa: E402  (the BitVLA loader, tokenizer, model builder and checkpoint writer)


def make(spec_path: Path, out: Path, source: Path) -> None:
    import numpy as np

    spec = json.loads(spec_path.read_text())
    ref = gen_records.load_bitvla(source, spec)
    tokenizer = gen_records.make_tokenizer(source, spec)
    processor = gen_records.make_processor(spec, tokenizer, gen_records.chat_template(source))
    stats = gen_records.make_stats(spec, np.random.default_rng(spec["seeds"]["weights"] + 1000))
    model, head, proprio = gen_records.build_model(ref, spec, tokenizer, stats)
    gen_records.save_checkpoint(out, model, head, proprio, processor, stats)
    (out / "cases.json").write_text(json.dumps({"settings": gen_records.settings(spec)}, indent=1) + "\n")


def run(checkpoint: Path, inputs: Path, source: Path, repeats: int, threads: int) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    settings = json.loads((checkpoint / "cases.json").read_text())["settings"] if (checkpoint / "cases.json").is_file() \
        else {}
    data = np.load(inputs)
    config = json.loads((checkpoint / "config.json").read_text())
    width = config["text_config"]["hidden_size"]
    head_state = gen_records_state(checkpoint, "action_head")
    action_dim = head_state["model.fc2.weight"].shape[0]
    proprio_state = gen_records_state(checkpoint, "proprio_projector")
    chunk = int(settings.get("chunk_size", 8))
    spec = {"num_actions_chunk": chunk, "action_dim": action_dim,
            "proprio_dim": proprio_state["fc1.weight"].shape[1] if proprio_state else 8}
    ref = gen_records.load_bitvla(source, spec)
    model = ref.Model.from_pretrained(checkpoint, attn_implementation="eager", torch_dtype=torch.float32).eval()
    head = ref.Head(input_dim=width, hidden_dim=width, action_dim=action_dim).eval()
    head.load_state_dict(head_state)
    proprio = None
    if proprio_state:
        proprio = ref.Proprio(llm_dim=width, proprio_dim=spec["proprio_dim"]).eval()
        proprio.load_state_dict(proprio_state)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    pad = tokenizer.convert_tokens_to_ids
    model.set_constant(image_token_idx=pad("<|image_pad|>"), proprio_pad_idx=pad("<proprio_pad>"), ignore_idx=-100,
                       action_token_begin_idx=pad("<proprio_pad>"), stop_index=pad("<|end_of_text|>"))
    unnorm_key = settings.get("unnorm_key") or next(iter(model.norm_stats))
    ids = torch.from_numpy(data["input_ids"])[None]
    pixels = torch.from_numpy(data["pixel_values"])[None]
    state = data["proprio"] if proprio is not None else None

    def once():
        with torch.no_grad():
            _, hidden = model.predict_action(input_ids=ids, unnorm_key=unnorm_key, proprio=state,
                                             proprio_projector=proprio, action_head=head, pixel_values=pixels,
                                             attention_mask=torch.ones_like(ids))
            return head.predict_action(hidden).reshape(chunk, action_dim).numpy()

    once()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        actions = once()
        times.append((time.perf_counter() - start) * 1e3)
    return {"runs_ms": times, "normalized_actions": actions.tolist(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def gen_records_state(checkpoint: Path, kind: str) -> dict | None:
    import torch

    files = [path for path in checkpoint.iterdir() if kind in path.name and "checkpoint" in path.name]
    if not files:
        return None
    return {name.removeprefix("module."): value for name, value in torch.load(files[0], weights_only=True).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    timed = actions.add_parser("run")
    timed.add_argument("checkpoint", type=Path)
    timed.add_argument("inputs", type=Path)
    timed.add_argument("--repeats", type=int, default=5)
    timed.add_argument("--threads", type=int, default=2)
    made = actions.add_parser("make")
    made.add_argument("spec", type=Path)
    made.add_argument("out", type=Path)
    for sub in (timed, made):
        sub.add_argument("--source", type=Path, default=os.environ.get("BITVLA_SOURCE"), help="BitVLA checkout")
    args = parser.parse_args()
    if args.source is None:
        parser.error("give the BitVLA checkout with --source or BITVLA_SOURCE")
    if args.action == "make":
        make(args.spec, args.out, args.source.resolve())
        return
    result = run(args.checkpoint, args.inputs, args.source.resolve(), args.repeats, args.threads)
    print("JSON " + json.dumps(result))


if __name__ == "__main__":
    main()

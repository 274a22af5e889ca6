"""Export recorded trajectories for other trainers (sft / verl / trl flavours, JSONL or Parquet).

Reads a run's whole trajectory stream from the proxy (or a JSONL file of Trajectory dicts, as the
stream serves them) and writes one row per segment that holds sampled tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollwire.settings import Settings

HELP = "export recorded trajectories as JSONL/Parquet for other trainers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--proxy", default=None, help="proxy base URL (default: the trainer's proxy_url setting)")
    parser.add_argument("--operator-key", default=None, help="operator key (default: the trainer/proxy setting)")
    parser.add_argument("--run", default=None, help="run id whose trajectories to export")
    parser.add_argument("--input", type=Path, default=None, help="read trajectories from this JSONL file instead")
    parser.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="output format")
    parser.add_argument("--flavor", choices=["sft", "verl", "trl", "rollwire"], default="sft", help="row layout")
    parser.add_argument("--min-reward", type=float, default=None, help="only rollouts with at least this reward")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (verl decodes prompts); default tiny")
    parser.add_argument("--out", type=Path, required=True, help="output file")


def _from_stream(args: argparse.Namespace, settings: Settings) -> list:  # type: ignore[type-arg]
    from rollwire.errors import InvalidRequest
    from rollwire.trainer.stream import StreamConfig, TrajectoryStream

    run = args.run or settings.trainer.run
    if not run:
        raise InvalidRequest("give --run (or --input FILE)", param="run")
    key = args.operator_key or settings.trainer.operator_key or settings.proxy.operator_key
    stream = TrajectoryStream(StreamConfig(args.proxy or settings.trainer.proxy_url, key, run, wait_s=0.0))
    out = []
    try:
        while batch := stream.poll():
            out.extend(batch)
            print(f"\rread {len(out)} trajectories", end="", file=sys.stderr, flush=True)
    finally:
        stream.close()
    print(file=sys.stderr)
    return out


def run(args: argparse.Namespace, settings: Settings) -> int:
    from rollwire.errors import InvalidRequest
    from rollwire.tiny_model import ensure_tiny_model
    from rollwire.tokenizers import load_tokenizer
    from rollwire.trainer.export import export_rows, write_rows
    from rollwire.trajectory import Trajectory

    if args.input is not None:
        if not args.input.is_file():
            raise InvalidRequest(f"no such file {args.input}", param="input")
        try:
            lines = [ln for ln in args.input.read_text().splitlines() if ln.strip()]
            trajectories = [Trajectory.from_dict(json.loads(ln)) for ln in lines]
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidRequest(f"{args.input} is not a JSONL file of trajectories: {exc}", param="input") from exc
    else:
        trajectories = _from_stream(args, settings)
    tokenizer = None
    if args.flavor == "verl":
        tokenizer = load_tokenizer(args.tokenizer or settings.trainer.model or ensure_tiny_model(settings.home))
    rows = export_rows(trajectories, args.flavor, tokenizer=tokenizer, min_reward=args.min_reward)
    write_rows(rows, args.out, args.format)
    print(f"wrote {len(rows)} rows ({args.flavor}, {args.format}) from {len(trajectories)} trajectories to {args.out}",
          file=sys.stderr)
    return 0

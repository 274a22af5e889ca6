"""An eos token (from the checkpoint's generation config) ends a choice with finish_reason "stop" and no
stop_reason; its id stays in token_ids, its text does not; ignore_eos samples past it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
from transformers import AutoTokenizer

from rollwire.app.serving import ServerThread
from rollwire.engine import create_app
from rollwire.settings import EngineSettings

BODY = {"prompt": [70, 71, 72], "max_tokens": 12, "temperature": 0, "return_token_ids": True}


def test_eos_stops_unless_ignored(tiny_model_dir: Path, tmp_path: Path) -> None:
    with ServerThread(create_app(EngineSettings(model=str(tiny_model_dir), device="cpu"), tmp_path)) as server:
        reference = httpx.post(f"{server.url}/v1/completions", json={**BODY, "ignore_eos": True}, timeout=60).json()
    ids = reference["choices"][0]["token_ids"]
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    config_path = model / "generation_config.json"
    config = json.loads(config_path.read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    # the new eos is a token sampled before any of the model's own eos ids (which would stop first)
    own = {tokenizer.eos_token_id, config["eos_token_id"]}
    first_own = next((i for i, token in enumerate(ids) if token in own), len(ids))
    assert first_own >= 1, f"the greedy continuation {ids} opens with an eos: choose another prompt"
    eos = ids[first_own - 1]
    at = ids.index(eos)

    config["eos_token_id"] = [config["eos_token_id"], eos]
    config_path.write_text(json.dumps(config))

    with ServerThread(create_app(EngineSettings(model=str(model), device="cpu"), tmp_path)) as server:
        stopped = httpx.post(f"{server.url}/v1/completions", json=BODY, timeout=60).json()["choices"][0]
        ignored = httpx.post(f"{server.url}/v1/completions", json={**BODY, "ignore_eos": True}, timeout=60).json()
    assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] is None
    assert stopped["token_ids"] == ids[: at + 1]
    assert stopped["text"] == tokenizer.decode(ids[:at], skip_special_tokens=True)
    assert ignored["choices"][0]["token_ids"] == ids

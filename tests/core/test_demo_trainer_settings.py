"""The demo's learner reads the engine's address where `rollwire train` does, so TIS is on with vLLM, and on
whenever sampling runs ahead of training (tokens of older policies)."""

from __future__ import annotations

import pytest

from rollwire.app.demo.loop import DemoConfig, trainer_settings
from rollwire.app.stack import StackInfo
from rollwire.settings import TrainerSettings
from trainer.loop import grpo_config

INFO = StackInfo(
    proxy_url="http://127.0.0.1:1",
    gateway_url="http://127.0.0.1:2",
    env_url="http://127.0.0.1:3",
    engine_url="http://127.0.0.1:4",
    operator_key="k",
    db_url="sqlite://",
    state_root="state",
    model="tiny",
)


def test_vllm_engine_pushes_to_vllm_with_tis() -> None:
    settings = trainer_settings(DemoConfig(engine="vllm"), TrainerSettings(), INFO)
    assert (settings.vllm_url, settings.engine_url) == ("http://127.0.0.1:4", "")
    assert grpo_config(settings).is_correction == "tis"


def test_bundled_engine_in_lockstep_pushes_to_the_engine_without_correction() -> None:
    settings = trainer_settings(DemoConfig(max_lag=0), TrainerSettings(), INFO)
    assert (settings.vllm_url, settings.engine_url) == ("", "http://127.0.0.1:4")
    assert grpo_config(settings).is_correction == "none"


def test_sampling_ahead_of_training_turns_the_correction_on() -> None:
    settings = trainer_settings(DemoConfig(max_lag=1), TrainerSettings(), INFO)
    assert settings.engine_url == "http://127.0.0.1:4"
    assert grpo_config(settings).is_correction == "tis"
    explicit = trainer_settings(DemoConfig(max_lag=1), TrainerSettings(is_correction="none"), INFO)
    assert grpo_config(explicit).is_correction == "none"


def test_upstream_is_treated_as_vllm() -> None:
    config = DemoConfig(upstream="http://127.0.0.1:9", model="m")
    settings = trainer_settings(config, TrainerSettings(), INFO)
    assert settings.vllm_url == "http://127.0.0.1:9"
    assert grpo_config(settings).is_correction == "tis"


def test_an_explicit_choice_wins_over_auto() -> None:
    settings = trainer_settings(DemoConfig(engine="vllm"), TrainerSettings(is_correction="none"), INFO)
    assert grpo_config(settings).is_correction == "none"


def test_a_model_with_a_preset_gets_its_recipe_and_flags_beat_it(capsys: pytest.CaptureFixture[str]) -> None:
    from rollwire.app.cli.__main__ import build_parser
    from rollwire.app.cli.demo import _config

    parser = build_parser()
    smollm2 = _config(parser.parse_args(["demo", "--model", "smollm2-135m"]))
    assert (smollm2.lora_rank, smollm2.sft_epochs, smollm2.tasks_per_iteration) == (16, 2, 4)
    assert trainer_settings(smollm2, TrainerSettings(), INFO).lora_rank == 16  # the learner trains adapters
    full = _config(parser.parse_args(["demo", "--model", "smollm2-135m", "--lora-rank", "0", "-K", "3"]))
    assert (full.lora_rank, full.iterations, full.sft_epochs) == (0, 3, 2)
    assert _config(parser.parse_args(["demo"])) == DemoConfig()  # the tiny model: the defaults, untouched
    assert _config(parser.parse_args(["demo", "--no-dynamic-sampling"])).dynamic_sampling is False
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--help"])
    assert "(default 0; smollm2-135m: 16)" in " ".join(capsys.readouterr().out.split())  # --help shows each preset

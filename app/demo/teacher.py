"""A scripted expert behind the engine's wire format: it plays a suite's reference solutions.

Put behind a proxy, its answers are recorded like any engine's (exact token ids, one policy version),
so a harness driven by it leaves teacher trajectories in the store for the SFT warm start. It reads
the prompt the proxy rendered: the last user message names the task (by its instruction), the tool
responses after it say how many reference steps are done; the next step is sent as a ``<tool_call>``,
and once all are done the task's reference answer (or "Done.") ends the turn.

It keeps going through what a long session does: asked to summarise the conversation (a harness compacting its
context, the request ``rollwire.side_calls`` names a compaction), it answers with the task's instruction and how
many steps are done, so the compacted session resumes where it was. A step may hand a sub-agent (Claude Code's
``Agent`` tool) the instruction of another task of the suites: the sub-agent's calls then play that task.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rollwire.errors import RollwireError, openai_error_body
from rollwire.mcp_servers.tasks.schema import Suite, Task
from rollwire.request_body import read_json_body
from rollwire.side_calls import DEFAULT_RULES, MAIN, CallFeatures, SideCallRule, classify

_USER_TURN = re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.DOTALL)
END_OF_TURN = "<|im_end|>"
_PROGRESS = re.compile(r"\[(\d+) of \d+ reference steps done\]")
"""How a summary the teacher wrote carries its progress across a compaction."""
_SUMMARY_RULES = tuple(SideCallRule(r.name, text=r.text) for r in DEFAULT_RULES if r.name == "compaction")


class ScriptedExpert:
    """Maps a rendered prompt to the expert's next assistant turn (text ending with the end-of-turn token)."""

    def __init__(self, suites: list[Suite]) -> None:
        self.by_instruction: dict[str, Task] = {t.instruction.strip(): t for s in suites for t in s.tasks}

    def _task_turn(self, prompt_text: str) -> tuple[Task, int]:
        """The last user turn that gives a task (harnesses such as Claude Code put reminders in front of the
        prompt, and more user turns after it; mini-swe-agent wraps the task in its own template), with where it
        ends. The longest instruction the turn holds wins."""
        turns = [m for m in _USER_TURN.finditer(prompt_text) if "<tool_response>" not in m.group(1)]
        if not turns:
            raise LookupError("the prompt has no user message")
        for turn in reversed(turns):
            said = turn.group(1).strip()
            task = (
                self.by_instruction.get(said)
                or max(
                    ((len(i), t) for i, t in self.by_instruction.items() if i in said),
                    default=(0, None),
                    key=lambda f: f[0],
                )[1]
            )
            if task is not None:
                return task, turn.end()
        raise LookupError(f"no task has the instruction {turns[-1].group(1).strip()[:80]!r}")

    def _progress(self, prompt_text: str) -> tuple[Task, int]:
        """The task and how many of its steps are done: tool responses since its turn, plus what a summary of an
        earlier, compacted part of the session says was done."""
        task, end = self._task_turn(prompt_text)
        turn_start = prompt_text.rfind("<|im_start|>user\n", 0, end)
        carried = _PROGRESS.search(prompt_text, turn_start, end)
        return task, (int(carried.group(1)) if carried else 0) + prompt_text.count("<tool_response>", end)

    def next_turn(self, prompt_text: str) -> str:
        task, done = self._progress(prompt_text)
        if _asks_for_summary(prompt_text):
            steps = len(task.reference_solution)
            return f"<summary>\n{task.instruction}\n[{done} of {steps} reference steps done]\n</summary>{END_OF_TURN}"
        if done < len(task.reference_solution):
            step = task.reference_solution[done]
            name = step.tool if f'"name": "{step.tool}"' in prompt_text else f"{step.server}__{step.tool}"
            call = json.dumps({"name": name, "arguments": step.arguments})
            return f"<tool_call>\n{call}\n</tool_call>{END_OF_TURN}"
        return f"{task.reference_answer or 'Done.'}{END_OF_TURN}"


def _asks_for_summary(prompt_text: str) -> bool:
    """Whether the last user turn asks for a summary of the conversation (a compaction)."""
    turns = _USER_TURN.findall(prompt_text)
    features = CallFeatures(system="", last_user=turns[-1] if turns else "", tools=0, max_tokens=None, main_has_tools=False)
    return classify(features, _SUMMARY_RULES) != MAIN


def build_teacher_app(
    model_dir: Path, suites: list[Suite], served_name: str = "teacher", max_model_len: int | None = None
) -> Starlette:
    """``/v1/completions`` (token-id prompts, ``return_token_ids``), ``/v1/models`` and ``/health``;
    ``max_model_len`` is the context it reports as vLLM does (None: reports none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    expert = ScriptedExpert(suites)

    async def completions(request: Request) -> JSONResponse:
        body = await read_json_body(request, 8 * 1024 * 1024)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, list) or not all(isinstance(t, int) for t in prompt):
            return _error("the teacher takes token-id prompts only (a list of ints)", 400)
        transcript = tokenizer.decode(prompt, skip_special_tokens=False)
        assert isinstance(transcript, str)  # one sequence of ids decodes to one string
        try:
            text = expert.next_turn(transcript)
        except LookupError as exc:
            return _error(f"teacher: {exc}", 400)
        ids = tokenizer.encode(text, add_special_tokens=False)
        max_tokens = body.get("max_tokens")
        finish = "stop"
        if isinstance(max_tokens, int) and len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        tokens = [tokenizer.decode([i], skip_special_tokens=False) for i in ids]
        visible = text[: -len(END_OF_TURN)] if finish == "stop" else tokenizer.decode(ids, skip_special_tokens=False)
        choice = {
            "index": 0,
            "text": visible,
            "token_ids": ids,
            "prompt_token_ids": prompt,
            "finish_reason": finish,
            "logprobs": {
                "tokens": tokens,
                "token_logprobs": [0.0] * len(ids),
                "top_logprobs": None,
                "text_offset": None,
            },
        }
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return JSONResponse(
            {"id": f"cmpl-teacher-{time.time_ns()}", "object": "text_completion", "model": served_name,
             "choices": [choice], "usage": usage, "weight_version": 0}
        )  # fmt: skip

    async def models(request: Request) -> JSONResponse:
        card: dict[str, Any] = {"id": served_name, "object": "model", "owned_by": "rollwire"}
        if max_model_len is not None:
            card["max_model_len"] = max_model_len
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def rollwire_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RollwireError)  # vLLM's shape, like the engine it stands in for: the status as code
        body = openai_error_body(exc.message, exc.code, param=exc.param, code=exc.status_code)
        return JSONResponse(body, status_code=exc.status_code)

    return Starlette(
        exception_handlers={RollwireError: rollwire_error},
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
    )


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse(openai_error_body(message, "invalid_request_error", code=status), status_code=status)


__all__ = ["END_OF_TURN", "ScriptedExpert", "build_teacher_app"]

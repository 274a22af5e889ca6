"""Run the main job on the embedded default: start the local stack on this machine and show a round trip.

Today the stack is the bundled engine serving the tiny local model: the demo renders a chat with the
model's own template, sends the token ids to the engine with the official ``openai`` client (as the
proxy does), and prints every sampled token with its logprob and the weight version that sampled it.
"""

from __future__ import annotations

import argparse

from rollwire.settings import Settings

HELP = "run the main job on the embedded default (local stack, tiny model, no GPU, no downloads)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", default="Write the word Paris to answer.txt.", help="user message to send")
    parser.add_argument("--max-tokens", type=int, default=24, help="most tokens to sample (default 24)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from openai import OpenAI
    from rich.console import Console
    from rich.table import Table

    from rollwire.engine.app import create_app
    from rollwire.serving import ServerThread
    from rollwire.tiny_model import ensure_tiny_model
    from rollwire.tokenizers import load_tokenizer

    console = Console()
    with console.status("building or loading the tiny local model"):
        model_dir = ensure_tiny_model(settings.home)
    console.print(f"[bold]model[/] {model_dir}")
    engine_settings = settings.engine.model_copy(update={"model": str(model_dir)})
    engine = ServerThread(create_app(engine_settings, settings.home))
    with console.status("starting the bundled engine"):
        engine.start()
    try:
        console.print(f"[bold]engine[/] {engine.url}/v1 (vLLM wire format)")
        tokenizer = load_tokenizer(model_dir)
        messages = [{"role": "user", "content": args.prompt}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer.encode(text, add_special_tokens=False)
        client = OpenAI(base_url=f"{engine.url}/v1", api_key="local")
        served = client.models.list().data[0].id
        completion = client.completions.create(
            model=served,
            prompt=list(prompt_ids),
            max_tokens=args.max_tokens,
            temperature=1.0,
            seed=args.seed,
            logprobs=0,
            extra_body={"return_token_ids": True},
        )
        body = completion.model_dump()
        choice = body["choices"][0]
        table = Table(title=f"sampled by weight version {body.get('weight_version')}")
        for column in ("#", "token id", "piece", "logprob"):
            table.add_column(column)
        for i, (tid, lp) in enumerate(zip(choice["token_ids"], choice["logprobs"]["token_logprobs"], strict=True)):
            table.add_row(str(i), str(tid), repr(tokenizer.convert_ids_to_tokens(tid)), f"{lp:.4f}")
        console.print(f"[bold]prompt[/] {len(prompt_ids)} token ids from the chat template")
        console.print(table)
        console.print(f"[bold]finish_reason[/] {choice['finish_reason']}; text {choice['text']!r}")
    finally:
        engine.stop()
    return 0

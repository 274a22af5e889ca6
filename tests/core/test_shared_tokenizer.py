"""The real Qwen tokenizer loads through the project helper, from a read-only source."""

from pathlib import Path

from rollwire.tokenizers import qwen_tokenizer


def test_real_qwen_ids_and_template(qwen_tokenizer_files: Path) -> None:
    tokenizer = qwen_tokenizer("qwen3")
    assert tokenizer("Hello world, Paris!").input_ids == [9707, 1879, 11, 12095, 0]
    assert tokenizer.convert_tokens_to_ids("<think>") == 151667
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

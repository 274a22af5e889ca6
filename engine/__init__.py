"""rollwire.engine: the bundled vLLM-compatible engine (CPU or GPU) over a transformers causal LM."""

from rollwire.engine.app import create_app, resolve_model_path

__all__ = ["create_app", "resolve_model_path"]

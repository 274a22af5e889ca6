"""rollwire: train LLM agents with RL inside the agent harnesses they already use."""

__version__ = "0.1.0"
__all__ = ["__version__"]

"""The main job on one machine: teacher data, SFT warm start, GRPO through the real stack, evaluation, report."""

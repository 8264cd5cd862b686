"""The miles trainer stand-in: what lorarl can see of miles' ``train.py`` (its argv, its log,
its LoRA checkpoint files, its resume), without GPUs, torch, Megatron or SGLang. See ../README.md."""

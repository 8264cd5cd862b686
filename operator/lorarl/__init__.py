"""lorarl: a Kubernetes operator that runs miles GRPO LoRA RL jobs on KubeRay."""

__version__ = "0.1.0"

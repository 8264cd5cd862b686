"""The lorarl benchmark (see bench/run.py and docs/benchmarks.md)."""

"""Handing the exported adapter to an inference server (spec.serve, docs/adapters.md)."""

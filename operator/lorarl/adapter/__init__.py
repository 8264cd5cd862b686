"""The trained adapter out of the job's volume: choose the newest complete save, check it against
the spec, convert it to safetensors, write it with a manifest of digests, and pull it back
verified (docs/adapters.md). Standard library only, except botocore for s3:// stores."""

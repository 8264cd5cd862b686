"""The LoraRLJob API (lorarl.dev/v1alpha1): the typed model, the one source of truth for the schema."""

"""What the API server is told and how it answers, offline: the generated CRD, its structural schema and CEL rules."""

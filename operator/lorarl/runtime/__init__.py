"""Process plumbing that knows no LoraRLJob: the API client, leader election, probes, the runner, events, metrics."""

"""The control loop: the reconcile and its pure decisions (status, health, Kueue), the caches and the work queue."""

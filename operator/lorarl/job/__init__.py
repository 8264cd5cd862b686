"""The job itself, pure: profiles, the train.py command, the child manifests, the reporter artifact."""

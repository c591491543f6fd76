"""Where events come from: the Kubernetes API (reflector) or a recorded capture (replay)."""

"""coffer-harness: test helpers that start or drive the services (a dev dependency; never in an image)."""

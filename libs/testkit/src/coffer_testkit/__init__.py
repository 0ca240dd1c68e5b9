"""coffer-testkit: fixtures and helpers for Coffer's tests (a dev dependency; never in an image)."""

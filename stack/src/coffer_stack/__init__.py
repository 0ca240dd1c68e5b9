"""The embedded default stack launcher."""

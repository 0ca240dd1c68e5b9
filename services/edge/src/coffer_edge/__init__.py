"""Coffer edge service."""

"""Coffer metadata service."""

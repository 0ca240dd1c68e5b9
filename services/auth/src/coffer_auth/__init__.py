"""Coffer auth service."""

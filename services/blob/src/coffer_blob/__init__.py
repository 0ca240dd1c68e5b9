"""Coffer blob service."""

"""Fixtures shared by the cross-service tests."""

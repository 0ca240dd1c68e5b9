"""Webhooks (CONTRACT §11): endpoints, the dispatcher that delivers the outbox's events to them."""

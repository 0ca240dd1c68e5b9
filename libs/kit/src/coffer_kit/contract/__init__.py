"""The contract: what crosses the wire (ids, limits, names, URLs, times, the public resources,
the webhook and transform vocabularies, the internal bodies, the errors). It imports nothing
else of the kit (tests/test_floors.py)."""

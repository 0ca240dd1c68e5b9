"""coffer-kit: platform code shared by every Coffer service."""

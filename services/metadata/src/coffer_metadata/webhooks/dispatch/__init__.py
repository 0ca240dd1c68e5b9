"""The webhook dispatcher (``coffer-metadata dispatch``), one module per step: ``fanout``,
``claim``, ``send``, ``record``; ``dispatcher`` runs them in its loop, ``app`` is the role's
process. How they fit together: docs/webhooks.md, "How delivery works"."""

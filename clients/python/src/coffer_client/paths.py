"""Folder paths as the command line writes them: ``/photos/2024``."""

from __future__ import annotations


def split_path(path: str) -> list[str]:
    """``/a/b/`` → ``["a", "b"]``; ``/`` and ``""`` → ``[]``."""
    return [p for p in path.strip().split("/") if p]


def join_path(*parts: str) -> str:
    return "/" + "/".join(p for part in parts for p in split_path(part))

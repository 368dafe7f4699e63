"""A read-only results browser over the experience store (``swm ui``; the ``[ui]`` extra)."""

from swm.ui.app import create_app

__all__ = ["create_app"]

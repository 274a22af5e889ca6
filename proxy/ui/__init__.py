"""The trace viewer served under ``/ui``: pages in ``static/`` over the JSON routes in ``data``."""

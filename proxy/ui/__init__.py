"""The trace viewer served under ``/ui`` on the proxy's admin listener: pages in ``static/`` over the JSON routes in ``data``."""

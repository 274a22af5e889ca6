"""The trace viewer on its own, over any store, read-only (``rollwire traces ui --db URL``).

Looking at a store changes nothing in it: the store is opened read-only (``open_engine(read_only=True)``), and
this app serves the viewer's page and JSON only: no proxy starts, so no run, rollout or schema is written. The
operator key guards it as it guards the proxy's viewer (a random one unless given).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route

from rollwire.errors import RollwireError
from rollwire.proxy.edge import http_error, rollwire_error
from rollwire.proxy.render import Renderer
from rollwire.proxy.ui.data import ViewerState
from rollwire.proxy.ui.routes import ui_routes


async def _home(request: Request) -> Response:
    return RedirectResponse("/ui/", status_code=307)


def create_viewer_app(engine: Engine, renderer: Renderer, operator_key: str) -> Starlette:
    """The viewer (``/ui``) over ``engine``, a store the caller opened read-only; ``/`` leads there."""
    app = Starlette(
        routes=[Route("/", _home, methods=["GET"]), Mount("/ui", routes=ui_routes())],
        exception_handlers={RollwireError: rollwire_error, HTTPException: http_error},
    )
    app.state.viewer = ViewerState(operator_key, engine, renderer)
    return app


__all__ = ["create_viewer_app"]

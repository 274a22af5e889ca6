"""The viewer's pages and assets under ``/ui``, all behind the operator key.

Open ``/ui/?key=<operator key>`` once: the key is checked, stored in an HttpOnly, SameSite=Strict
cookie (``rollwire_operator``) and the browser is sent on to ``/ui/`` without it in the address bar.
After that the page, its assets (``/ui/static/...``) and its JSON (``/ui/api/...``, see ``data``) answer
with the cookie; scripts may also send ``Authorization: Bearer <operator key>``. Without either, 401.
Everything ships inside the package (no CDN, no build step), so the viewer works offline.
"""

from __future__ import annotations

import hmac
from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from rollwire.errors import NotFound, Unauthorized
from rollwire.proxy.ui.data import COOKIE, api_routes, check_operator, viewer_state

STATIC = Path(__file__).parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}

_LOGIN_PAGE = """<!doctype html><meta charset="utf-8"><title>rollwire viewer: key needed</title>
<p>The trace viewer needs the operator key: open <code>/ui/?key=&lt;operator key&gt;</code>.</p>"""


async def page(request: Request) -> Response:
    """The single page; ``?key=K`` logs in (cookie) and redirects, a missing key shows how to log in."""
    key = request.query_params.get("key")
    operator_key = viewer_state(request).operator_key
    if key is not None:
        if not hmac.compare_digest(key.encode(), operator_key.encode()):
            return HTMLResponse(_LOGIN_PAGE, status_code=401)
        response = RedirectResponse(request.url.path, status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, key, httponly=True, samesite="strict", path="/ui", secure=secure)
        return response
    try:
        check_operator(request)
    except Unauthorized:
        return HTMLResponse(_LOGIN_PAGE, status_code=401, headers={"WWW-Authenticate": "Bearer"})
    return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-store"})


async def asset(request: Request) -> Response:
    check_operator(request)
    name = request.path_params["name"]
    if name not in ASSETS:
        raise NotFound(f"no viewer asset {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name])


def ui_routes() -> list[BaseRoute]:
    return [
        Route("/", page, methods=["GET"]),
        Route("/static/{name}", asset, methods=["GET"]),
        Mount("/api", routes=api_routes()),
    ]


__all__ = ["ui_routes"]

"""The web console's files, served from the installed package at ``/console/``.

The console is static: an HTML page, its script and style, and the chart library it
uses (``console/vendor``, see the README for where those files come from). The page reads
everything through the admin REST API with the token the person typed, so serving these
files needs no authentication and reveals nothing. Only the files present in the package
directory when the app is made are served; any other path is a 404. Each answer carries
a Content-Security-Policy that allows scripts, styles and connections from this origin
only, so a payload that slipped into the page as markup still could not run.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from magnetar.admin.errors import not_found

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png",
                 ".txt": "text/plain; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def console_files() -> dict[str, tuple[bytes, str]]:
    """Relative path -> (content, media type) of every servable file of the package's console."""
    files: dict[str, tuple[bytes, str]] = {}
    root = resources.files("magnetar") / "console"

    def walk(folder: resources.abc.Traversable, prefix: str) -> None:
        for item in folder.iterdir():
            if item.is_dir():
                walk(item, f"{prefix}{item.name}/")
                continue
            suffix = "." + item.name.rsplit(".", 1)[-1] if "." in item.name else ""
            if suffix in CONTENT_TYPES:
                files[prefix + item.name] = (item.read_bytes(), CONTENT_TYPES[suffix])
    if root.is_dir():
        walk(root, "")
    return files


def make_router() -> APIRouter:
    files = console_files()
    router = APIRouter(tags=["console"], include_in_schema=False)

    @router.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=302)

    @router.get("/console")
    async def console_no_slash() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=302)

    @router.get("/console/{path:path}")
    async def console_file(path: str) -> Response:
        found = files.get(path or "index.html")
        if found is None:
            raise not_found("No such console file")
        content, media_type = found
        return Response(content, media_type=media_type, headers=SECURITY_HEADERS)

    return router

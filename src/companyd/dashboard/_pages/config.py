"""The Config page (``/config``): the company.yaml the daemon runs, and its last reload.

Everything is :meth:`~companyd.admin.Admin.config_view`: the file's path, when the running
version was loaded and the file's modification time now (with a warning when the file on
disk differs from what runs: a reload would read it), the last reload's result and every
error of the last rejected one, the secrets the file refers to (by name, whether set —
never a value), load warnings, and the resolved document (every default filled in) as
YAML. The daemon passes every string through the one redactor
(:mod:`companyd._secrets`) before it answers, and the templates pass every output through
it again (:mod:`companyd.dashboard._render`), so a configured secret never reaches the page.
"""

from __future__ import annotations

from typing import Any

import yaml
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from companyd.dashboard._context import ctx_of
from companyd.dashboard._render import render

__all__ = ["as_yaml", "routes"]


def as_yaml(document: dict[str, Any]) -> str:
    """The resolved document as YAML, keys in the schema's order."""
    text: str = yaml.safe_dump(
        document, sort_keys=False, allow_unicode=True, default_flow_style=False, width=96
    )
    return text


async def config_page(request: Request) -> Response:
    """The running configuration and the last reload."""
    view = await ctx_of(request).admin.config_view()
    return render(request, "config.html", v=view, document=as_yaml(view.document))


routes: list[BaseRoute] = [Route("/config", config_page, methods=["GET"], name="config")]

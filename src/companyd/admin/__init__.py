"""The operator contract: the :class:`Admin` protocol, its refusals (:class:`AdminError`)
and its results (:mod:`companyd.admin.results`, one frozen dataclass per result).

``operations`` is the protocol, ``results`` the result dataclasses, ``wire`` the one place
where arguments are validated and results become JSON (pydantic ``TypeAdapter`` objects; imported
by those who speak JSON: the control socket, the CLI, generic renderers).
"""

from companyd.admin.operations import Admin, AdminError, AdminStopping

__all__ = ["Admin", "AdminError", "AdminStopping"]

"""The model boundary: Messages-API request/response types, the one module that imports
``anthropic`` (``claude``), the offline model and the price catalog.

Layer 1: imports only the foundation modules; the configuration layer passes its specs in
(they satisfy this package's protocols). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.llm.blocks import (
        ContentBlock,
        Message,
        ToolResultBlock,
        ToolUseBlock,
        text_of,
        tool_uses_of,
    )
    from companyd.llm.claude import ClaudeBackend, resolve_api_key, resolve_base_url
    from companyd.llm.model import (
        ModelAuthFailed,
        ModelBackend,
        ModelBadRequest,
        ModelError,
        ModelRateLimited,
        ModelRequest,
        ModelResponse,
        ModelUnavailable,
        RetryHook,
        SpendLimitReached,
        ToolDef,
        Usage,
        estimate_input_tokens,
    )
    from companyd.llm.offline import OfflineModel
    from companyd.llm.prices import BUILTIN_PRICES, Price, PriceTable, is_known_model


__all__ = [
    "BUILTIN_PRICES",
    "ClaudeBackend",
    "ContentBlock",
    "Message",
    "ModelAuthFailed",
    "ModelBackend",
    "ModelBadRequest",
    "ModelError",
    "ModelRateLimited",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailable",
    "OfflineModel",
    "Price",
    "PriceTable",
    "RetryHook",
    "SpendLimitReached",
    "ToolDef",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "estimate_input_tokens",
    "is_known_model",
    "resolve_api_key",
    "resolve_base_url",
    "text_of",
    "tool_uses_of",
]


_HOMES: dict[str, str] = {
    "ModelRateLimited": "companyd.llm.model",
    "BUILTIN_PRICES": "companyd.llm.prices",
    "ClaudeBackend": "companyd.llm.claude",
    "ContentBlock": "companyd.llm.blocks",
    "Message": "companyd.llm.blocks",
    "ModelAuthFailed": "companyd.llm.model",
    "ModelBackend": "companyd.llm.model",
    "ModelBadRequest": "companyd.llm.model",
    "ModelError": "companyd.llm.model",
    "ModelRequest": "companyd.llm.model",
    "ModelResponse": "companyd.llm.model",
    "ModelUnavailable": "companyd.llm.model",
    "OfflineModel": "companyd.llm.offline",
    "Price": "companyd.llm.prices",
    "PriceTable": "companyd.llm.prices",
    "RetryHook": "companyd.llm.model",
    "SpendLimitReached": "companyd.llm.model",
    "ToolDef": "companyd.llm.model",
    "ToolResultBlock": "companyd.llm.blocks",
    "ToolUseBlock": "companyd.llm.blocks",
    "Usage": "companyd.llm.model",
    "estimate_input_tokens": "companyd.llm.model",
    "is_known_model": "companyd.llm.prices",
    "resolve_api_key": "companyd.llm.claude",
    "resolve_base_url": "companyd.llm.claude",
    "text_of": "companyd.llm.blocks",
    "tool_uses_of": "companyd.llm.blocks",
}


def __getattr__(name: str) -> Any:
    """Import a face name from its module on first use (keeps start-up imports cheap)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

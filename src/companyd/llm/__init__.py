"""The model boundary: Messages-API request/response types, the one module that imports
``anthropic`` (``claude``), the offline model and the price catalog.

Layer 1: imports only the foundation modules; the configuration layer passes its specs in
(they satisfy this package's protocols). See docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from companyd.llm._blocks import (
        ContentBlock,
        Message,
        ToolResultBlock,
        ToolUseBlock,
        text_of,
        tool_uses_of,
    )
    from companyd.llm._claude import (
        ClaudeBackend,
        preload_sdk,
        resolve_api_key,
        resolve_base_url,
    )
    from companyd.llm._model import (
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
        least_input_tokens,
    )
    from companyd.llm._offline import OfflineModel
    from companyd.llm._prices import BUILTIN_PRICES, Price, PriceTable, is_known_model


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
    "least_input_tokens",
    "preload_sdk",
    "resolve_api_key",
    "resolve_base_url",
    "text_of",
    "tool_uses_of",
]


_HOMES: dict[str, str] = {
    "ModelRateLimited": "companyd.llm._model",
    "BUILTIN_PRICES": "companyd.llm._prices",
    "ClaudeBackend": "companyd.llm._claude",
    "ContentBlock": "companyd.llm._blocks",
    "Message": "companyd.llm._blocks",
    "ModelAuthFailed": "companyd.llm._model",
    "ModelBackend": "companyd.llm._model",
    "ModelBadRequest": "companyd.llm._model",
    "ModelError": "companyd.llm._model",
    "ModelRequest": "companyd.llm._model",
    "ModelResponse": "companyd.llm._model",
    "ModelUnavailable": "companyd.llm._model",
    "OfflineModel": "companyd.llm._offline",
    "Price": "companyd.llm._prices",
    "PriceTable": "companyd.llm._prices",
    "RetryHook": "companyd.llm._model",
    "SpendLimitReached": "companyd.llm._model",
    "ToolDef": "companyd.llm._model",
    "ToolResultBlock": "companyd.llm._blocks",
    "ToolUseBlock": "companyd.llm._blocks",
    "Usage": "companyd.llm._model",
    "estimate_input_tokens": "companyd.llm._model",
    "is_known_model": "companyd.llm._prices",
    "least_input_tokens": "companyd.llm._model",
    "preload_sdk": "companyd.llm._claude",
    "resolve_api_key": "companyd.llm._claude",
    "resolve_base_url": "companyd.llm._claude",
    "text_of": "companyd.llm._blocks",
    "tool_uses_of": "companyd.llm._blocks",
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

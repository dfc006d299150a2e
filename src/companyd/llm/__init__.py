"""The model boundary: Messages-API request/response types, the one module that imports
``anthropic`` (``claude``), the offline model and the price catalog.

Layer 1: imports only the foundation modules; the configuration layer passes its specs in
(they satisfy this package's protocols). See docs/architecture.md.
"""

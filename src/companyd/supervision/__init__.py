"""The OTP supervision library: child specs, child contexts, the supervisor.

Layer 1: imports only the foundation modules (errors, clock, events), never the
application. See docs/supervision.md for the contract and docs/architecture.md for the layers.
"""

"""The role agents: model boundary, tool-use runtime, tools, checkpoints."""

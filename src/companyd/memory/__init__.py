"""The company memory: an MCP-compatible JSONL knowledge graph that never loses a write."""

"""The process and its supervision tree: supervisor, company tree, `companyd run`."""

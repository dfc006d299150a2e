"""Operator tools: the health check (``companyd doctor``) and verified backup / restore.

* :mod:`companyd.ops.archive` — the backup archive: manifest, atomic write, verify;
* :mod:`companyd.ops.backup` — taking a consistent snapshot of a company's state;
* :mod:`companyd.ops.restore` — putting a verified backup into a state directory;
* :mod:`companyd.ops.doctor` — the checks of ``companyd doctor`` and its safe fixes.

A layer of its own between the services (it reads the memory, spend, scheduler and alert
stores' files, and asks Telegram and the Anthropic API through ``alerts`` and ``llm``) and
the daemon, which calls it for the ``backup`` Admin operation and scheduled backups
(docs/architecture.md).
"""

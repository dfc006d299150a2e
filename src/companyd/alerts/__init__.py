"""The operator's pager: Telegram alerts from the event stream, and commands from the phone.

``service`` (the supervised child: routing, coalescing, quiet hours, admin commands),
``outbox`` (the durable alert store), ``render`` (event → message text and buttons),
``ops`` (operator commands and buttons → Admin calls), ``telegram`` (the Bot API
connection) and ``notify`` (``companyd notify-failure`` for systemd's OnFailure=).
Layer 5; the only package that imports ``telegram``. See docs/alerts.md.
"""

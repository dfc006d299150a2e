"""The operator's pager: Telegram alerts from the event stream, and commands from the phone.

``service`` (the supervised child composing the rest), ``policy`` (routing, severities,
quiet hours), ``coalesce`` (the alert book: events → alerts, coalescing, the digest),
``sender`` (delivery and backoff), ``link`` (the bot, polling for commands), ``commands``
(commands and buttons, replies in a result's thread), ``deliver`` (a routine's result →
its deliveries), ``digest`` (the daily results digest), ``outbox`` (the durable alert
store and the threads), ``render`` /
``render_kinds`` / ``render_status`` / ``values`` (event or Admin result → message text
and buttons), ``ops`` (operator commands and buttons → Admin calls), ``telegram`` (the Bot
API connection) and ``notify`` (``companyd notify-failure`` for systemd's OnFailure=).
Layer 5; the only package that imports ``telegram``. See docs/alerts.md.
"""

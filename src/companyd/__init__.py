"""companyd — a supervised company of Claude-powered role agents, run from one company.yaml.

At run time the process is one OTP-style supervision tree::

    companyd (root supervisor, one_for_one)      started top to bottom, stopped bottom to top
    ├── memory      the knowledge-graph owner     companyd.memory
    ├── spend       ledger and budgets            companyd.spend
    ├── alerts      Telegram pager                companyd.alerts._service
    ├── agents      supervisor: departments → agents   companyd.agents
    ├── scheduler   routines on APScheduler       companyd.scheduler
    └── control     Unix control socket           companyd.daemon

If the root supervisor gives up, the process exits non-zero and systemd restarts it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

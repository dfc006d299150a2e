"""A writer for the crash tests: writes to a graph file forever, reporting each write only
after it returned (= acknowledged). The parent SIGKILLs it at a random moment.

Usage: python _crash_writer.py FILE SEED

Prints ``ready``, then per acknowledged write ``E <name>`` (entity created) or
``O <name> <observation>`` (observation added); compacts every few writes so that kills also
land inside compactions.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from companyd.memory._store import GraphStore


def main() -> None:
    path = Path(sys.argv[1])
    seed = int(sys.argv[2])
    rng = random.Random(seed)
    store = GraphStore(path)
    store.open()
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    created: list[str] = []
    i = 0
    while True:
        i += 1
        if created and rng.random() < 0.3:
            name = rng.choice(created)
            obs = f"o{seed}-{i}"
            store.call(
                "add_observations", {"observations": [{"entityName": name, "contents": [obs]}]}
            )
            out.write(f"O {name} {obs}\n")
        else:
            name = f"w{seed}-{i}"
            entity = {
                "name": name,
                "entityType": "crash",
                "observations": ["x" * rng.randint(0, 300)],
            }
            store.call("create_entities", {"entities": [entity]})
            created.append(name)
            out.write(f"E {name}\n")
        out.flush()
        if i % 7 == 0:
            store.compact()


if __name__ == "__main__":
    main()

"""A writer for the crash tests: writes to a graph file forever, reporting each write only
after it returned (= acknowledged). The parent SIGKILLs it at a random moment.

Usage: python _crash_writer.py FILE SEED

Prints ``ready``, then per acknowledged write ``E <name>`` (entity created) or
``O <name> <observation>`` (observation added); compacts every few writes so that kills also
land inside compactions.

``python _crash_writer.py --fork`` is a fork server for a test that starts many writers:
it imports the store once, then for each ``FILE SEED FIFO`` line on stdin forks a writer
whose stdout is the named pipe FIFO, prints the writer's pid, waits for it to end and
prints its exit status (negative: the signal that ended it), as ``Popen.returncode``
does. Each writer is a process of its own, killed like any other; only the interpreter's
start and the import (~0.1 s of CPU per writer) are shared.
"""

from __future__ import annotations

import os
import random
import sys
import traceback
from pathlib import Path

from companyd.memory._store import GraphStore


def main(path: Path, seed: int) -> None:
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


def fork_server() -> None:
    """The ``--fork`` mode (see the module docstring)."""
    for line in sys.stdin:
        file, seed, fifo = line.split()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the writer: its stdout is the pipe; it ends only by a signal
            code = 1
            try:
                os.dup2(os.open(fifo, os.O_WRONLY), sys.stdout.fileno())
                main(Path(file), int(seed))
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        print(pid, flush=True)
        status = os.waitpid(pid, 0)[1]
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--fork"]:
        fork_server()
    else:
        main(Path(sys.argv[1]), int(sys.argv[2]))

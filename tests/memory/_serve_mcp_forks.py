"""A fork server for ``python -m companyd memory serve-mcp`` processes (tests only).

Started once per test process (``serve_mcp_forks`` in tests/memory/conftest.py, through
mcp_helpers.ServeMcpForks) with the environment a serve-mcp process gets, it imports what
that command imports — about 0.75 s of CPU, what every serve-mcp start pays — and then, per
request on its control socket, forks a child that runs ``companyd/__main__.py`` as ``python
-m companyd ARGV`` does (runpy, ``sys.argv``, ``sys.path[0]`` the working directory), with
three descriptors sent along as its fds 0, 1 and 2.

The child is a real process: its own pid, file locks, signal handlers, ``kill -9``, pipes and
exit status (SystemExit from ``main``, through the interpreter's own shutdown). What it
skips is the interpreter start and the imports; tests about those (tests/test_cli_imports.py)
start ``python -m companyd`` themselves, and one test still starts serve-mcp through the
SDK's own ``stdio_client`` (tests/memory/test_mcp_server.py, closing stdin).

Usage: ``python _serve_mcp_forks.py FD`` where FD is one end of a SOCK_SEQPACKET socketpair.
A request is one message: JSON ``{"argv": [...], "cwd": DIR}`` with four descriptors (the
child's stdin, stdout and stderr, and a reply socket). On the reply socket this server
writes one line with the child's pid at once, and one with its status once it has exited
(``os.waitstatus_to_exitcode``: -9 after SIGKILL, as ``Popen.returncode``), then closes
it. It exits when the control socket closes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import runpy
import selectors
import socket
import sys

import companyd.cli  # (what `python -m companyd` imports first)
import companyd.memory._mcp_server  # noqa: F401  (what serve-mcp imports: the mcp SDK)


def serve(control: socket.socket) -> tuple[list[str], str] | None:
    """Fork per request. Returns ``(argv, cwd)`` in a child, None when the control socket
    has closed (in this server).
    """
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, None)
    while True:
        for key, _ in sel.select():
            if key.data is None:
                msg, fds, _, _ = socket.recv_fds(control, 1 << 16, 4)
                if not msg:
                    return None
                request = json.loads(msg)
                pid = os.fork()
                if pid == 0:
                    for other in list(sel.get_map().values()):
                        if other.data is not None:
                            os.close(other.fd)  # another child's pidfd
                            other.data[1].close()  # and its reply socket
                    sel.close()
                    control.close()
                    for fd, target in zip(fds[:3], (0, 1, 2), strict=True):
                        os.dup2(fd, target)
                    for fd in fds:
                        os.close(fd)
                    return request["argv"], request["cwd"]
                for fd in fds[:3]:
                    os.close(fd)
                reply = socket.socket(fileno=fds[3])
                reply.sendall(f"{pid}\n".encode())
                sel.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, reply))
            else:
                pid, reply = key.data
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the test may have stopped waiting
                    reply.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                reply.close()


if __name__ == "__main__":
    gc.freeze()  # as a pre-fork server does: a child's collections leave the shared heap alone
    child = serve(socket.socket(fileno=int(sys.argv[1])))
    if child is not None:
        argv, cwd = child
        os.chdir(cwd)
        sys.path[0] = cwd  # as `python -m` has it
        sys.argv = ["companyd", *argv]  # runpy puts the module's path in argv[0]
        runpy.run_module("companyd", run_name="__main__", alter_sys=True)

"""How an MCP tool server is started: inside a bubblewrap sandbox (the default), or as the
daemon's own child (``sandbox: false``).

:class:`ToolSandbox` turns one server's spec into the command line, environment and working
directory the mcp SDK's stdio client starts (:class:`Launch`). A sandboxed server sees
(docs/tools.md):

* a read-only system: ``/usr`` (and the ``/bin``, ``/lib``… links into it), the few files of
  ``/etc`` a program needs (never all of ``/etc``: the daemon's own environment files live
  there), the prefix of the interpreter it runs with (a virtualenv, a Node install) and
  what ``sandbox.read`` names;
* its own writable directory ``<state>/tools/<agent>/<server>/`` (kept across restarts), as
  ``$HOME`` and working directory, and what ``sandbox.write`` names;
* a private ``/tmp`` and ``/dev/shm`` no larger than its memory limit, a minimal read-only
  ``/dev``, a read-only root, a fresh ``/proc`` in its own PID namespace (none
  of the daemon's processes), its own IPC and UTS namespaces, and with
  ``network: false`` its own network namespace (no network at all, the host's loopback
  included), and no user namespace of its own (a seccomp filter,
  :func:`no_user_namespaces_filter`);
* an environment of ``PATH``, ``HOME``, ``LANG``, ``TMPDIR`` and what ``env`` / ``env_from``
  name — passed through the process environment, never the command line, where every user
  of the machine could read a token.

When the daemon runs as root the server runs as ``sandbox.run_as`` (``nobody``): bubblewrap
builds the sandbox as root, then ``setpriv`` inside it drops to that user with no
capabilities, no supplementary groups and ``no_new_privs`` before the server starts. The
resource limits (``limits``: address space, processes, open files, file size) are set with
``prlimit`` around the whole chain, at niceness :data:`SERVER_NICENESS` (``nice``).
``nice``, ``prlimit``, ``bwrap`` and ``setpriv`` each ``exec`` the next program, so the
process the daemon starts (and stops) is the sandbox itself, and ``--die-with-parent``
takes the server with it if the daemon dies.

Where the sandbox cannot be created (no bubblewrap, user namespaces refused) the server is
not started: :class:`SandboxUnavailable` says why and names the fix.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import glob
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from companyd._frozen import Frozen
from companyd._fs import write_atomic
from companyd.config import CompanyConfig, McpServerSpec, SandboxSpec, ToolServerLimitsSpec
from companyd.errors import CompanydError

__all__ = [
    "SERVER_NICENESS",
    "Launch",
    "SandboxUnavailable",
    "ToolSandbox",
    "probe_sandbox",
    "server_dir",
    "tool_server_secrets",
]

#: System directories bound read-only (when they are directories) or recreated as the same
#: symlink (a merged /usr: /bin → usr/bin).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

#: The files of /etc a program needs: the dynamic linker's cache, TLS roots, name
#: resolution, users and groups (no passwords: those are in /etc/shadow), the time zone,
#: Debian's alternatives links, MIME types. Never all of /etc.
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/debian_version",
)
_ETC_GLOBS = ("/etc/python3*",)

#: The environment variables the mcp SDK adds from the daemon's own environment, which a
#: sandboxed server does not get (HOME and PATH are set to the sandbox's own).
_SDK_INHERITED = ("LOGNAME", "SHELL", "TERM", "USER")

_PATH = "/usr/local/bin:/usr/bin:/bin"


#: Where the seccomp program of the sandboxes is kept (in the state directory's ``tools/``).
_FILTER_NAME = "no-user-namespaces.bpf"

#: bwrap reads its seccomp program from this descriptor, which a shell opens for it: the
#: mcp SDK starts a server with every other descriptor closed.
_FILTER_FD = 9

#: (seccomp audit arch, unshare, clone, clone3) by machine.
_SYSCALLS = {
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}


def no_user_namespaces_filter(machine: str | None = None) -> bytes | None:
    """A seccomp program (classic BPF, as bwrap's ``--seccomp`` reads it) that refuses a new
    user namespace: ``unshare``/``clone`` with ``CLONE_NEWUSER`` fail with EPERM, ``clone3``
    (whose flags a filter cannot read) with ENOSYS — the C library then uses ``clone``
    — and so does every call of another ABI (32-bit, x32). None on a machine it does not
    know. In a user namespace of its own a server would be root again: it could mount a
    tmpfs no limit bounds and reach the kernel's whole namespace surface.
    """
    import platform
    import struct

    table = _SYSCALLS.get(machine or platform.machine())
    if table is None:
        return None
    arch, unshare, clone, clone3 = table
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|…|K, BPF_RET
    allow, nosys, perm = 0x7FFF0000, 0x50000 | errno.ENOSYS, 0x50000 | errno.EPERM
    program = [
        (ld, 0, 0, 4),  # 0: seccomp_data.arch
        (jeq, 1, 0, arch),  # 1: native → 3
        (ret, 0, 0, nosys),  # 2: another ABI
        (ld, 0, 0, 0),  # 3: seccomp_data.nr
        (jge, 0, 1, 0x40000000),  # 4: x32 → 5, else 6
        (ret, 0, 0, nosys),  # 5
        (jeq, 0, 1, clone3),  # 6: clone3 → 7, else 8
        (ret, 0, 0, nosys),  # 7
        (jeq, 1, 0, unshare),  # 8: unshare → 10, else 9
        (jeq, 0, 3, clone),  # 9: clone → 10, else 13
        (ld, 0, 0, 16),  # 10: the low half of args[0], the flags
        (jset, 0, 1, 0x10000000),  # 11: CLONE_NEWUSER → 12, else 13
        (ret, 0, 0, perm),  # 12
        (ret, 0, 0, allow),  # 13
    ]
    return b"".join(struct.pack("=HBBI", *insn) for insn in program)


class SandboxUnavailable(CompanydError):
    """The sandbox of a tool server cannot be created; the message names the fix."""


class Launch(Frozen):
    """What the stdio client starts: ``command args…`` with exactly ``env`` in ``cwd``."""

    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    sandboxed: bool
    #: the user the server runs as when the daemon is root (None: the daemon's)
    user: str | None = None


def server_dir(state_dir: Path, agent: str, server: str) -> Path:
    """The private, writable directory of ``server`` of ``agent``: its ``$HOME``."""
    return state_dir / "tools" / agent / server


def tool_server_secrets(
    config: CompanyConfig, state_dir: Path, environ: Mapping[str, str] | None = None
) -> list[Path]:
    """What no declared sandbox path may expose besides the state directory: company.yaml,
    the memory file (``memory.path`` may be elsewhere), each backup routine's ``to``, the
    systemd credentials and runtime directories (the control socket lives in the latter)
    and the daemon user's home directory.
    """
    env = os.environ if environ is None else environ
    out = [Path(config.path), config.memory_path(state_dir)]
    out += [r.backup.to for r in config.routines.values() if r.backup is not None]
    for var in ("CREDENTIALS_DIRECTORY", "RUNTIME_DIRECTORY"):
        out += [Path(d) for d in env.get(var, "").split(":") if d]
    with contextlib.suppress(KeyError, RuntimeError):
        out.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return out


def _which(program: str, path: str | None = None) -> str | None:
    found = shutil.which(program, path=path)
    return os.path.realpath(found) if found else None


def _is_under(path: str, parent: str) -> bool:
    p, q = os.path.normpath(path), os.path.normpath(parent)
    return p == q or p.startswith(q.rstrip("/") + "/")


def interpreter_prefixes(command: str) -> list[str]:
    """The directories a program needs read-only besides the system: for a command in a
    virtualenv (``<prefix>/bin/python`` with ``<prefix>/pyvenv.cfg``) that prefix and the
    base interpreter's prefix (``home`` in pyvenv.cfg) when it is not under ``/usr``; for
    a program outside the system directories, the prefix of its real file (the parent of
    its ``bin`` directory, else its directory).
    """
    out: list[str] = []

    def add(p: str) -> None:
        p = os.path.normpath(p)
        if not any(_is_under(p, s) for s in _SYSTEM) and p not in out and p != "/":
            out.append(p)

    as_given = Path(os.path.abspath(command))
    for candidate in (as_given, Path(os.path.realpath(command))):
        bindir = candidate.parent
        prefix = bindir.parent if bindir.name == "bin" else bindir
        cfg = prefix / "pyvenv.cfg"
        if cfg.is_file():
            add(str(prefix))
            for line in cfg.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and value.strip():
                    home = Path(value.strip())
                    add(str(home.parent if home.name == "bin" else home))
        elif candidate == Path(os.path.realpath(command)):
            add(str(prefix))
    return out


def _user_ids(name: str) -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise SandboxUnavailable(
            f"the sandbox user {name!r} (sandbox.run_as) does not exist on this machine; "
            "create it (`useradd --system --no-create-home NAME`) or name an existing "
            "unprivileged user"
        ) from None
    if entry.pw_uid == 0:
        raise SandboxUnavailable(
            f"sandbox.run_as is {name!r}, which is root; name an unprivileged user such as 'nobody'"
        )
    return entry.pw_uid, entry.pw_gid


def _limits_args(limits: ToolServerLimitsSpec) -> list[str]:
    args: list[str] = []
    if limits.memory_mb:
        args.append(f"--as={limits.memory_mb * 1024 * 1024}")
    if limits.processes:
        args.append(f"--nproc={limits.processes}")
    if limits.open_files:
        args.append(f"--nofile={limits.open_files}")
    if limits.file_mb:
        # RLIMIT_FSIZE: one file (a log never rotated, a download) cannot fill the state's
        # disk, where the server's own directory lives
        args.append(f"--fsize={limits.file_mb * 1024 * 1024}")
    return args


class ToolSandbox:
    """Launches the tool servers of one company.

    Args:
        state_dir: the daemon's state directory (the servers' own directories are under
            ``tools/``; nothing else of it is visible to a server).
        protected: files and directories no declared path may expose (company.yaml, the
            credentials directory, the daemon user's home…), or a function returning them,
            asked at each launch (so that they follow a reloaded company.yaml).
        environ: the daemon's environment (``env_from`` reads it).
        as_root: whether the daemon runs as root (then servers run as ``run_as``).
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        protected: Sequence[Path] | Callable[[], Sequence[Path]] = (),
        environ: Mapping[str, str] | None = None,
        as_root: bool | None = None,
    ) -> None:
        self.state_dir = Path(os.path.realpath(state_dir))
        self._protected = protected
        self._environ = environ if environ is not None else os.environ
        self._as_root = os.geteuid() == 0 if as_root is None else as_root
        self._probed: set[tuple[bool, bool]] = set()

    def _server_env(self, spec: McpServerSpec) -> dict[str, str]:
        env = dict(spec.env)
        for var, source in spec.env_from.items():
            value = self._environ.get(source)
            if value is not None:
                env[var] = value
        return env

    async def launch(self, agent: str, server: str, spec: McpServerSpec) -> Launch:
        """The launch of ``server`` of ``agent``: unsandboxed as before for
        ``sandbox: false``; else the sandbox, after checking it can be created (raises
        :class:`SandboxUnavailable` naming the fix) and creating the server's directory.
        A command that cannot be found raises :class:`FileNotFoundError`.
        """
        env = self._server_env(spec)
        if spec.sandbox is False:
            return Launch(
                command=spec.command, args=list(spec.args), env=env, cwd=None, sandboxed=False
            )
        await self._ensure_probed(spec.sandbox.network)
        return await asyncio.to_thread(self._build, agent, server, spec, spec.sandbox, env)

    def _build(
        self, agent: str, server: str, spec: McpServerSpec, box: SandboxSpec, env: dict[str, str]
    ) -> Launch:
        """The sandboxed launch (blocking: it looks at files and makes the directory)."""
        search = None if os.sep in spec.command else self._environ.get("PATH", _PATH)
        found = shutil.which(spec.command, path=search)
        if found is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), spec.command)
        # as found, not resolved: a virtualenv's python finds its pyvenv.cfg from its own path
        command = os.path.abspath(found)
        uid_gid = _user_ids(box.run_as) if self._as_root else None
        tools = _tool_paths(self._environ)
        home = server_dir(self.state_dir, agent, server)
        self._make_home(home, uid_gid)
        prefixes = interpreter_prefixes(command)
        self._refuse_exposure(server, box, prefixes)
        for kind, paths in (("read", box.read), ("write", box.write)):
            for p in paths:
                if not os.path.exists(p):
                    raise SandboxUnavailable(
                        f"sandbox.{kind} names {p!r}, which does not exist; create it or "
                        f"remove it from sandbox.{kind}"
                    )
        argv = _jail(
            bwrap=tools["bwrap"],
            home=str(home),
            prefixes=prefixes,
            box=box,
            as_root=self._as_root,
            tmpfs_mb=spec.limits.memory_mb,
        )
        if uid_gid is not None:
            uid, gid = uid_gid
            argv += [
                tools["setpriv"],
                f"--reuid={uid}",
                f"--regid={gid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ]
        argv += [command, *spec.args]
        limits = _limits_args(spec.limits)
        if limits:
            argv = [tools["prlimit"], *limits, "--", *argv]
        # A server that spins (a bug, a runaway loop) must not take the CPU from the daemon,
        # whose event loop answers the watchdog: on a busy machine the kernel gives a
        # process of nice 10 about a tenth of the time it gives the daemon.
        argv = [tools["nice"], "-n", str(SERVER_NICENESS), *argv]
        argv = self._with_filter(argv)
        bindir = os.path.dirname(command)
        path = _PATH if not prefixes else f"{bindir}:{_PATH}"
        full_env = {
            "PATH": path,
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            **env,
        }
        return Launch(
            command=argv[0],
            args=argv[1:],
            env=full_env,
            cwd=str(home),
            sandboxed=True,
            user=box.run_as if uid_gid is not None else None,
        )

    def _with_filter(self, argv: list[str]) -> list[str]:
        """``argv`` (prlimit… bwrap…) with bwrap's seccomp program refusing user
        namespaces: written once to the state directory's ``tools/`` (only the daemon's),
        opened for bwrap on :data:`_FILTER_FD` by a shell that then ``exec``s the chain.
        """
        program = no_user_namespaces_filter()
        if program is None:
            return argv
        path = self.state_dir / "tools" / _FILTER_NAME
        try:
            current = path.read_bytes()
        except FileNotFoundError:
            current = None
        if current != program:
            # Servers launch together (one thread each): a temporary name of its own per
            # write, or one launch's replace takes the file from under another's (ENOENT).
            write_atomic(path, program, sync_dir=False)
        at = argv.index("--die-with-parent")
        argv = [*argv[:at], "--seccomp", str(_FILTER_FD), *argv[at:]]
        return ["/bin/sh", "-c", f'exec "$@" {_FILTER_FD}<"$0"', str(path), *argv]

    def _make_home(self, home: Path, uid_gid: tuple[int, int] | None) -> None:
        # The parents stay the daemon's (0700 is fine: bubblewrap binds the path as root or
        # as the daemon's user); the directory itself belongs to the server's user.
        tools = self.state_dir / "tools"
        tools.mkdir(mode=0o700, exist_ok=True)
        home.parent.mkdir(mode=0o700, exist_ok=True)
        home.mkdir(mode=0o700, exist_ok=True)
        if uid_gid is not None:
            st = home.stat()
            if (st.st_uid, st.st_gid) != uid_gid:
                os.chown(home, *uid_gid)

    def _refuse_exposure(self, server: str, box: SandboxSpec, prefixes: Sequence[str]) -> None:
        """A declared (or interpreter) path that would show the state directory, or contain
        company.yaml, the credentials directory or the home directory, is refused.
        """
        state = str(self.state_dir)
        protected = self._protected() if callable(self._protected) else self._protected
        secrets = [os.path.realpath(p) for p in protected]
        for kind, paths in (("read", box.read), ("write", box.write), ("prefix", prefixes)):
            for p in paths:
                real = os.path.realpath(p)
                what = f"sandbox.{kind} path {p!r}" if kind != "prefix" else f"interpreter {p!r}"
                if _is_under(real, state) or _is_under(state, real):
                    raise SandboxUnavailable(
                        f"{what} would show the daemon's state directory ({state}) to tool "
                        f"server {server!r}; name a directory outside it"
                    )
                for secret in secrets:
                    if _is_under(secret, real):
                        raise SandboxUnavailable(
                            f"{what} would show {secret} to tool server {server!r}; name a "
                            "directory that does not contain it"
                        )

    async def _ensure_probed(self, network: bool) -> None:
        key = (self._as_root, network)
        if key in self._probed:
            return
        await asyncio.to_thread(
            probe_sandbox, as_root=self._as_root, network=network, environ=self._environ
        )
        self._probed.add(key)


#: The niceness a sandboxed tool server runs at (``nice -n``): below the daemon's.
SERVER_NICENESS = 10


def _tool_paths(environ: Mapping[str, str]) -> dict[str, str]:
    """bwrap, setpriv, prlimit and nice, found on the daemon's PATH."""
    path = environ.get("PATH") or _PATH
    found: dict[str, str] = {}
    for program, package in (
        ("bwrap", "bubblewrap"),
        ("setpriv", "util-linux"),
        ("prlimit", "util-linux"),
        ("nice", "coreutils"),
    ):
        where = _which(program, path)
        if where is None:
            raise SandboxUnavailable(
                f"the tool-server sandbox needs {program!r}, which is not installed; install "
                f"it (`apt-get install {package}`), or set `sandbox: false` on the server to "
                "run it unsandboxed, with the daemon's user and files (not recommended)"
            )
        found[program] = where
    return found


def _jail(
    *,
    bwrap: str,
    home: str | None,
    prefixes: Sequence[str],
    box: SandboxSpec,
    as_root: bool,
    tmpfs_mb: int = 0,
) -> list[str]:
    """The bubblewrap command line up to and including its ``--``.

    ``tmpfs_mb`` bounds each writable tmpfs (``/tmp``, ``/dev/shm``; 0: the kernel's
    default, half the RAM): their files are memory that RLIMIT_AS does not count.
    """
    argv = [bwrap]
    for d in _SYSTEM:
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    etc = list(_ETC) + sorted(p for g in _ETC_GLOBS for p in glob.glob(g))
    # bubblewrap would make /etc 0700 root's, as it makes every directory above a bind:
    # run_as (nobody) could then read none of these files (no CA certificates, no
    # resolv.conf, no openssl.cnf — Node exits at start). Make it 0755 first.
    argv += ["--perms", "0755", "--dir", "/etc"]
    for f in etc:
        argv += ["--ro-bind-try", f, f]
    # A tmpfs is RAM that the address-space limit does not count: bound /tmp and /dev/shm
    # by the server's memory limit. bwrap's /dev is a tmpfs too (its shm a directory in
    # it), writable in a user namespace: read-only (its devices still work).
    size = ["--size", str(tmpfs_mb * 1024 * 1024)] if tmpfs_mb else []
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += [*size, "--perms", "1777", "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += [*size, "--perms", "1777", "--tmpfs", "/tmp"]
    # The directories bubblewrap makes above a bind are 0700 root's: the server's user
    # (run_as) could not reach what is bound below them. Make them 0755 first.
    binds = [*prefixes, *box.read, *box.write, *([home] if home is not None else [])]
    made: list[str] = []
    for dest in binds:
        parts = Path(dest).parts
        for i in range(2, len(parts)):
            above = str(Path(*parts[:i]))
            mounted = ("/usr", "/proc", "/dev", *binds)
            if above == "/tmp" or above in made or any(_is_under(above, m) for m in mounted):
                continue
            made.append(above)
            argv += ["--perms", "0755", "--dir", above]
    for p in prefixes:
        argv += ["--ro-bind", p, p]
    for p in box.read:
        argv += ["--ro-bind", p, p]
    for p in box.write:
        argv += ["--bind", p, p]
    if home is not None:
        argv += ["--bind", home, home, "--chdir", home]
    # The sandbox's root is a tmpfs of bubblewrap's, writable by the server's user in a
    # user namespace (and unbounded): read-only once everything is mounted on it.
    argv += ["--remount-ro", "/"]
    if as_root:
        # Root builds the sandbox without a user namespace (its real uid must stay root so
        # that setpriv can then drop to run_as for real, not to a uid mapped back to root).
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if not box.network:
            argv.append("--unshare-net")
    else:
        argv.append("--unshare-all")
        if box.network:
            argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session"]
    for var in _SDK_INHERITED:
        argv += ["--unsetenv", var]
    argv.append("--")
    return argv


def probe_sandbox(
    *,
    as_root: bool | None = None,
    network: bool = False,
    timeout: float = 10.0,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Create a sandbox like a tool server's and run ``true`` in it; raises
    :class:`SandboxUnavailable` (naming the fix) if that fails. Blocking (a thread or the
    ``doctor``).
    """
    as_root = os.geteuid() == 0 if as_root is None else as_root
    tools = _tool_paths(os.environ if environ is None else environ)
    true = _which("true", _PATH) or "/bin/true"
    argv = _jail(
        bwrap=tools["bwrap"],
        home=None,
        prefixes=[],
        box=SandboxSpec(network=network),
        as_root=as_root,
    )
    if as_root:
        argv += [tools["setpriv"], "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    argv.append(true)
    program = no_user_namespaces_filter()
    fds: tuple[int, ...] = ()
    if program is not None:  # as a server gets it, from a pipe here
        read, write = os.pipe()
        os.write(write, program)
        os.close(write)
        fds = (read,)
        at = argv.index("--die-with-parent")
        argv[at:at] = ["--seccomp", str(read)]
    try:
        # Its own process group: where bubblewrap fails half-way (capset refused under a
        # unit's SystemCallFilter=, seen under systemd 252), it exits but the sandbox's init
        # it made waits forever, holding the pipes. At the timeout the group is killed,
        # that init too, or every retry would leave one behind (TasksMax= runs out).
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=fds,
            start_new_session=True,
        )
    except OSError as exc:
        raise SandboxUnavailable(
            f"bubblewrap ({tools['bwrap']}) could not be run: {exc.strerror or exc}; reinstall "
            "it (`apt-get install --reinstall bubblewrap`)"
        ) from None
    finally:
        for fd in fds:
            os.close(fd)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # bwrap is not reaped yet (a zombie at worst): its group id is still its own
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()  # the group is gone: its pipes are closed
        if proc.returncode == -signal.SIGKILL:  # bubblewrap itself did not finish
            raise SandboxUnavailable(
                f"creating a tool-server sandbox did not finish within {timeout:g} s "
                f"({tools['bwrap']})"
            ) from None
    if proc.returncode != 0:
        err = (stderr or "").strip().splitlines()
        detail = err[-1] if err else f"exit status {proc.returncode}"
        raise SandboxUnavailable(_refusal_fix(detail, os.environ if environ is None else environ))


def _refusal_fix(detail: str, environ: Mapping[str, str]) -> str:
    """Why bubblewrap could not build the sandbox, and what to do about it."""
    low = detail.lower()
    refused = "namespace" in low or "permission" in low or "operation not permitted" in low
    if environ.get("INVOCATION_ID"):
        # A systemd service: its unit, not the kernel, is the likely refusal — namespaces
        # (RestrictNamespaces=), capset or mount (SystemCallFilter=), the loopback's netlink
        # (RestrictAddressFamilies=) or /proc/sys (ProcSubset=), each seen under systemd.
        return (
            f"the tool-server sandbox cannot be created: {detail}. companyd runs as a "
            "systemd service whose unit forbids what bubblewrap needs — units installed by a "
            "companyd before the sandboxes did (RestrictNamespaces=yes, ProcSubset=pid): "
            "refresh the unit (`sudo companyd install-service`, then restart the service), "
            "or undo the drop-in that tightened it; `companyd doctor` names the directive "
            "(docs/tools.md, 'Under systemd'). Else set `sandbox: false` on the server to "
            "run it unsandboxed (not recommended)"
        )
    if refused:
        return (
            f"the tool-server sandbox cannot be created: {detail}. This kernel refuses "
            "unprivileged user namespaces: enable them (`sysctl -w "
            "kernel.unprivileged_userns_clone=1`, or on Ubuntu 24.04+ an AppArmor profile "
            "for bwrap / `kernel.apparmor_restrict_unprivileged_userns=0`), run the daemon as "
            "root (servers then run as sandbox.run_as), or set `sandbox: false` on the server "
            "to run it unsandboxed (not recommended)"
        )
    return (
        f"the tool-server sandbox cannot be created: {detail}; check that bubblewrap works "
        "(`bwrap --ro-bind / / true`), or set `sandbox: false` on the server to run it "
        "unsandboxed (not recommended)"
    )

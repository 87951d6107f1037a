"""A throwaway PostgreSQL cluster for tests and benchmarks: Debian's
PostgreSQL binaries, ``initdb`` into a temporary directory, a Unix socket in
that directory (no TCP port), trust authentication, torn down afterwards.

``initdb`` refuses to run as root, so as root the cluster runs as an
unprivileged system user (``agentik-pg``, created if missing). One source of
truth for ``.ci/run``, the pytest fixture and the benchmarks:

    python -m tests.pgcluster start DIR   # prints the DSN
    python -m tests.pgcluster stop DIR
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

USER = "agentik-pg"
DATABASE_USER = "agentik"
PORT = 5432
"""The socket's name (``.s.PGSQL.5432``); nothing listens on TCP."""


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


def _owner() -> str | None:
    """The OS user the cluster runs as: None for the current one, unless root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
            check=True,
        )
    return USER


def _run(args: list[str], owner: str | None) -> None:
    subprocess.run(
        args, check=True, user=owner, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/"
    )


def dsn(directory: Path, port: int = PORT) -> str:
    return f"postgresql://{DATABASE_USER}@/postgres?host={directory}&port={port}"


def start(
    directory: Path, *, fsync: bool = False, password: str | None = None, tcp_port: int = 0
) -> str:
    """Create and start a cluster under ``directory`` (which must exist and be
    empty, short enough for a socket path); return its DSN. ``fsync`` off
    (the default) for tests: a crash of the machine loses the throwaway
    cluster anyway; benchmarks turn it on to measure real commits.
    ``password``: the database user's, and SCRAM authentication instead of
    trust (the DSN returned has none). ``tcp_port``: listen on 127.0.0.1 there
    too (for what a Unix socket cannot show, such as TCP keepalives)."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL found under /usr/lib/postgresql/*/bin")
    owner = _owner()
    if owner is not None:
        shutil.chown(directory, owner)
    data = directory / "data"
    auth = ["--auth=trust"]
    if password is not None:
        secret = directory / "password"
        secret.write_text(password + "\n", encoding="utf-8")
        if owner is not None:
            shutil.chown(secret, owner)
        auth = ["--auth=scram-sha-256", f"--pwfile={secret}"]
    _run(
        [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            DATABASE_USER,
            *auth,
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        ],
        owner,
    )
    listen = "127.0.0.1" if tcp_port else ""
    options = (
        f"-k {directory} -c listen_addresses='{listen}' -p {tcp_port or PORT}"
        " -c max_connections=200"
        f" -c fsync={'on' if fsync else 'off'} -c full_page_writes={'on' if fsync else 'off'}"
    )
    _run(
        [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(directory / "log"),
            "-w",
            "-o",
            options,
            "start",
        ],
        owner,
    )
    return dsn(directory, tcp_port or PORT)


def stop(directory: Path) -> None:
    """Stop the cluster (immediately: it is thrown away) and remove its files."""
    bin_dir = binaries()
    data = directory / "data"
    if bin_dir is not None and (data / "postmaster.pid").exists():
        with contextlib.suppress(subprocess.CalledProcessError):
            _run(
                [str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                _owner(),
            )
    shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def cluster(
    *, fsync: bool = False, password: str | None = None, tcp_port: int = 0
) -> Iterator[str]:
    """A started cluster for the ``with`` block; yields its DSN."""
    directory = Path(tempfile.mkdtemp(prefix="agentik-pg-"))
    try:
        yield start(directory, fsync=fsync, password=password, tcp_port=tcp_port)
    finally:
        stop(directory)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.pgcluster start|stop DIR", file=sys.stderr)
        return 2
    directory = Path(argv[1])
    if argv[0] == "start":
        print(start(directory))
    else:
        stop(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

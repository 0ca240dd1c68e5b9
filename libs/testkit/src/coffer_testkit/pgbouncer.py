"""A real PgBouncer in transaction mode in front of the test PostgreSQL (Debian's ``pgbouncer``,
which ``make test`` installs): production's usual connection pooler, where a server connection
is one client's for one transaction only (docs/operations.md, "Behind PgBouncer")."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from coffer_testkit.testing import free_port

# Server connections PgBouncer opens to one database at most: the stacks' processes share
# them, a transaction at a time (their own pools hold client connections only).
SERVER_CONNECTIONS_PER_DATABASE = 4


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )


@dataclass(frozen=True)
class PgBouncer:
    host: str
    port: int
    log: Path

    def url_for(self, direct_url: str) -> str:
        """The same database as ``direct_url``, reached through this PgBouncer."""
        return make_url(direct_url).set(host=self.host, port=self.port).render_as_string(hide_password=False)


@contextmanager
def running_pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    """PgBouncer (pool_mode = transaction) on a free loopback port, for every database of the
    server at ``server_url``; stopped after."""
    binary = pgbouncer_binary()
    if binary is None:
        raise RuntimeError(
            "pgbouncer is not installed (make test installs Debian's: apt-get install pgbouncer)"
        )
    server = make_url(server_url)
    port = free_port()
    # Not under pytest's own temporary directory: PgBouncer refuses to run as root, and the
    # user it switches to must read its files.
    directory = Path(tempfile.mkdtemp(prefix="coffer-pgbouncer-"))
    user = server.username or "postgres"
    target = f"host={server.host or '127.0.0.1'} port={server.port or 5432} user={user}"
    if server.password:
        target += f" password={server.password}"
    (directory / "users.txt").write_text(f'"{user}" ""\n')
    (directory / "pgbouncer.ini").write_text(
        f"""[databases]
* = {target}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = transaction
max_client_conn = 2000
default_pool_size = {SERVER_CONNECTIONS_PER_DATABASE}
max_db_connections = {SERVER_CONNECTIONS_PER_DATABASE}
query_wait_timeout = 60
logfile = {directory / "pgbouncer.log"}
log_connections = 0
log_disconnections = 0
"""
    )
    command = [binary, str(directory / "pgbouncer.ini")]
    if os.geteuid() == 0:
        account = pwd.getpwnam("postgres")
        os.chown(directory, account.pw_uid, account.pw_gid)
        for path in directory.iterdir():
            os.chown(path, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", "postgres"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    bouncer = PgBouncer("127.0.0.1", port, directory / "pgbouncer.log")
    try:
        _wait_listening(bouncer, process)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _wait_listening(bouncer: PgBouncer, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace") if process.stderr else ""
            log = bouncer.log.read_text(errors="replace") if bouncer.log.exists() else ""
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {err}{log}")
        try:
            with socket.create_connection((bouncer.host, bouncer.port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"pgbouncer did not listen on {bouncer.port} within {timeout} s")

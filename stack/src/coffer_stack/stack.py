"""Start, watch and stop the four services as local processes (the embedded default); the
webhook dispatcher runs inside metadata's process there unless told to run apart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from coffer_kit import ports
from coffer_stack.process import Process, terminate_with_parent
from coffer_stack.zygote import Zygote

# (service, module, arguments) in start order: the data services before edge.
SERVICES: dict[str, list[str]] = {
    "auth": ["-m", "coffer_auth.cli", "serve"],
    "metadata": ["-m", "coffer_metadata.cli", "serve"],
    "blob": ["-m", "coffer_blob.cli", "serve", "--role", "all"],
    "edge": ["-m", "coffer_edge.cli", "serve"],
    # metadata's webhook dispatcher role (CONTRACT §11): delivers the outbox's events. Started
    # apart only by a stack with ``separate_dispatcher``; otherwise metadata's process runs it
    # (COFFER_METADATA_WEBHOOKS_IN_PROCESS), on the same port.
    "dispatcher": ["-m", "coffer_metadata.cli", "dispatch"],
}
# What a zygote for these services imports: each one's start, up to building its app.
SERVICE_IMPORTS = [
    "coffer_kit.serve",
    "coffer_kit.logs",
    *(
        f"coffer_{name}.{module}"
        for name in ("auth", "metadata", "blob", "edge")
        for module in ("cli", "main")
    ),
    "coffer_metadata.webhooks.dispatch.app",
]
MIGRATIONS = [["-m", "coffer_auth.cli", "migrate"], ["-m", "coffer_metadata.cli", "migrate"]]


@dataclass
class Ports:
    edge: int = ports.EDGE
    cdn: int = ports.CDN
    auth: int = ports.AUTH
    metadata: int = ports.METADATA
    blob: int = ports.BLOB
    edge_internal: int = ports.EDGE_INTERNAL
    dispatcher: int = ports.WEBHOOKS

    @classmethod
    def drawn(cls, port: Callable[[], int]) -> Ports:
        """Every port from ``port()`` (tests and benchmarks: ``free_port``)."""
        return cls(**{f.name: port() for f in fields(cls)})

    @classmethod
    def from_env(cls) -> Ports:
        """Defaults, overridden by ``COFFER_<SVC>_PORT`` (and ``COFFER_EDGE_INTERNAL_PORT``,
        ``COFFER_METADATA_DISPATCHER_PORT``)."""
        ports = cls()
        for name in ("edge", "cdn", "auth", "metadata", "blob", "edge_internal", "dispatcher"):
            variable = "METADATA_DISPATCHER" if name == "dispatcher" else name.upper()
            value = os.environ.get(f"COFFER_{variable}_PORT")
            if value:
                setattr(ports, name, int(value))
        return ports


@dataclass
class Stack:
    """The four services as child processes sharing one environment."""

    data_dir: Path
    ports: Ports = field(default_factory=Ports)
    host: str = "127.0.0.1"
    base_url: str | None = None
    cdn_url: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    # Fork the services from this zygote instead of starting interpreters, where the stack's
    # environment lets it (for a launcher that starts many stacks: coffer_stack.zygote).
    zygote: Zygote | None = None
    processes: dict[str, Process] = field(default_factory=dict)

    @property
    def edge_url(self) -> str:
        return f"http://{self.host}:{self.ports.edge}"

    @property
    def public_cdn_url(self) -> str:
        return self.cdn_url or f"http://{self.host}:{self.ports.cdn}"

    def url(self, service: str) -> str:
        port = {"cdn": self.ports.cdn, "edge_internal": self.ports.edge_internal}.get(
            service, getattr(self.ports, service, None)
        )
        return f"http://{self.host}:{port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "COFFER_DATA_DIR": str(self.data_dir),
                "COFFER_BASE_URL": self.base_url or self.edge_url,
                "COFFER_CDN_URL": self.public_cdn_url,
                "COFFER_AUTH_HOST": self.host,
                "COFFER_AUTH_PORT": str(self.ports.auth),
                "COFFER_METADATA_HOST": self.host,
                "COFFER_METADATA_PORT": str(self.ports.metadata),
                "COFFER_BLOB_HOST": self.host,
                "COFFER_BLOB_PORT": str(self.ports.blob),
                "COFFER_CDN_HOST": self.host,
                "COFFER_CDN_PORT": str(self.ports.cdn),
                "COFFER_EDGE_HOST": self.host,
                "COFFER_EDGE_PORT": str(self.ports.edge),
                "COFFER_EDGE_INTERNAL_PORT": str(self.ports.edge_internal),
                "COFFER_METADATA_DISPATCHER_PORT": str(self.ports.dispatcher),
                # The dispatcher inside metadata's process unless told otherwise (one process
                # fewer; production's chart runs it apart).
                "COFFER_METADATA_WEBHOOKS_IN_PROCESS": os.environ.get(
                    "COFFER_METADATA_WEBHOOKS_IN_PROCESS", "true"
                ),
                "COFFER_AUTH_URL": self.url("auth"),
                "COFFER_METADATA_URL": self.url("metadata"),
                "COFFER_BLOB_URL": self.url("blob"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def migrate(self) -> None:
        """Apply both databases' migrations before any service starts."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The two databases are independent: migrate them at once (each run is mostly imports).
        runs = [
            (args, subprocess.Popen([sys.executable, *args], env=self.env(), stdout=subprocess.DEVNULL))
            for args in MIGRATIONS
        ]
        for args, run in runs:
            if run.wait() != 0:
                raise subprocess.CalledProcessError(run.returncode, [sys.executable, *args])

    @property
    def dispatcher_in_metadata(self) -> bool:
        """Whether metadata's process runs the webhook dispatcher (no process of its own)."""
        flag = self.env()["COFFER_METADATA_WEBHOOKS_IN_PROCESS"]
        return flag.strip().lower() in ("1", "true", "yes", "on")

    def start(self, *services: str, timeout: float = 60) -> None:
        """Start the named services (all when none are named: the dispatcher too when it runs
        apart) and wait until they are healthy."""
        names = services or tuple(n for n in SERVICES if n != "dispatcher" or not self.dispatcher_in_metadata)
        for name in names:
            self.processes[name] = self._spawn(name)
        for name in names:
            self.wait(name, timeout=timeout)
        if not services and self.dispatcher_in_metadata:
            self.wait_url(self.url("dispatcher") + "/healthz", "metadata", timeout=timeout)

    def _spawn(self, name: str) -> Process:
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"{name}.log"
        env = self.env()
        if self.zygote is not None and self.zygote.forks(env):
            return self.zygote.spawn(SERVICES[name], env, log)
        out = open(log, "ab") if log else None  # noqa: SIM115 - owned by the child
        return subprocess.Popen(
            [sys.executable, *SERVICES[name]],
            env=env,
            preexec_fn=terminate_with_parent,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
        )

    def wait(self, name: str, *, timeout: float = 60) -> None:
        health = [self.url(name if name != "edge" else "edge") + "/healthz"]
        if name == "blob":
            health.append(self.url("cdn") + "/healthz")
        for url in health:
            self.wait_url(url, name, timeout=timeout)

    def wait_url(self, url: str, name: str, *, timeout: float = 60) -> None:
        """Until ``url`` answers healthy; fails at once if process ``name`` exits meanwhile."""
        proc = self.processes[name]
        deadline = time.monotonic() + timeout
        while not _healthy(url):
            if proc.poll() is not None:
                why = self._log_tail(name)
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting{why}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not become healthy in {timeout}s")
            time.sleep(0.05)

    def _log_tail(self, name: str, lines: int = 20) -> str:
        """The end of a service's log file, if it has one, to say why it stopped."""
        if self.log_dir is None or not (self.log_dir / f"{name}.log").exists():
            return ""
        tail = (self.log_dir / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
        return "; the end of its log:\n" + "\n".join(tail)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a service (SIGKILL by default) and reap it."""
        proc = self.processes.pop(name)
        proc.send_signal(sig)
        proc.wait(timeout=60)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM every child (edge first), then SIGKILL what is left after ``timeout``."""
        for name in reversed(list(self.processes)):
            if self.processes[name].poll() is None:
                self.processes[name].send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()

    def poll(self) -> str | None:
        """The name of a child that has exited, if any."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                return name
        return None


def _healthy(url: str) -> bool:
    """Whether ``url`` answers 200 now (a refused or slow connection is not healthy yet)."""
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False

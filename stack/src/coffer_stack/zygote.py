"""Service processes forked from one that has imported them already: for a launcher that
starts many stacks (the end-to-end tests start about 45). A new interpreter spends 1-2 s of
CPU importing a service before it serves; a fork of the zygote, about 0.3 s building its app.

The zygote (``python -m coffer_stack.zygote MODULE...``) imports the modules, then reads one
request per line on stdin (a JSON ``{"argv", "env", "log"}``) and forks a child that runs
``MODULE.main(argv)`` as ``python -m MODULE ARGV...`` would, with exactly that environment
and its output in ``log``. It answers each request with the child's pid, and reports each
child's exit status when it reaps it, on stdout, one JSON line each. Closing its stdin, or
its launcher's death, ends it, and its children get SIGTERM.

What the interpreter or a module decides at start from the environment is the zygote's, not
the child's: the ``PYTHON*`` variables (a ``PYTHONPATH`` with a ``sitecustomize``, say) and
prometheus-client's ``PROMETHEUS_MULTIPROC_DIR``. :meth:`Zygote.forks` says whether an
environment agrees with the zygote's on them; a launcher starts the others apart.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from coffer_stack.process import terminate_with_parent

# Settings read when the interpreter starts or imports (besides PYTHON*); PYTHONUNBUFFERED
# the child applies itself.
IMPORT_TIME_SETTINGS = {"PROMETHEUS_MULTIPROC_DIR"}
APPLIED_IN_THE_CHILD = {"PYTHONUNBUFFERED"}
# How often the zygote reaps its children (it waits on its stdin meanwhile).
REAP_SECONDS = 0.05


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    """What of ``env`` an interpreter reads as it starts or imports (the child applies the rest)."""
    return {
        name: value
        for name, value in env.items()
        if (name.startswith("PYTHON") or name in IMPORT_TIME_SETTINGS) and name not in APPLIED_IN_THE_CHILD
    }


class Forked:
    """A child of the zygote, with the part of ``subprocess.Popen`` a stack uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited = threading.Event()

    def _exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        # The zygote reports an exit as it reaps the child: the pid is not another process's
        # before then (and the kernel hands a pid out again only after many others).
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The launcher's side: starts the zygote, asks it for children, follows their exits."""

    def __init__(self, modules: list[str]) -> None:
        self._read_at_start = _read_at_start(os.environ)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "coffer_stack.zygote", *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=terminate_with_parent,
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._requests: IO[bytes] = self._process.stdin
        self._children: dict[int, Forked] = {}
        self._born: list[Forked] = []  # children forked, not yet handed to spawn's caller
        self._answered = threading.Condition()
        self._lock = threading.Lock()
        threading.Thread(target=self._follow, args=(self._process.stdout,), daemon=True).start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def _follow(self, replies: IO[bytes]) -> None:
        for line in replies:
            reply = json.loads(line)
            with self._answered:
                if "pid" in reply:
                    self._children[reply["pid"]] = child = Forked(reply["pid"])
                    self._born.append(child)
                else:
                    self._children.pop(reply["exited"])._exit(reply["code"])
                self._answered.notify_all()
        with self._answered:  # the zygote is gone, and its children with it
            for child in self._children.values():
                child._exit(-signal.SIGTERM)
            self._children.clear()
            self._answered.notify_all()

    def forks(self, env: dict[str, str]) -> bool:
        """Whether a child with ``env`` would be what a new interpreter with it would be: it
        agrees with the environment the zygote started with on what is read at start."""
        return _read_at_start(env) == self._read_at_start

    def spawn(self, args: list[str], env: dict[str, str], log: Path | None) -> Forked:
        """Start ``python ARGS`` (``-m MODULE ...``, MODULE one the zygote imported) as a fork."""
        if args[0] != "-m":
            raise ValueError(f"the zygote runs modules (-m MODULE ...), not {args}")
        if not self.forks(env):
            raise ValueError("this environment changes what the zygote read at its start: start it apart")
        request = {"module": args[1], "argv": args[2:], "env": env, "log": str(log) if log else None}
        with self._lock, self._answered:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            if not self._answered.wait_for(lambda: self._born or self._process.poll() is not None, 60):
                raise TimeoutError("the zygote did not answer in 60 s")
            if not self._born:
                raise RuntimeError(f"the zygote exited with {self._process.returncode}")
            return self._born.pop(0)

    def close(self) -> None:
        """End the zygote (its children get SIGTERM: stop them first)."""
        self._requests.close()
        self._process.wait(timeout=30)


# The zygote's side ------------------------------------------------------------------------


def _reply(message: dict[str, Any]) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def _reap(children: set[int]) -> None:
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        children.discard(pid)
        _reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _child(request: dict[str, Any]) -> int:
    """In the fork: become ``python -m MODULE ARGV`` with the request's environment and output."""
    terminate_with_parent()
    os.environ.clear()
    os.environ.update(request["env"])
    random.seed()  # not the zygote's sequence, shared by every child
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    if request["log"]:
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    else:
        out = os.dup(2)
    os.dup2(out, 1)  # not the zygote's replies
    os.dup2(out, 2)
    os.close(out)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    module = request["module"]
    sys.argv = [module, *request["argv"]]
    try:
        return int(importlib.import_module(module).main(request["argv"]) or 0)
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)


def main(modules: list[str]) -> int:
    for module in modules:
        importlib.import_module(module)
    if threading.active_count() != 1:
        raise RuntimeError("importing started a thread: forking this process is not safe")
    terminate_with_parent()
    children: set[int] = set()
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], REAP_SECONDS)
        _reap(children)
        if not readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # the launcher closed us: so do the children (SIGTERM, from their parent)
            return 0
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                # The child leaves the loop: its interpreter then exits as the service's would.
                return _child(json.loads(line))
            children.add(pid)
            _reply({"pid": pid})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Load from separate processes: wrk (C, from Debian) and bench/client.py (large transfers),
with the client's own CPU and every server process's CPU measured over the same window."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")

WRK_SCRIPT = """\
wrk.method = "{method}"
{headers}
{body}
{request}
{delay}
function done(summary, latency, requests)
  local f = assert(io.open("{out}", "w"))
  local e = summary.errors
  f:write(string.format(
    '{{"duration_us": %d, "requests": %d, "bytes": %d, "connect": %d, "read": %d, "write": %d, ' ..
    '"status": %d, "timeout": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "max_us": %d}}',
    summary.duration, summary.requests, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
  f:close()
end
"""


def _lua_string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a valid Lua string literal for ASCII


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of these processes and their direct children, from /proc."""
    total = 0
    wanted = set(pids)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[1] is ppid; utime and stime are the 14th and 15th fields of stat.
        if int(entry) in wanted or int(fields[1]) in wanted:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as fh:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fh.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICK


def _process_table() -> dict[int, tuple[int, int]]:
    """Every process: its parent, and its utime + stime + cutime + cstime (reaped children
    included) in clock ticks, from /proc."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    return stats


def _tree(stats: dict[int, tuple[int, int]], roots: set[int]) -> set[int]:
    """``roots`` that are running, and every process below them."""
    tree = roots & stats.keys()
    changed = True
    while changed:
        changed = False
        for pid, (ppid, _) in stats.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                changed = True
    return tree


# Processes a run uses without having started them: --production adds the machine's
# PostgreSQL (its postmaster), whose backends serve the stack's connections. Their CPU, and
# that of every process below them, reaped ones included, is the run's, not another job's.
USED_SERVERS: set[int] = set()


def own_cpu_seconds() -> float:
    """CPU seconds of this process and every process it started, running or reaped, and of
    the servers in ``USED_SERVERS`` and every process below them."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    stats = _process_table()
    counted = (_tree(stats, {os.getpid()}) - {os.getpid()}) | _tree(stats, set(USED_SERVERS))
    return total + sum(stats[pid][1] for pid in counted) / TICK


class OthersMeter:
    """Cores used by processes this run did not start or use (another job on a shared machine)."""

    def __init__(self) -> None:
        self.machine, self.own, self.wall = machine_busy_seconds(), own_cpu_seconds(), time.perf_counter()

    def cores(self) -> float:
        machine, own = machine_busy_seconds() - self.machine, own_cpu_seconds() - self.own
        return max(0.0, machine - own) / max(time.perf_counter() - self.wall, 1e-6)


def add_warm_memory(parser: argparse.ArgumentParser) -> None:
    """The ``--warm-memory GIB`` option, for :func:`back_free_memory`."""
    parser.add_argument(
        "--warm-memory",
        type=float,
        default=8.0,
        metavar="GIB",
        help="GiB written and freed first, so free pages are backed (load.back_free_memory; 0: none)",
    )


def back_free_memory(gib: float) -> str:
    """Write ``gib`` GiB (at most half of what is available) in a child process, then free it.

    A virtual machine whose host has taken its free pages back (a balloon's free page
    reporting) pays a fault to the host the first time it uses each of them again, about 2.5
    ms of CPU per MB here. A server writing through the page cache takes such pages, so its
    uploads ran at half speed on a freshly booted machine (Directus 221-275 MB/s at 3.8-4.9
    ms of CPU a MB, then 357-419 at 2.2-2.7 once 8 GiB had been written and freed), while
    Coffer's direct writes did not change (docs/performance.md#this-machine-memory-noise-and-swings).
    Done once before measuring,
    so every side starts with pages the host backs, as on a physical machine. Returns what
    was done, for the report's method line.
    """
    if gib <= 0:
        return "free memory not warmed first"
    with open("/proc/meminfo") as fh:
        available = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    size = min(int(gib * 2**30), available // 2)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"bytearray(b'\\x01') * {size}"], check=True)
    seconds = time.perf_counter() - started
    return f"{size / 2**30:.1f} GiB written and freed first, so free pages are backed ({seconds:.0f}s)"


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# Start-up garbage settled, and a few seconds without a request: each service returns its free
# heap pages once it has been idle for a second (coffer_kit.serve).
IDLE_SECONDS = 3.0


def idle_rss_mib(pids: dict[str, int]) -> dict[str, float]:
    """VmRSS in MiB of each process, read now: call it after ``IDLE_SECONDS`` without requests."""
    return {name: rss_bytes(pid) / 2**20 for name, pid in pids.items()}


class RssSampler:
    """Samples VmRSS of some processes every few milliseconds; keeps the baseline and the peak."""

    def __init__(self, pids: dict[str, int], interval: float = 0.005) -> None:
        self.pids, self.interval = pids, interval
        self.baseline = {name: rss_bytes(pid) for name, pid in pids.items()}
        self.peak = dict(self.baseline)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_bytes(pid))
            time.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self) -> dict[str, int]:
        return {name: self.peak[name] - self.baseline[name] for name in self.pids}


@dataclass
class Sample:
    """One repetition's numbers."""

    rate: float  # req/s, files/s or MB/s, as the figure says
    p50_ms: float | None = None
    p99_ms: float | None = None
    client_cpu: float = 0.0  # cores the client used, on average (1.0 = one core busy)
    server_cpu: dict[str, float] = field(default_factory=dict)  # cores per server process
    errors: int = 0
    requests: int = 0
    others_cpu: float = 0.0  # cores used meanwhile by processes this run did not start
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Wrk:
    binary: str
    workdir: Path
    threads: int = 1

    def run(
        self,
        url: str,
        *,
        connections: int,
        seconds: float,
        servers: dict[str, list[int]],
        headers: dict[str, str] | None = None,
        method: str = "GET",
        body_file: Path | None = None,
        unique_path: str | None = None,
        unit_bytes: bool = False,
        pause_ms: int | None = None,
    ) -> Sample:
        """One wrk run. ``unique_path``: a path prefix made unique per request (for PUT);
        ``pause_ms``: each connection waits about this long after an answer before its next
        request (an even load below what the server can take, instead of as much as it can)."""
        tag = secrets.token_hex(4)
        out = self.workdir / f"wrk-{tag}.json"
        lines = [f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in (headers or {}).items()]
        body = ""
        if body_file is not None:
            body = (
                f'do local f = assert(io.open("{body_file}", "rb")); wrk.body = f:read("*a"); f:close() end'
            )
        request = ""
        if unique_path is not None:
            request = (
                f"local n = 0\nfunction request()\n  n = n + 1\n"
                f'  return wrk.format(nil, "{unique_path}{tag}-" .. n .. ".bin")\nend'
            )
        # Drawn evenly from 0 to twice the pause: connections that started together drift apart
        # instead of sending in bursts.
        delay = (
            f"function delay()\n  return math.random(0, {2 * int(pause_ms)})\nend"
            if pause_ms is not None
            else ""
        )
        script = self.workdir / f"wrk-{tag}.lua"
        script.write_text(
            WRK_SCRIPT.format(
                method=method, headers="\n".join(lines), body=body, request=request, delay=delay, out=out
            )
        )
        cmd = [
            self.binary,
            f"-t{self.threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "60s",
            "-s",
            str(script),
            url,
        ]
        before = {name: cpu_seconds(pids) for name, pids in servers.items()}
        others = OthersMeter()
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
        after = {name: cpu_seconds(pids) for name, pids in servers.items()}
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"wrk failed ({proc.returncode}): {stderr.decode()} {stdout.decode()}")
        r = json.loads(out.read_text())
        seconds_run = r["duration_us"] / 1e6
        errors = r["connect"] + r["read"] + r["write"] + r["status"] + r["timeout"]
        rate = r["bytes"] / seconds_run / 1e6 if unit_bytes else r["requests"] / seconds_run
        done = r["requests"] > 0
        return Sample(
            rate=rate,
            p50_ms=r["p50_us"] / 1000 if done else None,
            p99_ms=r["p99_us"] / 1000 if done else None,
            client_cpu=(usage.ru_utime + usage.ru_stime) / wall,
            server_cpu={name: (after[name] - before[name]) / wall for name in servers},
            errors=errors,
            requests=r["requests"],
            others_cpu=others.cores(),
            extra={"non_2xx_3xx": r["status"]},
        )


def python_client(
    job: dict[str, Any], *, servers: dict[str, list[int]]
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run bench/client.py once: its result, and the servers' CPU (cores) over its uploads.

    The servers are idle while the client starts, so their CPU seconds over the whole run divided
    by the client's own upload window is the load they carried during it.
    """
    before = {name: cpu_seconds(pids) for name, pids in servers.items()}
    others = OthersMeter()
    proc = subprocess.run(
        [sys.executable, str(BENCH / "client.py"), json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = {name: cpu_seconds(pids) for name, pids in servers.items()}
    if proc.returncode != 0:
        raise RuntimeError(f"upload client failed: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    result["others_cpu"] = others.cores()
    wall = max(result["wall"], 1e-6)
    return result, {name: (after[name] - before[name]) / wall for name in servers}

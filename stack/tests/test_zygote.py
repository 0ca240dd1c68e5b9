"""The zygote forks each child as ``python -m MODULE ARGV`` would start it: its arguments, its
environment alone, its output in its log, its exit status; none outlives the zygote."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coffer_stack.zygote import Forked, Zygote

pytestmark = pytest.mark.e2e  # it starts processes


@pytest.fixture
def zygote(monkeypatch: pytest.MonkeyPatch) -> Iterator[Zygote]:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    zygote = Zygote(["zygote_child"])
    yield zygote
    zygote.close()


def env(**values: str) -> dict[str, str]:
    """The test's interpreter settings (PYTHONPATH), as a stack's environment carries them."""
    return {**{k: v for k, v in os.environ.items() if k.startswith("PYTHON")}, **values}


def said(log: Path) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while not log.exists() or not log.read_text():
        assert time.monotonic() < deadline, "the child wrote nothing"
        time.sleep(0.02)
    return json.loads(log.read_text().splitlines()[0])  # type: ignore[no-any-return]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_gets_its_arguments_environment_and_log_and_reports_its_exit(
    zygote: Zygote, tmp_path: Path
) -> None:
    log = tmp_path / "child.log"
    child = zygote.spawn(["-m", "zygote_child", "exit", "3"], env(ZYGOTE_TEST_VALUE="mine"), log)
    assert child.wait(timeout=30) == 3
    assert said(log) == {"argv": ["exit", "3"], "sys.argv": ["zygote_child", "exit", "3"], "value": "mine"}
    raised = zygote.spawn(["-m", "zygote_child", "raise", "4"], env(), tmp_path / "raised.log")
    assert raised.wait(timeout=30) == 4
    assert said(tmp_path / "raised.log")["value"] is None  # the launcher's environment is not inherited


def test_signals_reach_the_child_and_its_death_is_reported(zygote: Zygote, tmp_path: Path) -> None:
    children = [zygote.spawn(["-m", "zygote_child", "wait"], env(), tmp_path / f"{n}.log") for n in range(2)]
    for n, child in enumerate(children):
        said(tmp_path / f"{n}.log")
        assert child.poll() is None
    children[0].send_signal(signal.SIGTERM)
    children[1].kill()
    assert [c.wait(timeout=30) for c in children] == [-signal.SIGTERM, -signal.SIGKILL]
    children[1].kill()  # a reported child is not signalled again (its pid may be another's)


def test_no_child_outlives_the_zygote(zygote: Zygote, tmp_path: Path) -> None:
    child: Forked = zygote.spawn(["-m", "zygote_child", "wait"], env(), tmp_path / "child.log")
    said(tmp_path / "child.log")
    os.kill(zygote.pid, signal.SIGKILL)  # however the zygote dies
    assert child.wait(timeout=30) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while not gone(child.pid):
        assert time.monotonic() < deadline, "the child outlived its zygote"
        time.sleep(0.02)


def test_it_refuses_what_the_interpreter_and_imports_have_read(
    zygote: Zygote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert zygote.forks(env(PYTHONUNBUFFERED="1", COFFER_ANYTHING="x"))
    for setting in ("PROMETHEUS_MULTIPROC_DIR", "PYTHONPATH", "PYTHONMALLOC"):
        other = env(**{setting: str(tmp_path)})
        assert not zygote.forks(other)
        with pytest.raises(ValueError, match="start it apart"):
            zygote.spawn(["-m", "zygote_child", "exit", "0"], other, None)
    # What counts is the environment the zygote started with, not the launcher's now.
    monkeypatch.setenv("PYTHONMALLOC", "malloc")
    assert not zygote.forks(env())

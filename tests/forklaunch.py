"""``python launch.py ...`` as a real process, without paying its imports each time (tests only).

A launch spends about 8 of its first 10 seconds importing torch, torchvision, timm, Lightning and
Hydra; the tests make over a hundred launches. :func:`run` hands each launch to a server process
(one per pytest worker and environment) that imported all of that once and forks: the child sets
the launch's working directory, environment and ``sys.argv``, sends its stdout and stderr to files,
and runs ``launch.py`` as ``__main__``, as ``python launch.py`` would. Each launch is still its own
process, started from a clean import state (no launch ever ran in the server): its exit code (the
negative signal number when a signal ended it), its output, what it writes, its signals and its
children are its own. :func:`run` answers like ``subprocess.run(..., capture_output=True, text=True)``.

What this does not cover: a fresh interpreter's imports themselves (``tests/test_layout.py`` checks
that the entry point starts without torch), what a launch shares with the server (the hash seed,
import-time state: ``run(..., fresh=True)`` is a new interpreter, and tests/test_resume.py compares a
forked run with a fresh one) and launches a test starts in the background (those keep ``subprocess.Popen``).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = str(ROOT / "launch.py")
# What launch.py and a rejected or tiny run import (the server imports them once, before any fork).
PRELOAD = ("hydra", "omegaconf", "torch", "torchvision", "timm", "lightning", "plasticity", "plasticity.cli",
           "plasticity.job", "plasticity.models", "plasticity.measure", "plasticity.validate", "plasticity.recipes")

_servers: dict[tuple, subprocess.Popen] = {}
_lock = threading.Lock()


# Read at run time, not at import (a launch gets its own values all the same): not part of a server's key.
RUN_TIME_ONLY = ("PYTEST_CURRENT_TEST", "MASTER_PORT")
MAX_SERVERS = 2  # per pytest worker (each holds about 1 GB); the least recently used one is stopped


def _server(env: dict[str, str]) -> subprocess.Popen:
    key = tuple(sorted((k, v) for k, v in env.items() if k not in RUN_TIME_ONLY))
    proc = _servers.pop(key, None)
    if proc is None or proc.poll() is not None:
        while len(_servers) >= MAX_SERVERS:
            _end(_servers.pop(next(iter(_servers))))
        proc = subprocess.Popen([sys.executable, "-m", "tests.forklaunch"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
    _servers[key] = proc  # last: the most recently used
    return proc


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def run(cmd: list[str], cwd, env: dict[str, str], timeout: float = 600,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`` for
    ``cmd = [sys.executable, <launch.py>, *args]``, forked from the server; ``fresh=True``: that
    very call, a new interpreter (what the fork cannot show: hash seeds, import-time state, startup)."""
    assert cmd[0] == sys.executable and cmd[1] == LAUNCH, cmd
    if fresh:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with _lock, tempfile.TemporaryDirectory(prefix="forklaunch-") as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        server = _server(dict(env))
        server.stdin.write(json.dumps({"argv": cmd[1:], "cwd": str(cwd), "env": dict(env), "out": str(out),
                                       "err": str(err), "timeout": timeout}) + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
        if not line:
            raise RuntimeError("the launch server ended (see the worker's stderr)")
        answer = json.loads(line)
        stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if answer.get("timed_out"):
            raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(cmd, answer["returncode"], stdout, stderr)


@atexit.register
def _stop() -> None:
    for proc in _servers.values():
        _end(proc)


# ---------------------------------------------------------------------------------- the server


_SERVER_TEMP_DIRS: list = []


def _fresh_process_state() -> None:
    """What a new interpreter would not share with the server or with the other launches."""
    for tmp in _SERVER_TEMP_DIRS:
        # Made at import in the server; a launch's normal exit removes it (its finalizer), as in a new
        # interpreter, so each launch makes it again, empty (launches of one server never overlap).
        os.makedirs(tmp.name, exist_ok=True)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()  # seeded from the OS at import in a new interpreter (random reseeds itself at fork)


def _child(request: dict) -> None:
    """In the forked child: become ``python launch.py <args>`` and never return."""
    try:
        os.setpgid(0, 0)  # its own process group: a timeout kills it and what it started
        _fresh_process_state()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        sys.path[0] = str(ROOT)  # as for ``python launch.py``: the script's folder first
        import atexit
        import runpy

        # Exit handlers run last registered first: this one after every handler the launch registers.
        atexit.register(_end_as_cpython)

        runpy.run_path(LAUNCH, run_name="__main__")
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        _INTERRUPTED.append(True)
        raise SystemExit(1) from None  # the code never shows: _end_as_cpython ends the process first
    # The end, a SystemExit or an uncaught exception leave through the interpreter's own exit, as in
    # ``python launch.py``: its traceback and code, then atexit handlers, finalizers and flushed streams.
    raise SystemExit(0)


_INTERRUPTED: list[bool] = []


def _end_as_cpython() -> None:
    """CPython's end for an uncaught KeyboardInterrupt: the exit handlers, then death by SIGINT (exit
    code -2, what a shell reads as 130). The handlers the server registered at import would run after
    this one: logging's (flush and close the log files) is run here."""
    if not _INTERRUPTED:
        return
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _serve() -> None:
    # A launch imports Lightning once Hydra has configured logging: Lightning then leaves its loggers
    # to the root logger's handlers (with none there, it adds its own). The same here.
    import logging

    placeholder = logging.NullHandler()
    logging.root.addHandler(placeholder)
    for name in PRELOAD:
        __import__(name)
    logging.root.removeHandler(placeholder)
    import gc
    import tempfile

    # Folders some imports make (W&B's media and artifact folders): each launch gets its own, as a
    # new interpreter would, and removes it when it ends (never the server's).
    _SERVER_TEMP_DIRS.extend(o for o in gc.get_objects() if isinstance(o, tempfile.TemporaryDirectory))
    protocol = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        protocol.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        answer: dict = {}
        try:
            _, status = _wait(pid, request["timeout"])
            answer["returncode"] = os.waitstatus_to_exitcode(status)
        except TimeoutError:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            answer["timed_out"] = True
        protocol.write(json.dumps(answer) + "\n")
        protocol.flush()


def _wait(pid: int, timeout: float) -> tuple[int, int]:
    import time

    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return done, status
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.01)


if __name__ == "__main__":
    _serve()

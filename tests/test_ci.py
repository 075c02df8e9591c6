"""CI cannot skip what it promises: a pytest session under ``CI`` fails when a test skipped, naming it and
why; elsewhere it passes with one line saying what was not checked (tests/conftest.py's hooks, run in a
real pytest process on a test file written here, once on one process and once on 2 xdist workers)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = '''
import pytest

def test_runs():
    assert True

@pytest.fixture(scope="module")
def cluster():
    pytest.skip("needs root")

def test_needs_root(cluster):
    pass

def test_also_needs_root(cluster):
    pass
'''


def session(tmp_path: Path, ci: bool, *args: str, tests: str = TESTS, prefix: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess:
    """pytest on ``tests`` (one passing and two skipping tests), with this suite's conftest as a plugin."""
    (tmp_path / "test_promises.py").write_text(tests)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(ROOT)} | ({"CI": "1"} if ci else {})
    return subprocess.run([*prefix, sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                           *args, str(tmp_path / "test_promises.py")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_under_ci_a_skipped_test_fails_the_session_naming_it_and_why(tmp_path, workers):
    proc = session(tmp_path, True, *workers)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout[-3000:]
    assert "1 passed, 2 skipped" in proc.stdout
    assert "CI: 2 test(s) skipped, and under CI no test may skip (failing):" in proc.stdout
    assert "test_promises.py::test_needs_root: needs root" in proc.stdout
    assert "test_promises.py::test_also_needs_root: needs root" in proc.stdout
    assert "not checked here" not in proc.stdout


def test_without_ci_skips_pass_with_one_line_of_what_was_not_checked(tmp_path):
    proc = session(tmp_path, False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("not checked here: ")]
    assert lines == ["not checked here: 2 tests (needs root)"]
    assert "CI:" not in proc.stdout


def test_under_ci_a_session_without_skips_passes(tmp_path):
    proc = session(tmp_path, True, tests="def test_runs():\n    assert True\n")
    assert proc.returncode == 0 and "1 passed" in proc.stdout and "CI:" not in proc.stdout, proc.stdout[-3000:]


def test_in_a_user_namespace_the_mounting_tests_skip_saying_why_and_ci_fails(tmp_path):
    """The acceptance's case: root inside ``unshare -U -r``, where mounting is refused (the full-disk and
    read-only tests take conftest's ``mounting``)."""
    proc = session(tmp_path, True, tests="def test_mounts(mounting):\n    pass\n", prefix=("unshare", "-U", "-r"))
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "test_promises.py::test_mounts: mount refused though root (a user namespace" in proc.stdout
    assert "run as root on the host to include it" in proc.stdout

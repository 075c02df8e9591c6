"""Test setup: one thread (2 shared cores), offline hub and W&B, tiny random-init models; under CI
(``CI`` set: ``.ci/run``) a skipped test fails the session, elsewhere one line says what was not checked."""

import os
import signal
import subprocess
import tempfile
from collections import Counter

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"

import pytest  # noqa: E402
import torch  # noqa: E402

import plasticity  # noqa: E402,F401  (registers vit_micro_patch7_28)
from tests.slurm_cluster import slurm_cluster  # noqa: E402,F401  (the session's one-node SLURM, tests/slurm_cluster.py)

torch.set_num_threads(1)
# A shell's background job (`make test &`) starts with Ctrl-C ignored, and its launches would inherit that:
# CPython's own handler, so the Ctrl-C tests' launches get SIGINT as a terminal's Ctrl-C delivers it.
signal.signal(signal.SIGINT, signal.default_int_handler)


# The longest files, longest first (measured: make test on the 2-core machine). ``make test`` runs each
# file on one worker (``--dist loadfile``); started last, a file of several minutes sets the wall time.
# test_slurm.py owns the session's one-node SLURM (fixed ports): it must stay one file on one worker.
SLOW_FIRST = ("test_slurm.py", "test_ddp.py", "test_text_e2e.py", "test_launch.py", "test_trust.py", "test_wandb.py",
              "test_validate_options.py", "test_config.py", "test_threads.py", "test_resume.py", "test_dashboard.py",
              "test_text_models.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` sends the files in collection order (see below), not sorted by test count."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


def slow_first(item) -> int:
    name = item.path.name
    return SLOW_FIRST.index(name) if name in SLOW_FIRST else len(SLOW_FIRST)


def pytest_collection_modifyitems(config, items):
    """The slow files first (each file's tests keep their order); a bare ``pytest`` on a machine without
    CUDA skips the ``gpu`` tests (``make test-gpu`` runs them)."""
    items.sort(key=slow_first)  # stable
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda.is_available() is False here; run make test-gpu on a "
                                   "GPU machine")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


def skip_reason(report) -> str:
    """A skipped test's reason (pytest's ``(file, line, "Skipped: reason")``)."""
    return str(report.longrepr[2]).removeprefix("Skipped: ")


SKIPPED: dict[str, str] = {}
"""The session's skipped tests: node id -> reason."""


def pytest_runtest_logreport(report):
    """Keeps each skipped test (in the controller, xdist's workers' reports included)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        SKIPPED[report.nodeid] = skip_reason(report)


def pytest_sessionfinish(session, exitstatus):
    """Under CI a skipped test fails the session: what CI promises was not checked (GPU tests are
    deselected there, ``-m "not gpu"``, not skipped)."""
    if os.environ.get("CI") and SKIPPED and not hasattr(session.config, "workerinput") \
            and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    """Under CI, each skipped test and why; elsewhere one line: what was not checked and how to check it."""
    if not SKIPPED:
        return
    write = terminalreporter.write_line
    if os.environ.get("CI"):
        write(f"CI: {len(SKIPPED)} test(s) skipped, and under CI no test may skip (failing):", red=True, bold=True)
        for nodeid, reason in SKIPPED.items():
            write(f"  {nodeid}: {reason}", red=True)
        return
    reasons = Counter(SKIPPED.values())
    write("not checked here: " + "; ".join(f"{n} test{'s' * (n > 1)} ({reason})" for reason, n in reasons.items()),
          yellow=True, bold=True)


def mount_refused() -> str | None:
    """Why this process cannot mount (None: it can), found by mounting a small tmpfs."""
    if os.geteuid() != 0:
        return "mounting needs root (not root here); run as root to include it"
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder], capture_output=True,
                              text=True)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[0].rstrip(".")  # then a dmesg hint
            return (f"mount refused though root (a user namespace or an unprivileged container): {first}; "
                    "run as root on the host to include it")
        subprocess.run(["umount", folder], check=True)
    return None


@pytest.fixture(scope="session")
def mounting():
    """For a test that mounts (a full tmpfs, a read-only bind): skips it, saying why, where mounting is refused."""
    reason = mount_refused()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Fashion-MNIST in its real idx format, 200 train and 100 test images, one copy per test module
    (a module that needs other sizes defines its own ``data_dir``)."""
    from tests.fixtures import write_fashion_mnist

    return write_fashion_mnist(tmp_path_factory.mktemp("data"), n_train=200, n_test=100)


@pytest.fixture
def micro_vit():
    """A random-init 2-block ViT for 28x28 images (the quickstart's architecture, shallower)."""
    from plasticity.models import create_model

    torch.manual_seed(0)
    return create_model("vit_micro_patch7_28", num_classes=10, depth=2)

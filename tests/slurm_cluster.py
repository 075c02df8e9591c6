"""A real one-node SLURM cluster for the tests, with job accounting (the ``slurm_cluster`` fixture).

Started once per test session, as child processes of the test process: munged (as the munge user;
an already working munged is reused), MariaDB (a data directory under the temp dir, on loopback),
slurmdbd, slurmctld and slurmd (one node with this machine's CPUs, a ``debug`` partition, every
state, spool, log and pid file under the temp dir). ``sacct`` answers from the real accounting
database, so submitit sees true job states. At the end every job is cancelled and every daemon
started here is stopped by its PID (also when a test failed), and ports 6817-6819 are free again.

It needs root and the Debian packages ``make slurm`` installs (``slurmctld slurmd slurm-client munge
slurmdbd mariadb-server``); without them the SLURM tests skip, naming the reason and the fix.
Measured here (2 shared cores): about 8 s from nothing to an idle node with accounting.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server")
BINARIES = ("munged", "munge", "unmunge", "mariadb-install-db", "mariadbd", "mariadb", "slurmdbd", "slurmctld",
            "slurmd", "sacctmgr", "sbatch", "sacct", "squeue", "scontrol", "scancel", "sinfo")
PORTS = {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819}
MUNGE_RUN = Path("/run/munge")  # compiled into libmunge: the one path outside the temp dir
MUNGE_KEY = Path("/etc/munge/munge.key")
CLUSTER = "plasticity"
PARTITION = "debug"
START_TIMEOUT_S = 60
LIVE_STATES = {"PENDING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING",
               "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT"}


def which(name: str) -> str | None:
    """A binary on PATH or in the sbin folders (root's daemons live there)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def port_in_use(port: int) -> bool:
    """Something listens on (or holds) ``port`` on this machine."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unavailable() -> str | None:
    """Why a cluster cannot start here (None: it can)."""
    if os.geteuid() != 0:
        return ("the SLURM tests start munged, slurmd and slurmctld and need root (CI runs them as root); "
                "run pytest as root to include them")
    if Path("/proc/self/uid_map").read_text().split() != ["0", "0", "4294967295"]:
        return ("root only inside a user namespace (unshare -U -r, a rootless container): the SLURM daemons need "
                "the host's root; run pytest as root outside it to include them")
    missing = [name for name in BINARIES if which(name) is None]
    if missing:
        return (f"SLURM is not installed ({', '.join(missing)} missing). Fix: make slurm (as root: apt-get install "
                f"--no-install-recommends {' '.join(PACKAGES)})")
    busy = [f"{port} ({name})" for name, port in PORTS.items() if port_in_use(port)]
    if busy:
        return f"port {', '.join(busy)} already in use: another SLURM runs here; stop it to run these tests"
    return None


def wait_for(check, what: str, timeout: float = START_TIMEOUT_S, logs: tuple[Path, ...] = ()) -> None:
    """Polls ``check()`` until true; a timeout names ``what`` and the end of the logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    tails = "\n".join(f"--- {p}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
                      for p in logs if p.is_file())
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s\n{tails}")


@dataclass
class Cluster:
    """One SLURM node with accounting, every file under ``root``.

    Attributes:
        root: The cluster's temp dir (config, state, spool, logs, database).
        conf: Its ``slurm.conf`` (export ``SLURM_CONF`` to use it: :meth:`env`).
        timings: Seconds each start phase took (``munge``, ``mariadb``, ``slurmdbd``, ``cluster``,
            ``slurm``, ``total``).
    """

    root: Path
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    db_port: int = field(default_factory=free_port)
    timings: dict[str, float] = field(default_factory=dict)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment pointed at the cluster (no SLURM variables of an outer job)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return {**env, "SLURM_CONF": str(self.conf), **extra}

    def run(self, *cmd: str, check: bool = True) -> str:
        """Runs a SLURM client command against the cluster; returns its stdout."""
        proc = subprocess.run([which(cmd[0]) or cmd[0], *cmd[1:]], env=self.env(), capture_output=True, text=True,
                              timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    # ------------------------------------------------------------------------------ start

    def start(self) -> None:
        """Starts munge, MariaDB, slurmdbd, slurmctld and slurmd; returns once the node is idle."""
        started = time.perf_counter()
        for phase in (self._munge, self._mariadb, self._slurmdbd, self._register, self._slurm):
            t0 = time.perf_counter()
            phase()
            self.timings[phase.__name__.lstrip("_")] = round(time.perf_counter() - t0, 2)
        self.timings["total"] = round(time.perf_counter() - started, 2)

    def _spawn(self, name: str, cmd: list[str], **kwargs) -> None:
        log = open(self.root / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, **kwargs)
        log.close()

    def _alive(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            out = (self.root / f"{name}.out").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {proc.returncode} at start:\n{out}")

    @staticmethod
    def _munge_works() -> bool:
        munge = subprocess.run([which("munge"), "-n"], capture_output=True, timeout=10)
        if munge.returncode != 0:
            return False
        return subprocess.run([which("unmunge")], input=munge.stdout, capture_output=True, timeout=10).returncode == 0

    def _munge(self) -> None:
        if self._munge_works():  # a munged of the machine: used, never stopped
            return
        user = pwd.getpwnam("munge")
        if not MUNGE_KEY.is_file():
            subprocess.run([which("mungekey"), "--create", f"--keyfile={MUNGE_KEY}"], check=True, capture_output=True)
            os.chown(MUNGE_KEY, user.pw_uid, user.pw_gid)
            MUNGE_KEY.chmod(0o400)
        MUNGE_RUN.mkdir(parents=True, exist_ok=True)
        os.chown(MUNGE_RUN, user.pw_uid, user.pw_gid)
        MUNGE_RUN.chmod(0o755)
        self._spawn("munged", [which("munged"), "--foreground"], user="munge", group="munge", extra_groups=[])
        wait_for(self._munge_works, "munged", logs=(self.root / "munged.out", Path("/var/log/munge/munged.log")))

    def _mariadb(self) -> None:
        data = self.root / "mariadb"
        subprocess.run([which("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                        "--auth-root-authentication-method=normal", "--skip-test-db", "--innodb-log-file-size=4M",
                        "--innodb-buffer-pool-size=16M"], check=True, capture_output=True, timeout=120)
        self._spawn("mariadbd", [which("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root",
                                 f"--socket={self.root / 'mariadb.sock'}", f"--port={self.db_port}",
                                 "--bind-address=127.0.0.1", f"--pid-file={self.root / 'mariadb.pid'}",
                                 f"--log-error={self.root / 'mariadb.log'}", "--innodb-buffer-pool-size=16M",
                                 "--innodb-log-file-size=4M", "--skip-name-resolve"])

        def ready() -> bool:
            self._alive("mariadbd")
            return subprocess.run([which("mariadb"), "--no-defaults", "-h127.0.0.1", f"-P{self.db_port}", "-uroot",
                                   "-e", "CREATE DATABASE IF NOT EXISTS slurm_acct_db"],
                                  capture_output=True, timeout=10).returncode == 0

        wait_for(ready, "MariaDB", logs=(self.root / "mariadb.log",))

    def _slurmdbd(self) -> None:
        dbd = self.root / "slurmdbd.conf"  # slurmdbd reads it beside SLURM_CONF
        dbd.write_text("\n".join([
            "AuthType=auth/munge", "DbdHost=localhost", "DbdAddr=127.0.0.1", f"DbdPort={PORTS['slurmdbd']}",
            "SlurmUser=root", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={self.db_port}", "StorageUser=root", "StorageLoc=slurm_acct_db",
            f"PidFile={self.root / 'slurmdbd.pid'}", f"LogFile={self.root / 'slurmdbd.log'}", ""]))
        dbd.chmod(0o600)
        self.conf.write_text(self._slurm_conf())
        self._spawn("slurmdbd", [which("slurmdbd"), "-D"], env=self.env())

        def listening() -> bool:
            self._alive("slurmdbd")
            return port_in_use(PORTS["slurmdbd"])

        wait_for(listening, "slurmdbd", logs=(self.root / "slurmdbd.log",))

    def _register(self) -> None:
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER)

    def _slurm(self) -> None:
        self._spawn("slurmctld", [which("slurmctld"), "-D", "-i"], env=self.env())
        self._spawn("slurmd", [which("slurmd"), "-D", "-N", self.host], env=self.env())

        def idle() -> bool:
            self._alive("slurmctld")
            self._alive("slurmd")
            return self.run("sinfo", "-h", "-N", "-o", "%t", check=False).strip() == "idle"

        wait_for(idle, "the SLURM node", logs=(self.root / "slurmctld.log", self.root / "slurmd.log"))
        self.run("sacct", "-n", "-X")  # accounting answers

    def _slurm_conf(self) -> str:
        memory_mib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
        state = self.root / "state"
        state.mkdir(exist_ok=True)
        return "\n".join([
            f"ClusterName={CLUSTER}", f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={PORTS['slurmctld']}", f"SlurmdPort={PORTS['slurmd']}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            "AuthInfo=cred_expire=5",  # a requeued job starts again about 6 s later (default: 2 minutes)
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",  # memory is not a consumable here
            "SchedulerParameters=sched_interval=1", "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to squeue and scontrol
            "KillWait=15",  # SIGTERM to SIGKILL on scancel and requeue: room for a loaded machine to record the stop
            f"StateSaveLocation={state}", f"SlurmdSpoolDir={self.root / 'spool'}",
            f"SlurmctldPidFile={self.root / 'slurmctld.pid'}", f"SlurmdPidFile={self.root / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.root / 'slurmctld.log'}", f"SlurmdLogFile={self.root / 'slurmd.log'}",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={PORTS['slurmdbd']}", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} RealMemory={memory_mib * 9 // 10} "
            "State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP", ""])

    # ------------------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Cancels every job, then stops each daemon started here by its PID; waits for the ports."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--user", pwd.getpwuid(os.getuid()).pw_name, check=False)
            try:
                wait_for(lambda: not self.run("squeue", "-h", "-t", "RUNNING,COMPLETING", check=False).strip(),
                         "the end of the cancelled jobs", timeout=30)
            except RuntimeError:
                pass  # the daemons are stopped all the same
        for name in ("slurmd", "slurmctld", "slurmdbd", "mariadbd", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        wait_for(lambda: not any(port_in_use(p) for p in PORTS.values()), "free SLURM ports", timeout=30)

    # ------------------------------------------------------------------------------ queries

    def job_ids(self) -> set[str]:
        """Every job id the accounting database knows (array tasks as ``<id>_<task>``)."""
        out = self.run("sacct", "-n", "-X", "-P", "-a", "-S", "2000-01-01", "-o", "JobID")
        return {line.strip() for line in out.splitlines() if line.strip()}

    def accounting(self, job: str, timeout_s: float = 60) -> list[dict[str, str]]:
        """sacct's rows of ``job`` (every requeued part with ``-D``) once all of them have ended.

        A job's result file is written before its process exits, and slurmctld hands the end to
        slurmdbd after that: a sweep can finish while sacct still says RUNNING. This waits (up to
        ``timeout_s``) until no row is in a live state, then returns JobID, State, Start, End, ExitCode.
        """
        keys = ("JobID", "JobIDRaw", "State", "Start", "End", "ExitCode")
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.run("sacct", "-n", "-X", "-P", "-D", "-j", job, "-o", ",".join(keys))
            rows = [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]
            if (rows and not any(row["State"].split()[0] in LIVE_STATES for row in rows)) \
                    or time.monotonic() > deadline:
                return rows
            time.sleep(0.5)

    def queued(self) -> str:
        """squeue's pending and running jobs (empty when none)."""
        return self.run("squeue", "-h", "-t", "PENDING,RUNNING,COMPLETING,REQUEUED", "-o", "%i %T").strip()

    def wait_idle(self, timeout_s: float = 60) -> str:
        """Waits until no job is queued or running (a finished sweep's jobs may still be exiting)."""
        deadline = time.monotonic() + timeout_s
        while (queued := self.queued()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return queued

    def show(self, job: str) -> str:
        return self.run("scontrol", "show", "job", job)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running one-node SLURM cluster with accounting (skips where it cannot run, naming why)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

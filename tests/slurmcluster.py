"""A one-node SLURM cluster in a temporary folder, for tests and by hand.

Why a real scheduler: `estratos slurm` writes job scripts chained by ``afterok`` dependencies
and reads the array variables SLURM sets; only ``slurmctld`` + ``slurmd`` prove that the
scripts, the dependencies and a resubmitted array task really work. Debian's ``slurm-wlm``
and ``munge`` packages are enough (root, no cgroups): ``munged`` with its own key and socket,
a ``slurm.conf`` with ``proctrack/linuxproc`` and ``task/none``, state/spool/log/pid files
under the folder, one node named after this host with all its CPUs, one default partition,
and ports nobody listens on. Clients find it through ``SLURM_CONF`` (``LocalSlurm.env``).

By hand::

    python tests/slurmcluster.py start /tmp/slurm   # prints the `export SLURM_CONF=...` line
    python tests/slurmcluster.py stop /tmp/slurm

Not a test module: test modules import :class:`LocalSlurm` (and :func:`missing_binaries`).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

#: the programs the cluster needs, all from Debian's slurm-wlm and munge packages
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "scancel")
DAEMONS = ("munged", "slurmctld", "slurmd")  # started in this order, stopped in reverse
PARTITION = "estratos"


def missing_binaries() -> List[str]:
    """The programs of :data:`BINARIES` not found on PATH (nor in /usr/sbin)."""
    return [b for b in BINARIES if _which(b) is None]


def _which(name: str) -> Optional[str]:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _free_ports(n: int) -> List[int]:
    """Ports the kernel just handed out (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _real_memory_mb() -> int:
    """A little under the machine's memory: slurmd drains a node that claims more than it has."""
    with open("/proc/meminfo", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return max(1, int(line.split()[1]) // 1024 * 9 // 10)
    return 1024


def slurm_conf(root: Path, node: str, cpus: int, memory_mb: int, ports: List[int]) -> str:
    """The cluster's slurm.conf: everything the daemons write lives under ``root``."""
    return "\n".join([
        "ClusterName=estratos-test",
        f"SlurmctldHost={node}(127.0.0.1)",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "SchedulerParameters=sched_interval=1",
        "MinJobAge=600",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=2",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class LocalSlurm:
    """munged + slurmctld + slurmd for one node, all files under ``root``.

    ``start()`` returns once ``sinfo`` shows the node idle; ``stop()`` cancels the jobs left
    and ends the three daemons by their pids. ``env`` is what clients (sbatch, squeue...) need.
    """

    def __init__(self, root: os.PathLike | str) -> None:
        self.root = Path(root).resolve()
        self.conf = self.root / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        self.procs: Dict[str, subprocess.Popen] = {}

    @property
    def env(self) -> Dict[str, str]:
        """The caller's environment plus ``SLURM_CONF`` (and the sbin folder on PATH)."""
        env = dict(os.environ, SLURM_CONF=str(self.conf))
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/sbin"
        return env

    def _write_files(self) -> None:
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(self.root / sub, 0o700)  # munged refuses group/other-writable folders
        os.chmod(self.root, 0o755)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o600)
        ports = _free_ports(2)
        self.conf.write_text(slurm_conf(self.root, self.node, os.cpu_count() or 1,
                                        _real_memory_mb(), ports), encoding="utf-8")

    def _spawn(self, name: str, args: List[str]) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "ab")
        self.procs[name] = subprocess.Popen([_which(name) or name] + args, stdout=log,
                                            stderr=subprocess.STDOUT, env=self.env,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        (self.root / f"{name}.daemon-pid").write_text(f"{self.procs[name].pid}\n")

    def start(self, timeout: float = 60.0) -> "LocalSlurm":
        missing = missing_binaries()
        if missing:
            raise RuntimeError(f"not installed: {', '.join(missing)} "
                               "(apt-get install slurm-wlm munge)")
        self._write_files()
        m = self.root / "munge"
        self._spawn("munged", ["--foreground", "--force", f"--key-file={m / 'munge.key'}",
                               f"--socket={m / 'munge.socket'}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}",
                               f"--seed-file={m / 'munged.seed'}"])
        self._wait(lambda: (m / "munge.socket").exists(), timeout, "munged's socket")
        self._spawn("slurmctld", ["-D", "-c", "-f", str(self.conf)])
        self._wait(lambda: self._run("scontrol", "ping").returncode == 0, timeout, "slurmctld")
        self._spawn("slurmd", ["-D", "-f", str(self.conf), "-N", self.node])
        self._wait(self._node_idle, timeout, f"node {self.node} idle in sinfo")
        return self

    def _node_idle(self) -> bool:
        out = self._run("sinfo", "--noheader", "--nodes", self.node, "--format=%t")
        return out.returncode == 0 and out.stdout.strip() == "idle"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([_which(args[0]) or args[0], *args[1:]], env=self.env,
                              capture_output=True, text=True, timeout=30)

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}:\n{self.logs()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}:\n{self.logs()}")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """A client command (sbatch, squeue, scontrol...) against this cluster."""
        done = self._run(*args)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
        return done

    def job_states(self, job_ids: List[str]) -> Dict[str, Tuple[str, str]]:
        """``{job or array task id: (state, reason)}`` from ``squeue --states=all``."""
        out = self.run("squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}",
                       "--format=%i|%T|%r").stdout
        states = {}
        for line in out.splitlines():
            job, state, reason = line.strip().split("|")
            states[job] = (state, reason)
        return states

    def wait_for(self, job_ids: List[str], done, timeout: float = 240.0) -> Dict[str, Tuple[str, str]]:
        """Poll :meth:`job_states` until ``done(states)`` is true (``done`` may raise to fail
        early); on timeout the message has the last states and the daemon logs."""
        deadline = time.monotonic() + timeout
        states: Dict[str, Tuple[str, str]] = {}
        while time.monotonic() < deadline:
            states = self.job_states(job_ids)
            if done(states):
                return states
            time.sleep(1.0)
        raise AssertionError(f"jobs {job_ids} not done after {timeout:.0f}s: {states}\n"
                             f"{self.logs()}")

    def logs(self, tail: int = 20) -> str:
        """The last lines of every daemon log (for failure messages)."""
        parts = []
        for path in sorted((self.root / "log").glob("*")):
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-tail:]
            parts.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel the jobs left, then end slurmd, slurmctld and munged by their pids."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._run("scancel", f"--partition={PARTITION}")
        for name in reversed(DAEMONS):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            _stop_pid(proc.pid, lambda p=proc: p.poll() is not None)
            proc.wait(timeout=5)

    def __enter__(self) -> "LocalSlurm":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_pid(pid: int, gone, grace: float = 10.0) -> None:
    """SIGTERM ``pid``, then SIGKILL if it is still there after ``grace`` seconds."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _stop_folder(root: Path) -> None:
    """``stop`` for a cluster started by another process: the pids it recorded."""
    for name in reversed(DAEMONS):
        pid_file = root / f"{name}.daemon-pid"
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text().strip())

        def gone(pid=pid) -> bool:
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                return True
        _stop_pid(pid, gone)
        pid_file.unlink()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop"])
    parser.add_argument("folder", help="where the cluster's files live (created by start)")
    args = parser.parse_args(argv)
    root = Path(args.folder).resolve()
    if args.action == "stop":
        _stop_folder(root)
        print(f"stopped the cluster in {root}")
        return 0
    cluster = LocalSlurm(root)
    try:
        cluster.start()
    except RuntimeError as exc:
        cluster.stop()
        print(exc, file=sys.stderr)
        return 1
    # the daemons outlive this process (own sessions); `stop` ends them by pid
    cluster.procs.clear()
    print(f"export SLURM_CONF={cluster.conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

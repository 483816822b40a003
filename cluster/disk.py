"""The disk-full fault. ``kafkasim up --log-dir-size-mib N`` mounts a size-limited tmpfs on each broker's log
directory before the broker starts; ``kafkasim fill BROKER`` writes a filler file into it until the disk is
full, so the broker's next append, roll or checkpoint fails with ENOSPC as on a real full disk (the broker
then takes its log directory offline and halts, as Kafka 2.x does); ``--free`` deletes the filler again.

A log directory that is a normal folder cannot be filled without filling the whole machine, hence the mount.
Every mount is named ``kafkasim-logs-<data dir digest>-broker-<id>`` (the tmpfs "device", first column of
/proc/self/mounts) and recorded in cluster.json, so `kafkasim down`, a later `up` after a crash and the tests'
finalizers find and unmount exactly the mounts kafkasim made. Pure parts first, then the few calls that mount,
unmount and write.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cluster.processes import ClusterError, ClusterLayout, ClusterSpec, broker_properties
from traces.faults import TOOLS_TRACE_FILE, record_fault

MOUNT_PREFIX = "kafkasim-logs-"
# not a <topic>-<partition> name, and a file: the broker's log loader passes it by
FILLER_FILE = "kafkasim-filler"
FILL_CHUNK_BYTES = 1 << 20
MOUNTS_FILE = Path("/proc/self/mounts")

Say = Callable[[str], None]


# --- pure ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogDirMount:
    """One tmpfs kafkasim mounted on a broker's log directory, as cluster.json records it."""

    broker_id: int
    name: str
    mount_point: str
    size_mib: int

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict) -> LogDirMount:
        return cls(int(raw["broker_id"]), str(raw["name"]), str(raw["mount_point"]), int(raw["size_mib"]))


@dataclass(frozen=True)
class MountEntry:
    source: str
    mount_point: str
    fstype: str


def cluster_mount_prefix(data_dir: Path) -> str:
    """What every mount of the cluster in ``data_dir`` is named with: two clusters never share a name."""
    return f"{MOUNT_PREFIX}{hashlib.sha256(str(data_dir).encode()).hexdigest()[:10]}-"


def mount_name(data_dir: Path, broker_id: int) -> str:
    return f"{cluster_mount_prefix(data_dir)}broker-{broker_id}"


def _unescape(field: str) -> str:
    # the kernel writes space, tab, newline and backslash in mount fields as octal escapes (\040 ...)
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def parse_mounts(text: str) -> list[MountEntry]:
    """The entries of /proc/self/mounts (fstab format: source, mount point, type, options, 0, 0)."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            entries.append(MountEntry(_unescape(fields[0]), _unescape(fields[1]), fields[2]))
    return entries


def mounts_named(entries: list[MountEntry], prefix: str) -> list[MountEntry]:
    """kafkasim's tmpfs mounts whose name starts with ``prefix``, deepest mount point first (the order to
    unmount them in)."""
    found = [e for e in entries if e.fstype == "tmpfs" and e.source.startswith(prefix)]
    return sorted(found, key=lambda e: e.mount_point.count("/"), reverse=True)


def tmpfs_mount_command(name: str, mount_point: Path, size_mib: int) -> list[str]:
    return ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755", name, str(mount_point)]


def broker_log_dir(spec: ClusterSpec, broker_id: int, layout: ClusterLayout) -> Path:
    """The one log directory a broker of this cluster writes to (its ``log.dirs``, overrides included)."""
    log_dirs = broker_properties(spec, spec.broker(broker_id), layout)["log.dirs"]
    dirs = [d.strip() for d in log_dirs.split(",") if d.strip()]
    if len(dirs) != 1:
        raise ClusterError(f"--log-dir-size-mib mounts one tmpfs per broker, but log.dirs names {len(dirs)} "
                           f"directories ({log_dirs}); drop the log.dirs override")
    return Path(dirs[0])


def recorded_mounts(spec: ClusterSpec) -> list[LogDirMount]:
    return [LogDirMount.from_json(raw) for raw in spec.log_dir_mounts]


def require_root(option: str = "--log-dir-size-mib") -> None:
    if os.geteuid() != 0:
        raise ClusterError(f"{option} mounts a tmpfs on each broker's log directory, which only root may do; run "
                           "kafkasim as root (e.g. in a container or VM of your own), or leave the option out")


# --- mounting --------------------------------------------------------------------------------------------


def current_mounts() -> list[MountEntry]:
    return parse_mounts(MOUNTS_FILE.read_text())


def is_mounted(mount: LogDirMount) -> bool:
    return any(e.source == mount.name and e.mount_point == mount.mount_point for e in current_mounts())


def mount_log_dir(data_dir: Path, broker_id: int, log_dir: Path, size_mib: int) -> LogDirMount:
    require_root()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_dir = log_dir.resolve()
    if any(e.mount_point == str(log_dir) for e in current_mounts()):
        raise ClusterError(f"{log_dir} is a mount point already; `kafkasim down` the cluster that uses it, or use "
                           "another --data-dir")
    if any(log_dir.iterdir()):
        raise ClusterError(f"{log_dir} holds broker {broker_id}'s logs; a tmpfs mounted on it would hide them. Use "
                           "a new --data-dir for a cluster with size-limited log directories")
    mount = LogDirMount(broker_id, mount_name(data_dir, broker_id), str(log_dir), size_mib)
    done = subprocess.run(tmpfs_mount_command(mount.name, log_dir, size_mib), capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"cannot mount a {size_mib} MiB tmpfs on {log_dir}: {done.stderr.strip()}")
    return mount


def _umount(mount_point: str) -> str | None:
    """None once unmounted, else why not. A mount still busy (a process left in it) is detached lazily: the
    kernel frees it when the last user goes, and it is gone from the mount table at once."""
    done = subprocess.run(["umount", mount_point], capture_output=True, text=True)
    if done.returncode == 0:
        return None
    lazy = subprocess.run(["umount", "--lazy", mount_point], capture_output=True, text=True)
    return None if lazy.returncode == 0 else (lazy.stderr or done.stderr).strip()


def unmount_log_dirs(mounts: list[LogDirMount], say: Say = print) -> None:
    """Unmount those of ``mounts`` still mounted (their data goes with them, as a tmpfs's does)."""
    mounted = {(e.source, e.mount_point) for e in current_mounts()}
    for mount in mounts:
        if (mount.name, mount.mount_point) not in mounted:
            continue
        problem = _umount(mount.mount_point)
        if problem is None:
            say(f"unmounted {mount.name} from {mount.mount_point}")
        else:
            raise ClusterError(f"cannot unmount {mount.name} from {mount.mount_point}: {problem}")


def unmount_named(prefix: str) -> list[str]:
    """Unmount every kafkasim tmpfs whose name starts with ``prefix`` (cleanup that needs no cluster.json).
    Returns the mount points unmounted."""
    done = []
    for entry in mounts_named(current_mounts(), prefix):
        if _umount(entry.mount_point) is None:
            done.append(entry.mount_point)
    return done


# --- the fault -------------------------------------------------------------------------------------------


def fill_until_full(directory: Path) -> int:
    """Append to the filler file until the file system says ENOSPC. Returns the bytes written."""
    chunk = b"\0" * FILL_CHUNK_BYTES
    written = 0
    fd = os.open(directory / FILLER_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                # a short write means the last pages are taken; the next write raises ENOSPC
                written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return written
    finally:
        os.close(fd)


def remove_filler(directory: Path) -> int:
    """Delete the filler file; returns its size (0 when there was none)."""
    path = directory / FILLER_FILE
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    path.unlink()
    return size


def _broker_mount(data_dir: Path, broker_id: int) -> LogDirMount:
    spec = ClusterLayout(data_dir).load()
    spec.broker(broker_id)
    for mount in recorded_mounts(spec):
        if mount.broker_id == broker_id:
            if not is_mounted(mount):
                raise ClusterError(f"the tmpfs {mount.name} is no longer mounted on {mount.mount_point}; "
                                   "`kafkasim down`, then `kafkasim up --log-dir-size-mib N` again")
            return mount
    raise ClusterError(f"broker {broker_id}'s log directory is a normal folder, which cannot be filled without "
                       "filling the whole disk; start the cluster with `kafkasim up --log-dir-size-mib N`")


def fill(data_dir: Path, broker_id: int, say: Say = print) -> int:
    """The disk-full fault on one broker. Returns the filler's size."""
    mount = _broker_mount(data_dir, broker_id)
    directory = Path(mount.mount_point)
    # recorded first, so the fault precedes every effect it has in the brokers' traces
    record_fault(data_dir / TOOLS_TRACE_FILE, "disk-full", f"broker {broker_id} log dir {directory}",
                 broker_id=broker_id, detail=f"{FILLER_FILE} in a {mount.size_mib} MiB tmpfs")
    written = fill_until_full(directory)
    left = shutil.disk_usage(directory).free
    say(f"filled the log directory of broker {broker_id} ({directory}, {mount.size_mib} MiB): {FILLER_FILE} took "
        f"{written / (1 << 20):.1f} MiB more, {left} bytes are left; `kafkasim fill {broker_id} --free` frees it")
    return written


def free(data_dir: Path, broker_id: int, say: Say = print) -> int:
    """Undo :func:`fill`. Returns the bytes freed."""
    mount = _broker_mount(data_dir, broker_id)
    directory = Path(mount.mount_point)
    freed = remove_filler(directory)
    record_fault(data_dir / TOOLS_TRACE_FILE, "disk-free", f"broker {broker_id} log dir {directory}",
                 broker_id=broker_id, detail=f"{freed} bytes freed")
    say(f"freed {freed / (1 << 20):.1f} MiB in the log directory of broker {broker_id} ({directory}); "
        f"`kafkasim start {broker_id}` if it stopped")
    return freed

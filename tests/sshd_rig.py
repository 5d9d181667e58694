"""Real OpenSSH servers for tests: loopback, or one per network namespace the test creates.

Each server is a non-daemon ``sshd -D -e -f <config>`` with a generated host key and one authorized
test key, stopped by its PID. Optionally it runs in a private mount namespace with a tmpfs over the
engine's data dir, so the "remote" host does not see the engine's files: everything must really
travel over SSH, as it would to another machine.

Namespaces (``ip netns``) and veth pairs are created only by these helpers, with 10.213.x.y
addresses that exist only inside namespaces they created; everything is deleted at the end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def sshd_available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh-keygen") is not None and os.geteuid() == 0


def netns_available() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    name = f"resenv-probe-{secrets.token_hex(3)}"
    ok = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ok


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip() if path.suffix else Path(f"{path}.pub").read_text().strip()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Sshd:
    root: Path
    address: str
    port: int
    client_key: Path
    known_hosts: Path
    netns: str | None = None
    hide: list[Path] = field(default_factory=list)
    max_sessions: int = 10
    set_env: dict[str, str] = field(default_factory=dict)
    own_pids: bool = False  # a pid namespace of its own: the host's process ids are not the engine's
    proc: subprocess.Popen | None = None

    def config_text(self) -> str:
        return "\n".join([
            f"ListenAddress {self.address}",
            f"Port {self.port}",
            f"HostKey {self.root / 'host_key'}",
            f"PidFile {self.root / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'} .ssh/authorized_keys",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",
            f"MaxSessions {self.max_sessions}",
            "MaxStartups 100:30:200",
            "Subsystem sftp internal-sftp",
            "LogLevel ERROR",
            "PrintMotd no",
            *([f"SetEnv {' '.join(f'{k}={v}' for k, v in self.set_env.items())}"] if self.set_env else []),
            "",
        ])

    def start(self) -> None:
        (self.root / "sshd_config").write_text(self.config_text())
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        argv = [SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")]
        # A private mount namespace: tmpfs over the hidden dirs, and an empty ~/.bashrc (bash sources
        # it for every SSH command; this machine's runs `pyenv init`, 200 ms, which a host's admin
        # would keep out of non-interactive shells).
        mounts = [f"mkdir -p '{p}' && mount -t tmpfs -o size=2g tmpfs '{p}'" for p in self.hide]
        (self.root / "empty_rc").write_text("")
        rc = Path(os.path.expanduser("~/.bashrc"))
        if rc.exists():
            mounts.append(f"mount --bind '{self.root / 'empty_rc'}' '{rc}'")
        if mounts or self.own_pids:
            pids = ["--pid", "--fork", "--mount-proc"] if self.own_pids else []
            argv = ["unshare", "--mount", "--propagation", "private", *pids, "sh", "-c",
                    f"{' && '.join([*mounts, 'true'])} && exec \"$@\"", "sshd", *argv]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        log = open(self.root / "sshd.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {(self.root / 'sshd.log').read_text()}")
            if self._port_open():
                return
            time.sleep(0.05)
        raise RuntimeError("sshd did not start listening")

    def listener_pid(self) -> int:
        """The listening sshd's pid as this machine sees it (inside `unshare`, when there is one)."""
        assert self.proc is not None
        found = [pid for pid in [self.proc.pid, *descendants(self.proc.pid)]
                 if Path(f"/proc/{pid}/exe").exists() and os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(SSHD)]
        return found[0]

    def drop_connections(self) -> None:
        """Kill the sshd process of every open connection, as a network failure ends them; the
        listener and the commands those connections started go on running."""
        listener = self.listener_pid()
        for pid in descendants(listener):
            try:
                parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except OSError:
                continue
            if parent == listener:
                with _suppress():
                    os.kill(pid, signal.SIGKILL)

    def host_run(self, *argv: str) -> subprocess.CompletedProcess:
        """A command run as the host sees things (its pid namespace, its mounts)."""
        prefix = ["nsenter", "--target", str(self.listener_pid()), "--pid", "--mount"] if self.own_pids else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True)

    def _port_open(self) -> bool:
        probe = ["python3", "-c", f"import socket; socket.create_connection(('{self.address}', {self.port}), 0.5)"]
        if self.netns:
            probe = ["ip", "netns", "exec", self.netns, *probe]
        return subprocess.run(probe, capture_output=True).returncode == 0

    def stop(self) -> None:
        """Stop the listener by PID, and every connection it forked (sshd puts each in a new session)."""
        if self.proc is None:
            return
        for pid in descendants(self.proc.pid):
            with _suppress():
                os.kill(pid, signal.SIGKILL)
        with _suppress():
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            with _suppress():
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        self.proc = None

    def host_data_dir(self, name: str) -> Path:
        """The data dir `host_yaml` gives host `name` (a root login's default would be root's real
        ~/.local/share/resenv, shared with everything else on this machine)."""
        return self.root / f"host-data-{name}"

    def host_yaml(self, name: str, *, user: str = "root", **extra: object) -> str:
        """The host's spec line; `data_dir` defaults to `host_data_dir(name)` for root, to the host's
        own default (the remote user's XDG data dir) for any other user; `data_dir=None` leaves it out."""
        if "data_dir" not in extra and user == "root":
            extra["data_dir"] = str(self.host_data_dir(name))
        elif extra.get("data_dir", "") is None:
            del extra["data_dir"]
        fields = {
            "kind": "ssh", "address": self.address, "port": self.port, "user": user,
            "key": str(self.client_key), "known_hosts": str(self.known_hosts), **extra,
        }
        inner = ", ".join(f"{key}: {value}" for key, value in fields.items())
        return f"  {name}: {{{inner}}}\n"


def make_sshd(root: Path, *, address: str = "127.0.0.1", port: int | None = None, netns: str | None = None,
              hide: list[Path] | None = None, client_key: Path | None = None, max_sessions: int = 10,
              set_env: dict[str, str] | None = None, own_pids: bool = False) -> Sshd:
    root.mkdir(parents=True, exist_ok=True)
    host_pub = keygen(root / "host_key")
    if client_key is None:
        client_key = root / "client_key"
        keygen(client_key)
    (root / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    port = port or (22 if netns else free_port())
    where = address if port == 22 else f"[{address}]:{port}"
    known = root / "known_hosts"
    known.write_text(f"{where} {' '.join(host_pub.split()[:2])}\n")
    server = Sshd(root=root, address=address, port=port, client_key=client_key, known_hosts=known,
                  netns=netns, hide=list(hide or []), max_sessions=max_sessions, set_env=dict(set_env or {}),
                  own_pids=own_pids)
    server.start()
    return server


@dataclass
class RemoteUser:
    """An unprivileged login user for an SSH host, as a real remote account is: its own home and
    shell, the test key in its ``~/.ssh/authorized_keys``. Made by `remote_user`, deleted with its
    home by `remove`."""

    name: str
    uid: int
    home: Path

    def remove(self) -> None:
        subprocess.run(["pkill", "-KILL", "-u", self.name], capture_output=True)
        subprocess.run(["userdel", "--remove", self.name], capture_output=True)


def remote_user(server: Sshd) -> RemoteUser:
    """A fresh unprivileged user who may log in to `server` with its client key."""
    name = f"rsv{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True, capture_output=True)
    # no password, yet not locked: sshd refuses a locked account even for a key
    subprocess.run(["usermod", "--password", "*", name], check=True, capture_output=True)
    info = subprocess.run(["getent", "passwd", name], check=True, capture_output=True, text=True).stdout.split(":")
    user = RemoteUser(name=name, uid=int(info[2]), home=Path(info[5]))
    ssh = user.home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "authorized_keys").write_text(Path(f"{server.client_key}.pub").read_text())
    subprocess.run(["chown", "-R", f"{name}:{name}", str(ssh)], check=True)
    return user


def descendants(root: int) -> list[int]:
    """PIDs below `root` in the process tree, from /proc (children first found, then theirs)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], (ProcessLookupError, PermissionError))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ network namespaces
@dataclass
class NetLab:
    """Namespaces made for one test: an engine namespace and host namespaces linked by veth pairs."""

    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    namespaces: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (namespace, device) we created

    def _ip(self, *args: str, netns: str | None = None) -> None:
        argv = ["ip", *args] if netns is None else ["ip", "-n", netns, *args]
        subprocess.run(argv, check=True, capture_output=True)

    def namespace(self, role: str) -> str:
        name = f"rsv-{self.tag}-{role}"
        self._ip("netns", "add", name)
        self.namespaces.append(name)
        self._ip("link", "set", "lo", "up", netns=name)
        return name

    def link(self, engine_ns: str, host_ns: str, subnet: int) -> tuple[str, str, str]:
        """A veth pair between the engine's namespace and a host's; returns (engine dev, engine ip, host ip)."""
        left, right = f"e{self.tag}{subnet}", f"h{self.tag}{subnet}"
        self._ip("link", "add", left, "netns", engine_ns, "type", "veth", "peer", "name", right, "netns", host_ns)
        self.links.append((engine_ns, left))
        engine_ip, host_ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
        self._ip("addr", "add", f"{engine_ip}/30", "dev", left, netns=engine_ns)
        self._ip("addr", "add", f"{host_ip}/30", "dev", right, netns=host_ns)
        self._ip("link", "set", left, "up", netns=engine_ns)
        self._ip("link", "set", right, "up", netns=host_ns)
        return left, engine_ip, host_ip

    def cut(self, engine_ns: str, device: str) -> None:
        self._ip("link", "set", device, "down", netns=engine_ns)

    def kill_all(self, netns: str) -> None:
        """SIGKILL every process in one of our namespaces (a host dying)."""
        out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
        for pid in out.split():
            with _suppress():
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for name in reversed(self.namespaces):
            self.kill_all(name)
        time.sleep(0.1)
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.namespaces.clear()


STANDIN = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi" / "standin.py"


def standin_bin(root: Path) -> Path:
    """A bin dir whose `nvidia-smi` is the recorded-output stand-in (put it first on the host's PATH)."""
    bin_dir = root / "standin-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "nvidia-smi"
    if not link.exists():
        link.symlink_to(STANDIN)
    return bin_dir

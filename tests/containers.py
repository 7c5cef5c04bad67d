"""A site whose agents are containers of the stkrelay image (`make image`).

`ImageSite` is a `harness.Site` whose every agent runs `podman run IMAGE` with
host networking, configured only by `STK_*` environment keys (as
docker/compose.yaml configures it: `STK_INI=""`), each beside its own Redis
sidecar container (`localhost/stkrelay-redis:bookworm`, made by `make image`).
Each agent's data directory is bind-mounted at the same path inside, so the
harness reads its state, history and certificate as for a process agent; the
share is a volume mounted at `/share` (LEASE_DIR `/share/socket`), or an
`smb://` URL to Samba on the host. The image runs as its own non-root user
(uid 10001), so the directories it writes are handed to that uid first.

Signals go to the container, never to the `podman run` client: `kill9` is
`podman kill -s KILL` (the whole container at once, as a power cut of the
agent's processes), `terminate` is `podman stop` (SIGTERM to PID 1, the agent's
supervisor). Podman runs as this machine needs (docs/design.md §12, scripts/podman.sh).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from harness import AgentProc, Site, free_port, wait_until

IMAGE = os.environ.get("STK_IMAGE", "localhost/stkrelay:latest")
REDIS_IMAGE = "localhost/stkrelay-redis:bookworm"
PODMAN = ["podman", "--cgroup-manager=cgroupfs", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
# No systemd here to run the HEALTHCHECK's timer: the test runs it (`podman healthcheck run`).
RUN = ["--health-interval", "disable", *LIMITS]
IMAGE_UID = 10001
SHARE = "/share"


def podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: {done.stderr.strip()}")
    return done


def missing() -> str | None:
    """Why the image test cannot run here (None: it can)."""
    for image in (IMAGE, REDIS_IMAGE):
        if podman("image", "exists", image, check=False).returncode != 0:
            return f"{image} is missing: run `make image` first"
    return None


def running(name: str) -> bool:
    done = podman("inspect", "--format", "{{.State.Running}}", name, check=False)
    return done.returncode == 0 and done.stdout.strip() == "true"


def hand_to_image_user(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), IMAGE_UID, IMAGE_UID, follow_symlinks=False)
    os.chown(path, IMAGE_UID, IMAGE_UID)


class SidecarRedis:
    """One agent's Redis: a container of REDIS_IMAGE on a free loopback port."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        podman("run", "-d", "--replace", "--name", name, "--network", "host", *LIMITS, REDIS_IMAGE,
               "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--hz", "1", "--dynamic-hz", "no")  # fmt: skip
        wait_until(lambda: podman("exec", name, "redis-cli", "-p", str(self.port), "ping",
                                  check=False).stdout.strip() == "PONG", 30, f"{name} to answer")  # fmt: skip

    def stop(self) -> None:
        podman("rm", "-f", "-t", "0", self.name, check=False)


class ContainerAgent(AgentProc):
    container: str = ""
    share_mount: list[str] = []

    def environment(self) -> dict[str, str]:
        """The agent's keys as STK_* variables (from the ini `Site` wrote), as compose sets them."""
        env = {"STK_INI": ""}
        for line in self.ini.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep:
                env[f"STK_{key.strip()}"] = value.strip()
        return env

    def start(self) -> None:
        env = self.environment()
        data = f"{self.data_dir}:{self.data_dir}"
        args = ["run", "--replace", "--name", self.container, "--network", "host", *RUN,
                "--stop-timeout", "10", "-v", data, *self.share_mount]  # fmt: skip
        for key in sorted(env):
            args += ["-e", key]  # values from podman's environment, never on its argv (secrets)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*PODMAN, *args, IMAGE], env={**os.environ, **env}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def signal_group(self, sig: int) -> None:
        podman("kill", "-s", str(int(sig)), self.container, check=False)

    def kill9(self) -> None:
        podman("kill", "-s", "KILL", self.container, check=False)
        assert self.proc is not None
        self.proc.wait(30)

    def terminate(self, timeout: float = 10) -> float:
        """`podman stop`: SIGTERM to the container's PID 1; how long the container took to end."""
        started = time.monotonic()
        podman("stop", "-t", str(int(timeout)), self.container, timeout=timeout + 30)
        wait_until(lambda: not running(self.container), timeout, f"{self.container} to stop")
        return time.monotonic() - started

    def alive(self) -> bool:
        return running(self.container)

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.container, check=False)
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class ImageSite(Site):
    """`Site` with container agents; `share="volume"` (LEASE_DIR /share/socket, the
    host's lease_dir mounted at /share) or `share="smb"` (pass Samba's site_options)."""

    def __init__(self, root: Path, n: int = 3, tag: str = "stk-it", share: str = "volume", **kw) -> None:  # type: ignore[no-untyped-def]
        self.tag = tag
        self.share = share
        kw["extra"] = {"LOG_FORMAT": "json", **kw.get("extra", {})}  # as docker/compose.yaml runs them
        super().__init__(root, n=n, **kw)
        mounts = ["-v", f"{self.lease_dir.parent}:{SHARE}"] if share == "volume" else []
        agents = []
        for agent in self.agents:
            box = ContainerAgent(**{f: getattr(agent, f) for f in agent.__dataclass_fields__})
            box.container = f"{tag}-{agent.name}"
            box.share_mount = mounts
            agents.append(box)
        self.agents = agents
        for agent in self.agents:
            hand_to_image_user(agent.data_dir)
        if share == "volume":
            hand_to_image_user(self.lease_dir.parent)

    def redis_for(self, i: int, data: Path):  # type: ignore[no-untyped-def]
        return SidecarRedis(f"{self.tag}-redis-S{i + 1:03d}")

    def lease_dir_for(self, i: int) -> Path:
        return Path(f"{SHARE}/socket") if self.share == "volume" else super().lease_dir_for(i)

    def stop(self) -> None:
        for agent in self.agents:
            if isinstance(agent, ContainerAgent):
                agent.remove()
            agent.redis.stop()

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

TMPFS = Path("/dev/shm")


def pytest_configure(config):
    """Test files on tmpfs (`--basetemp` in /dev/shm, removed at the end; set
    STK_KEEP_TMP=1 to keep it, or pass --basetemp to choose). The sites' shares,
    data dirs, Samba and etcd directories are other machines' disks on a real
    site; here they would share this one's journal, whose fsync took up to
    2.6 s while two workers and a browser ran (measured), and a share that
    takes that long is rightly treated as not answering by a TTL 3 site."""
    if hasattr(config, "workerinput") or config.option.basetemp is not None:
        return  # an xdist worker gets <basetemp>/popen-gwN from the controller
    if TMPFS.is_dir() and os.access(TMPFS, os.W_OK):
        config.option.basetemp = tempfile.mkdtemp(prefix="stk-pytest-", dir=TMPFS)
        config.stk_made_basetemp = config.option.basetemp


def pytest_unconfigure(config):
    made = getattr(config, "stk_made_basetemp", None)
    if made and not os.environ.get("STK_KEEP_TMP"):
        shutil.rmtree(made, ignore_errors=True)
    if not hasattr(config, "workerinput"):
        _forget_faketime_segments()


def _forget_faketime_segments():
    """libfaketime leaves /dev/shm/faketime_{shm,sem}_<pid> behind a process
    that was killed (the agents of the skew tests are, with -9): remove those
    whose process is gone."""
    for entry in TMPFS.glob("*faketime_*_*") if TMPFS.is_dir() else []:
        pid = entry.name.rsplit("_", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            entry.unlink(missing_ok=True)


@pytest.fixture
def site_factory(tmp_path, request):
    """Build real agent sites; every agent and redis is killed at teardown, and
    the agents' logs are attached to the report when the test failed."""
    from harness import Site

    sites: list[Site] = []
    request.node.stk_sites = sites

    def make(n=3, timing=None, **kw):
        site = Site(tmp_path / f"site{len(sites)}", n=n, timing=timing, **kw)
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


@pytest.fixture
def netns_site(tmp_path, request):
    """Build sites whose agents live in network namespaces (tests/netns.py); each
    is stopped (agents, Redis, share views, namespaces) at teardown."""
    from netns import NetnsSite, available

    why = available()
    if why:
        pytest.skip(why)
    sites: list[NetnsSite] = []
    request.node.stk_sites = sites

    def make(n=3, **kw):
        site = NetnsSite(tmp_path / f"site{len(sites)}", n=n, **kw)
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()


@pytest.fixture(scope="session")
def samba_server(tmp_path_factory):
    """One real smbd on loopback for the session (tests/samba.py); tests that
    stop, pause or kill their server use `own_samba` instead."""
    server = _start_samba(tmp_path_factory.mktemp("samba"))
    yield server
    server.stop()


@pytest.fixture
def own_samba(tmp_path):
    """A real smbd of this test's own, stopped at teardown (by pid)."""
    server = _start_samba(tmp_path / "samba")
    yield server
    server.stop()


def _start_samba(workdir):  # type: ignore[no-untyped-def]
    from samba import Samba, available

    why = available()
    if why:
        pytest.skip(why)
    server = Samba(workdir)
    server.start()
    return server


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    """stkrelay from its wheel in a fresh venv (tests/installed.py), built once per session."""
    from installed import install

    return install(tmp_path_factory.mktemp("installed"))


@pytest.fixture
def relay_process():
    """Start relays as real subprocesses (test_relay_client.RelayProcess); all are
    killed at teardown."""
    from test_relay_client import RelayProcess

    procs = []

    def make(node, host, epoch):
        procs.append(RelayProcess(node, host, epoch))
        return procs[-1]

    yield make
    for proc in procs:
        proc.kill()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for site in getattr(item, "stk_sites", []):
            report.sections.append(("agent logs", site.logs()))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """On CI (CI=true) a skipped test is a failure: `make test` installs every
    part the suite needs, so a skip there means a missing install step."""
    import os

    skipped = terminalreporter.stats.get("skipped", [])
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and skipped:
        terminalreporter.write_line(f"CI: {len(skipped)} test(s) skipped: failing the run", red=True)
        config._stk_skips_failed = True


def pytest_sessionfinish(session, exitstatus):
    if getattr(session.config, "_stk_skips_failed", False) and exitstatus == 0:
        session.exitstatus = 1


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory):
    """One real 3-member etcd cluster on loopback for the session's store tests
    (each test uses a prefix of its own); stopped and removed at the end."""
    from etcd import EtcdCluster, have_etcd

    if not have_etcd():
        pytest.skip("etcd is missing: run `make test` (the bootstrap installs etcd-server)")
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd-session"), n=3).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def etcd_faults(tmp_path):
    """A 3-member etcd cluster of this test alone, for faults (kill, pause): stopped at teardown."""
    from etcd import EtcdCluster, have_etcd

    if not have_etcd():
        pytest.skip("etcd is missing: run `make test` (the bootstrap installs etcd-server)")
    clusters = []

    def make(n=3):
        clusters.append(EtcdCluster(tmp_path / f"etcd{len(clusters)}", n=n).start())
        return clusters[-1]

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def etcd_site_factory(tmp_path, request, etcd_cluster):
    """Real agent sites whose pool is on the session's etcd cluster (a prefix each)."""
    from etcd import EtcdSite

    sites = []
    request.node.stk_sites = sites

    def make(n=3, timing=None, cluster=None, **kw):
        site = EtcdSite(tmp_path / f"site{len(sites)}", cluster or etcd_cluster, n=n, timing=timing, **kw)
        sites.append(site)
        return site

    yield make
    for site in sites:
        site.stop()

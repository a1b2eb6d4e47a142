"""Shared fixtures: capability-based skips, one kernel probe per session, and a leak check.

After the whole suite, nothing a backend lists as its own leftovers may remain (a `tbed-`
namespace, a container labelled with a lab, a management interface, an impairment appliance's
process, tap or folder) unless a live lab of
another process owns it: the session fails if something was, after `clean` removed it.
The end-to-end run tests check the rest of what a run leaves (processes, SSH and install
folders, lab state) themselves.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

IS_ROOT = os.geteuid() == 0


def pytest_ignore_collect(collection_path, config):
    """With test.sh's two processes (tests/partition.py), each collects only its own test files."""
    from tests import partition

    which = partition.partition()
    if not which or not collection_path.is_file() or not collection_path.name.startswith("test_"):
        return None
    return True if partition.runs_beside(collection_path) != (which == "beside") else None


def no_lab_beside(what: str) -> None:
    """Fail a test of tests/partition.py's list that asks for ``what``: it would run beside the lab tests."""
    from tests import partition

    if partition.partition() == "beside":
        pytest.fail(f"{what} is a lab, but this test runs beside the lab tests: take its file out of "
                    "tests/partition.py's BESIDE_LABS", pytrace=False)


def _mininet_importable() -> bool:
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mnexec") is not None


needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces, tc and iptables")
needs_mininet = pytest.mark.skipif(
    not (IS_ROOT and _mininet_importable()),
    reason="needs root and Mininet (apt-get install mininet; run through ./test.sh so the virtualenv sees it)",
)
needs_iperf3 = pytest.mark.skipif(shutil.which("iperf3") is None, reason="needs iperf3 (apt-get install iperf3)")


def docker_missing() -> str:
    """Why the Docker backend cannot run here ('' when it can): engine, node image."""
    if not IS_ROOT:
        return "needs root: network namespaces, tc and iptables"
    from testbed.backends import BackendError
    from testbed.backends.docker.backend import DockerBackend

    backend = DockerBackend()
    try:
        backend.client  # noqa: B018 - reaches the engine
        backend._image_obj()
    except BackendError as exc:
        return f"needs the Docker backend (./test.sh sets it up): {exc}"
    return ""


_DOCKER_MISSING: "str | None" = None


def docker_unavailable() -> str:
    global _DOCKER_MISSING
    if _DOCKER_MISSING is None:
        _DOCKER_MISSING = docker_missing()
    return _DOCKER_MISSING


#: parameters of the tests that every backend must pass; Docker's are skipped (with the reason) by
#: :func:`skip_unless_backend`, which the tests call, when its engine or node image is missing.
BACKEND_PARAMS = [pytest.param("mininet", marks=needs_mininet, id="mininet"), pytest.param("docker", id="docker")]


def skip_unless_backend(name: str) -> None:
    """Skip the calling test, saying why, if backend ``name`` cannot run here."""
    if name == "docker" and docker_unavailable():
        pytest.skip(docker_unavailable())


def short_diamond(folder, name: str = "diamond"):
    """The diamond's congestion story in 18 s instead of 60 (bulk fills r2-r4 from 4 s to 14 s, narrowed at
    8 s; pub1 until 12 s, pub2 after), written as a topology file in ``folder``: the smoke suite's case, its
    overrides merged in (suites/smoke.yaml), so CI's end-to-end runs and the smoke suite are one topology."""
    from pathlib import Path

    from testbed.suite.spec import load_suite

    text = load_suite(Path(__file__).resolve().parents[1] / "suites" / "smoke.yaml").cases["diamond-short"].topology_text
    assert text.startswith("name: diamond\n")
    path = Path(folder) / f"{name}.yaml"
    path.write_text(f"name: {name}\n" + text.split("\n", 1)[1])
    return path


def not_deployable(path, allowed: set) -> list:
    """Why a module cannot run on a node as shipped (Python 3.9, ``from __future__ import annotations``,
    top-level imports only of ``allowed`` and the standard library): a line per problem, [] when none."""
    import ast

    source = path.read_text()
    try:
        tree = ast.parse(source, feature_version=(3, 9))  # no match, no 3.10+ syntax
    except SyntaxError as err:
        return [f"{path.name}: not Python 3.9: {err}"]
    found = [] if "from __future__ import annotations" in source else [
        f"{path.name}: no `from __future__ import annotations`"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods = [node.module or ""]
        else:
            continue
        found += [f"{path.name} imports {m}" for m in mods
                  if m.split(".")[0] not in allowed | set(sys.stdlib_module_names)]
    return found


def run_cli(*args: str, check: bool = True, timeout: float = 180,
            env: "dict | None" = None) -> subprocess.CompletedProcess:
    """`testbed ARGS` in a process of its own, as a user in another shell runs it."""
    result = subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, **env} if env else None)
    if check and result.returncode != 0:
        raise AssertionError(f"testbed {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def recorded_run(monkeypatch):
    """`testbed run` up to the experiment, which records its options and stops (as a results folder that exists
    would: exit 2)."""
    import testbed.cli.app as cli
    import testbed.run.experiment as experiment
    from testbed.backends import BackendOptions

    seen = {}

    def stand_in(spec, path, caps, options, progress):
        seen["options"] = options
        raise FileExistsError("stand-in: nothing is run")

    monkeypatch.setattr(cli, "need_root", lambda: None)
    # it returns the probed capabilities and the backend's options
    monkeypatch.setattr(cli, "_check_backend_and_kernel", lambda *a, **k: (None, BackendOptions("mininet")))
    monkeypatch.setattr(cli, "_check_machine_fit", lambda *a, **k: None)
    monkeypatch.setattr(experiment, "run_experiment", stand_in)
    return seen


@pytest.fixture(scope="session")
def spark():
    """One Spark session for the whole test session (local[2], no UI, few shuffle partitions): the Spark tests'
    and the analysis of the shared real runs (tests/realruns.py)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from spark.session import DRIVER_JAVA_OPTIONS, RUNTIME_CONF

    builder = (
        SparkSession.builder.master("local[2]").appName("testbed-tests")
        .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in RUNTIME_CONF.items():  # the analysis' own SQL settings: the tests run what users run
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def short_diamond_run(spark, tmp_path_factory):
    """The short diamond (:func:`short_diamond`) run once on Mininet (the default backend) and analysed
    (tests/realruns.py), for every test that reads such a run: the results-folder contract and the analysis
    of a real run (tests/spark/test_spark_real_run.py), the Mininet side of tests/run/test_backend_compare.py,
    the congestion-aware side of tests/run/test_congestion_e2e.py.
    A :class:`tests.realruns.AnalysedRun` with its contract recorded; read only (a test that writes into it
    works on a copy: ``realruns.copy_of``)."""
    from tests import realruns

    return analysed_short_diamond(tmp_path_factory, "short-diamond", contract=realruns.RunContract())


@pytest.fixture(scope="session")
def short_diamond_docker_run(spark, tmp_path_factory):
    """The short diamond run once on Docker and analysed, as :func:`short_diamond_run` is on Mininet: the Docker
    side of tests/run/test_backend_compare.py and tests/run/test_run_e2e.py's Docker run. Read only."""
    skip_unless_backend("docker")
    return analysed_short_diamond(tmp_path_factory, "short-diamond-docker", "--backend", "docker")


def analysed_short_diamond(tmp_path_factory, folder: str, *run_args: str, contract=None):
    """The short diamond run (``testbed run`` with ``run_args``) into a fresh folder ``folder`` and analysed
    (tests/realruns.py run_and_analyze); skipped where a real run cannot be made. For the session's shared runs."""
    from tests import realruns

    no_lab_beside("a shared real run")
    if realruns.missing():
        pytest.skip(realruns.missing())
    results = tmp_path_factory.mktemp(folder)
    return realruns.run_and_analyze(short_diamond(results), results, *run_args, contract=contract)


@pytest.fixture(scope="session")
def caps():
    no_lab_beside("the kernel probe (caps)")
    if not IS_ROOT:
        pytest.skip("needs root to probe the kernel in a scratch namespace")
    from testbed.backends.localns.backend import probe_this_kernel

    return probe_this_kernel()  # this machine's kernel, shared by the Mininet and Docker nodes


def pytest_sessionfinish(session, exitstatus):
    from tests import partition

    if not IS_ROOT or partition.partition() == "beside":  # the lab tests' process checks for leftovers
        return
    from testbed.lab import state as labstate
    from testbed.backends import BACKENDS, BackendError, get_backend
    from testbed.lab.clean import CleanReport, clean, force_down

    others = {st.name for st in labstate.all_states() if st.owner_pid != os.getpid() and st.owner_alive()}
    left = []
    for name in BACKENDS:
        try:
            left += get_backend(name).leftovers(others)  # the backends on namespaces share some kinds
        except BackendError:
            pass  # e.g. no Docker engine here: nothing of its kind can be left
    left = list(dict.fromkeys(left))  # each once (Mininet and Docker both list the namespaces and the appliances)
    if left:
        # Labs this very process still owns were not closed by their fixture; others with a
        # dead owner are leftovers. Labs of another live process (a user's run) are not ours.
        for state in labstate.all_states():
            if state.owner_pid == os.getpid():
                force_down(state, CleanReport())
        clean()
        print(f"\nLEAK: the test suite left behind: {', '.join(left)} (removed now)")
        session.exitstatus = 1
    # The ssh backend's test labs (tests/backends/sshlab.py): every one must have been closed by its fixture.
    from tests.backends.sshlab import release_leftover_fixtures

    stray = release_leftover_fixtures(ours_too=True)
    if stray:
        print(f"\nLEAK: test SSH labs left behind: {', '.join(stray)} (removed now)")
        session.exitstatus = 1

"""Shared fixtures (small samples of the real fra.txt via $FRA_TXT, the smoke pipeline root)
and the one place where tests get their markers (see pytest.ini): by the fixtures they use,
or by module, so `make test-fast` can leave out everything that runs a pipeline or a program
outside the venv."""
from __future__ import annotations

import collections
import dataclasses
import os
import resource
import subprocess
import sys

import pytest

from runners import tensorflow_env

tensorflow_env.apply_defaults()  # before TensorFlow loads: the tests run it as `nmt` does

# Re-exported: older test modules import these from conftest; new code imports helpers.
from helpers import (REPO, SMOKE_TRAIN_STEPS, kill_on_log_line,  # noqa: E402,F401
                     latest_artifact, open_store, run_nmt, run_nmt_peak_memory,
                     run_nmt_with_file_size_limit, sample_lines, smoke_args)

# A test using one of these fixtures (directly or through another fixture) gets the marker.
FIXTURE_MARKERS = {
    "smoke_run": "pipeline", "smoke_rerun": "pipeline", "nmt_pipeline": "pipeline",
    "kfp": "pipeline",
}
# Tests that start a program outside the venv themselves (no fixture to hang the marker on).
EXTERNAL_TESTS = {"test_report_renders_in_headless_chromium",
                  "test_kfp_store_in_mysql_read_by_the_cli",
                  "test_local_store_copied_into_mysql_gives_the_same_answers"}
MODULE_MARKERS = {"test_faults": "faults", "test_kubeflow": "kubeflow",
                  "test_distributed": "distributed", "test_logs": "logs",
                  "test_budget": "training", "test_settings": "training",
                  "test_training": "training", "test_subword_sampling": "training",
                  "test_imports": "layout",
                  "test_benchmarks_import": "layout", "test_export": "serving",
                  "test_segmentation": "serving", "test_flink": "flink",
                  "test_figures": "figures", "test_interpreter": "process"}
# Unit tests slower than ~30 s on 2 cores: kept out of `make test-fast`.
SLOW_FIXTURES = {"overfit", "exported_translator"}
# `make test` runs on two pytest-xdist workers, and each worker builds its own session- and
# module-scoped fixtures; so the scheduler below hands out whole modules, and these modules,
# whose tests share the smoke pipeline root (fixtures smoke_run, smoke_rerun), as one unit.
SMOKE_ROOT_FIXTURES = {"smoke_run", "smoke_rerun"}
SMOKE_ROOT_MODULES = {"test_data_pipeline", "test_evaluate", "test_metadata",
                      "test_metadata_stores", "test_pipeline_e2e"}
# The Flink modules, one after the other on one worker: test_flink.py counts the engine
# processes alive (job servers, worker pools, SDK workers), which the session cluster's of
# test_flink_cluster.py and test_worker_pool.py's SDK workers would be among; and two Flink
# engines at once would share 2 cores.
FLINK_MODULES = {"test_flink", "test_flink_cluster", "test_worker_pool"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N modules that used the most CPU time (theirs and their "
                     "child processes'): what decides the suite's time on 2 cores")


def _cpu_seconds() -> float:
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Each phase's CPU time (this process and the children it waited for), carried to the
    xdist controller in the report."""
    report = (yield).get_result()
    started = getattr(item, "_cpu_started", None)
    now = _cpu_seconds()
    if started is not None:
        report.user_properties.append(("cpu_seconds", now - started))
    item._cpu_started = now


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item._cpu_started = _cpu_seconds()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    count = config.getoption("--cpu-durations")
    if count is None:
        return
    by_module: collections.Counter[str] = collections.Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "cpu_seconds":
                    by_module[report.nodeid.split("::", 1)[0]] += value
    terminalreporter.write_sep("=", f"CPU time by module (top {count} of {len(by_module)}, "
                               f"{sum(by_module.values()) / 60:.1f} min in all)")
    for module, seconds in by_module.most_common(count or None):
        terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
    _write_worker_timeline(terminalreporter)


def _write_worker_timeline(terminalreporter) -> None:
    """Which worker ran which module when (minutes from the first test): shows a suite that
    waits on one worker's last modules while the other is idle."""
    spans: dict[str, dict[str, list[float]]] = collections.defaultdict(dict)
    for reports in terminalreporter.stats.values():
        for report in reports:
            node = getattr(report, "node", None)
            if node is None or not hasattr(report, "start"):
                continue
            module = os.path.basename(report.nodeid.split("::", 1)[0])
            span = spans[node.gateway.id].setdefault(module, [report.start, report.stop])
            span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
    if not spans:
        return
    origin = min(start for modules in spans.values() for start, _ in modules.values())
    terminalreporter.write_sep("=", "modules per worker, minutes from the first test")
    for worker, modules in sorted(spans.items()):
        order = sorted(modules.items(), key=lambda item: item[1][0])
        terminalreporter.write_line(f"{worker}: " + ", ".join(
            f"{module.removeprefix('test_').removesuffix('.py')} "
            f"{(start - origin) / 60:.1f}-{(stop - origin) / 60:.1f}"
            for module, (start, stop) in order))


# The longest units (by make test's worker timeline), started first: xdist orders units by
# their number of tests, which would leave the longest one running alone at the end.
LONGEST_FIRST = ("the Flink modules", "the smoke root", "tests/test_faults.py",
                 "tests/test_kubeflow_launcher.py", "tests/test_distributed.py",
                 "tests/test_warm_start.py")


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> object:
    """xdist's per-module scheduling, with the smoke root's modules as one unit and the Flink
    modules as another, the longest units first: a worker takes the next unit as its own run
    out, so the longest-first order leaves only short units for the end."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            module = os.path.splitext(os.path.basename(path))[0]
            if module in SMOKE_ROOT_MODULES:
                return "the smoke root"
            return "the Flink modules" if module in FLINK_MODULES else path

        def _assign_work_unit(self, node) -> None:
            for scope in reversed(LONGEST_FIRST):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        if fixtures & SMOKE_ROOT_FIXTURES and module not in SMOKE_ROOT_MODULES:
            raise pytest.UsageError(f"{item.nodeid} uses the smoke root: add {module} to "
                                    "SMOKE_ROOT_MODULES in tests/conftest.py")
        names = {FIXTURE_MARKERS[f] for f in fixtures & FIXTURE_MARKERS.keys()}
        if fixtures & SLOW_FIXTURES:
            names.add("slow")
        if getattr(item, "originalname", item.name) in EXTERNAL_TESTS:
            names.add("external")
        names |= {marker for prefix, marker in MODULE_MARKERS.items()
                  if module.startswith(prefix)}
        for name in sorted(names):
            item.add_marker(name)


@pytest.fixture(scope="session")
def fra_txt() -> str:
    """The shared fra.txt. Tests that need it fail (never skip) when it is missing."""
    path = os.environ.get("FRA_TXT")
    if not path or not os.path.isfile(path):
        pytest.fail(f"FRA_TXT must point to fra.txt (got {path!r}); e.g. "
                    "FRA_TXT=../shared/data/fra-eng/fra.txt make test")
    return os.path.abspath(path)


@pytest.fixture(scope="session")
def unseen_lines(fra_txt, fra_sample) -> list[tuple[str, str]]:
    """(English, French) test lines the smoke model never trained on: the shared dev set's
    ($TATOEBA_DEV, else tatoeba-dev/ beside fra.txt's directory, as ../shared lays them out),
    or, where a user has no copy of it, fra.txt's own lines outside the smoke sample."""
    dev = os.environ.get("TATOEBA_DEV") or os.path.join(
        os.path.dirname(os.path.dirname(fra_txt)), "tatoeba-dev",
        "tatoeba-test-v2021-08-07.unseen.eng")
    if os.path.isfile(dev):
        with open(dev, encoding="utf-8") as eng, \
                open(dev.removesuffix(".eng") + ".fra", encoding="utf-8") as fra:
            return list(zip(eng.read().splitlines(), fra.read().splitlines()))
    with open(fra_sample, encoding="utf-8") as f:
        sampled = {line.split("\t")[0] for line in f}
    with open(fra_txt, encoding="utf-8") as f:
        pairs = [line.rstrip("\n").split("\t")[:2] for line in f]
    return [(english, french) for english, french in pairs[::97] if english not in sampled]


@pytest.fixture(scope="session")
def fra_sample(fra_txt, tmp_path_factory) -> str:
    """About 3,400 lines of the real file, in a directory of its own."""
    path = tmp_path_factory.mktemp("fra_sample") / "fra.txt"
    path.write_bytes(b"".join(sample_lines(fra_txt)))
    return str(path)


@pytest.fixture(scope="session")
def direct_run(fra_sample, tmp_path_factory) -> str:
    """The sample through Transform on the DirectRunner (in memory): the reference whose
    outputs the Flink modules' engines must give (one run for both; they share a worker)."""
    root = str(tmp_path_factory.mktemp("direct"))
    run = run_nmt(*smoke_args(fra_sample, root, SMOKE_TRAIN_STEPS), "--to", "Transform")
    assert run.returncode == 0, run.stderr[-5000:]
    return root


class NmtRun:
    """`nmt run ARGS` in a fresh process: plain, verbose, on a "full disk", or measuring
    memory."""

    def __call__(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        return run_nmt("run", *args, **kwargs)

    def verbose(self, *args: str) -> subprocess.CompletedProcess:
        return run_nmt("-v", "run", *args)

    def file_size_limit(self, limit_bytes: int, *args: str) -> subprocess.CompletedProcess:
        return run_nmt_with_file_size_limit(limit_bytes, "run", *args)

    def peak_memory(self, *args: str) -> tuple[subprocess.CompletedProcess, int]:
        return run_nmt_peak_memory("run", *args)


@pytest.fixture(scope="session")
def nmt_pipeline() -> NmtRun:
    """Runs the pipeline the way a user does; using it marks a test `pipeline`."""
    return NmtRun()


@dataclasses.dataclass
class SmokeRun:
    """A smoke-profile pipeline root after its first complete run."""
    root: str
    killed_log: str  # the first attempt, killed during training
    log: str  # the re-run that resumed training and pushed
    examples_uri: str
    evaluation_uri: str
    model_run_uri: str
    pushed_version: str


@pytest.fixture(scope="session")
def smoke_run(fra_sample, tmp_path_factory) -> SmokeRun:
    """`nmt run --profile smoke` through Pusher, killed once during training and re-run."""
    root = str(tmp_path_factory.mktemp("smoke"))
    args = smoke_args(fra_sample, root, SMOKE_TRAIN_STEPS)
    proc = subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=REPO,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    killed_log = kill_on_log_line(proc, "Checkpoint at step 40", proc)
    proc.wait()
    resumed = run_nmt(*args)
    assert resumed.returncode == 0, resumed.stderr[-5000:]
    store = open_store(root)
    return SmokeRun(
        root=root, killed_log=killed_log, log=resumed.stderr,
        examples_uri=latest_artifact(store, "Examples", "FraTxtExampleGen").uri,
        evaluation_uri=latest_artifact(store, "ModelEvaluation").uri,
        model_run_uri=latest_artifact(store, "ModelRun").uri,
        pushed_version=latest_artifact(store, "PushedModel").custom_properties[
            "pushed_version"].string_value)


@pytest.fixture(scope="session")
def smoke_rerun(smoke_run, fra_sample) -> subprocess.CompletedProcess:
    """A second run whose candidate trains for 2 steps only and decodes without the loop
    guard: worse, partly cached. (With the guard, a 2-step model's bag of frequent words can
    score within the gate's one point of the smoke model's.) fra.txt gets a new modification
    time first, same content (a copy without -p, a checkout)."""
    later = os.stat(fra_sample).st_mtime_ns + 3_600 * 10**9
    os.utime(fra_sample, ns=(later, later))
    result = run_nmt(*smoke_args(fra_sample, smoke_run.root, 2), "--hparam",
                     "decode_loop_ngram=0")
    assert result.returncode == 0, result.stderr[-5000:]
    return result

"""README's and BENCHMARKS' tables of today's figures are what benchmarks/results/ says:
`make figures-check` passes on the committed pages, and fails, naming the table, when a
generated table is edited by hand or a result file changes without `make figures`. Every
result file has the one layout benchmarks/results.py writes. Nothing here imports TensorFlow."""
from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from helpers import REPO

if REPO not in sys.path:
    sys.path.insert(0, REPO)

from benchmarks import figures, make_run, results, suite_time  # noqa: E402

FIELDS = {"schema", "measured", "command", "commit", "date", "machine", "figures"}
MACHINE = {"cpu_model", "cpu_features", "cores", "memory_gb", "gpu"}


def _copy_pages(tmp_path) -> str:
    for page in figures.PAGES:
        shutil.copy(os.path.join(REPO, page), tmp_path / page)
    return str(tmp_path)


def test_the_committed_tables_match_the_result_files(capsys):
    assert figures.main(["--check"]) == 0, capsys.readouterr().err


def test_every_table_is_shown_on_a_page():
    text = "".join(open(os.path.join(REPO, page), encoding="utf-8").read()
                   for page in figures.PAGES)
    missing = [t.name for t in figures.TABLES if f"<!-- figures:{t.name} -->" not in text]
    assert not missing, f"tables on no page: {missing}"


def test_a_hand_edited_table_fails_the_check_naming_it(tmp_path, capsys):
    repo = _copy_pages(tmp_path)
    page = tmp_path / "README.md"
    text = page.read_text(encoding="utf-8")
    start = text.index("<!-- figures:scores -->")
    row = text.index("\n|", text.index("|---", start))  # the table's first row: a cell edited
    page.write_text(text[:row] + "\n| edited " + text[row + 2:], encoding="utf-8")
    assert figures.main(["--check", "--repo", repo]) == 1
    assert "README.md: figures:scores" in capsys.readouterr().err
    assert figures.main(["--repo", repo]) == 0  # `make figures` puts it back
    assert page.read_text(encoding="utf-8") == text


def test_a_changed_result_file_fails_the_check(tmp_path, capsys):
    repo = _copy_pages(tmp_path)
    copied = tmp_path / "results"
    shutil.copytree(results.RESULTS, copied)
    record = json.loads((copied / "make_run_amx.json").read_text(encoding="utf-8"))
    record["figures"]["dev_greedy"]["bleu"] += 1
    (copied / "make_run_amx.json").write_text(json.dumps(record), encoding="utf-8")
    assert figures.main(["--check", "--repo", repo, "--results", str(copied)]) == 1
    err = capsys.readouterr().err
    assert "README.md: figures:scores" in err and "BENCHMARKS.md: figures:make-run" in err


def test_an_unknown_marker_fails_the_check(tmp_path, capsys):
    repo = _copy_pages(tmp_path)
    with open(tmp_path / "BENCHMARKS.md", "a", encoding="utf-8") as f:
        f.write("<!-- figures:no-such-table -->\n<!-- /figures:no-such-table -->\n")
    assert figures.main(["--check", "--repo", repo]) == 1
    assert "no-such-table" in capsys.readouterr().err


def test_a_table_without_its_result_file_says_not_measured_yet(tmp_path):
    table = figures.Table("absent", ("engine", "16× s"),
                          (figures.Row("scale_engines.json", ("x", "{figures[s]}")),))
    rendered = figures.render(table, str(tmp_path))
    assert rendered.splitlines()[2] == "| not measured yet: `scale_engines.json` | |"


def test_the_cluster_table_counts_the_clusters_processes_and_a_lost_taskmanagers_cost(
        tmp_path):
    """scale.py's cluster rows: the worker pool's SDK workers among the Python workers, the
    JobManager and TaskManagers apart, and the loss's cost against the cluster's run."""
    def row(mode: str, seconds: float, transform: float, **extra) -> dict:
        return {"status": "ok", "mode": mode, "size": 16, "component": "data half",
                "component_s": seconds, "peak_rss_mb": 5000.0,
                "components_in_run": {"Transform": ["executed", transform]},
                "at_peak_runner_mb": 800.0, "at_peak_workers_mb": 10.0,
                "at_peak_worker_pool_mb": 1000.0, "at_peak_jvm_mb": 400.0,
                "at_peak_jobmanager_mb": 700.0, "at_peak_taskmanagers_mb": 2090.0, **extra}

    loss = {"killed": "taskmanager-2", "killed_s_into_job": 30.2, "job_state": "FINISHED",
            "failures": 1}
    results.write(str(tmp_path / "scale_engines_16x_cluster.json"), "a test", {"rows": [
        row("flink_cluster", 400.0, 150.0),
        row("flink_cluster_lost_taskmanager", 470.0, 210.0, taskmanager_loss=loss)]})
    table = next(t for t in figures.TABLES if t.name == "engines-cluster")
    *_, cluster, lost = figures.render(table, str(tmp_path)).splitlines()
    assert cluster.split(" | ")[2:10] == ["400", "–", "5,000", "800", "1,010", "400", "700",
                                          "2,090"]
    assert lost.split(" | ")[3] == ("+70 s, Transform +60 s (killed 30 s into Transform's job, "
                                    "restarted 1×)")
    # a second sitting of the cluster's run, appended: its row replaces the first's
    results.write(str(tmp_path / "scale_engines_16x_cluster.json"), "a test", {"rows": [
        row("flink_cluster", 400.0, 150.0),
        row("flink_cluster", 430.0, 160.0, peak_rss_mb=4500.0, at_peak_jvm_mb=300.0)]})
    *_, cluster, _ = figures.render(table, str(tmp_path)).splitlines()
    assert cluster.split(" | ")[2:10] == ["430", "–", "4,500", "800", "1,010", "300", "700",
                                          "2,090"]


def test_write_records_the_layout_and_the_machine(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f amx_bf16\n")
    machine = results.machine(str(cpuinfo))
    assert machine["cpu_model"] == "Some CPU"
    assert machine["cpu_features"] == ["avx2", "avx512f", "amx_bf16"]
    path = str(tmp_path / "x.json")
    results.write(path, "a test", {"a": 1}, argv=["--flag"])
    record = results.read(path)
    assert FIELDS <= record.keys() and record["figures"] == {"a": 1}
    assert record["command"].endswith("--flag") and MACHINE <= record["machine"].keys()


@pytest.mark.parametrize("name", sorted(n for n in os.listdir(results.RESULTS)
                                        if n.endswith(".json")))
def test_every_result_file_has_the_layout(name):
    record = results.read(name)
    assert FIELDS <= record.keys() and record["schema"] == results.SCHEMA
    assert MACHINE <= record["machine"].keys(), name


def test_suite_time_reads_pytests_last_summary_line_and_the_workers():
    log = (".venv/bin/python -m pytest -q -n 3 --durations=15 --cpu-durations=10 \\\n"
           "== 3 passed in 1.00s ==\n"
           "==== 476 passed, 2 failed, 5 warnings in 798.00s (0:13:18) ====\n")
    assert suite_time.summary(log) == {"passed": 476, "minutes": 13.3, "failed": 2,
                                       "workers": 3}
    assert suite_time.summary(log.split("\n", 1)[1])["workers"] is None


def test_suite_time_reads_the_cpu_by_module_table():
    log = ("== CPU time by module (top 2 of 40, 53.8 min in all) ==\n"
           "   733.9s  tests/test_flink_cluster.py\n"
           "    82.1s  tests/test_worker_pool.py\n"
           "== modules per worker, minutes from the first test ==\n"
           "== 698 passed in 1768.59s (0:29:28) ==\n")
    assert suite_time.summary(log)["cpu_minutes"] == 53.8
    assert suite_time.summary(log)["cpu_seconds_by_module"] == {
        "tests/test_flink_cluster.py": 733.9, "tests/test_worker_pool.py": 82.1}
    assert "cpu_minutes" not in suite_time.summary(log.split("\n", 3)[3])


def test_make_run_reads_gnu_times_report():
    report = ("\tElapsed (wall clock) time (h:mm:ss or m:ss): 33:17.04\n"
              "\tMaximum resident set size (kbytes): 2890684\n")
    minutes, peak_gb = make_run.time_log(report)
    assert round(minutes, 2) == 33.28 and round(peak_gb, 2) == 2.76
    assert make_run.time_log(report.replace("33:17.04", "1:02:03"))[0] == 62.05

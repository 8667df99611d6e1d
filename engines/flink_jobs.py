"""The Flink jobs of a run, and why one failed: from the embedded cluster's log (the job
server's), or from a cluster's REST API (its JobManager's own record); a failed job's cause in
one sentence a user can act on when the cluster's settings or state explain it; and, to lose a
TaskManager on purpose (tests/test_flink_cluster.py, benchmarks/scale.py), a cluster's running
job, its busy TaskManagers and a job's recorded failures."""
from __future__ import annotations

import dataclasses
import json
import math
import re
import time
import urllib.request
from typing import Callable

from engines.flink import FlinkEngine

_REST_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class FlinkJob:
    name: str
    state: str  # Flink's final state: FINISHED, FAILED, CANCELED
    seconds: float


_JOB_STATE = re.compile(r"^(\S+) \[[^\]]*\] INFO \S+ExecutionGraph - Job (\S+) \(\w+\) "
                        r"switched from state (\w+) to (\w+)\.")


def jobs_in_log(log_path: str) -> list[FlinkJob]:
    """The Flink jobs the job server ran, in order, with their running time."""
    from datetime import datetime

    started: dict[str, datetime] = {}
    jobs = []
    with open(log_path, encoding="utf-8", errors="replace") as log:
        for line in log:
            found = _JOB_STATE.match(line)
            if not found:
                continue
            when, name, _, state = found.groups()
            at = datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.%f%z")
            if state == "RUNNING":
                started[name] = at
            elif state in ("FINISHED", "FAILED", "CANCELED") and name in started:
                jobs.append(FlinkJob(name, state, (at - started.pop(name)).total_seconds()))
    return jobs


def rest(master: str, path: str, seconds: float = _REST_SECONDS):
    """GET http://MASTER/PATH from Flink's REST API, parsed; OSError if it does not answer."""
    with urllib.request.urlopen(f"http://{master}{path}", timeout=seconds) as answer:
        return json.load(answer)


def running_job(master: str, name: str, still: Callable[[], bool] = lambda: True,
                seconds: float = math.inf) -> dict | None:
    """The cluster's job `name` (its `/jobs/overview` entry) once its tasks run, polled every
    0.5 s while `still()` (e.g. the run that submits it goes on), for up to `seconds`; None if
    it did not run by then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and still():
        for job in rest(master, "/jobs/overview")["jobs"]:
            if job["name"] == name and job["state"] == "RUNNING" and job["tasks"]["running"]:
                return job
        time.sleep(0.5)
    return None


def busy_taskmanagers(master: str) -> list[str]:
    """The resource ids of the cluster's TaskManagers with no free slot: with one slot each
    (engines/flink-conf.yaml), those running a job's tasks."""
    return [tm["id"] for tm in rest(master, "/taskmanagers")["taskmanagers"]
            if tm["freeSlots"] == 0]


def job_failures(master: str, jid: str) -> list[dict]:
    """The failures the JobManager recorded for a job (its exception history): each one
    restarted the job, or, its restarts spent, failed it."""
    return rest(master, f"/jobs/{jid}/exceptions")["exceptionHistory"]["entries"]


def failure_text(failure: dict) -> str:
    """A recorded failure's TaskManager, exception and stack trace: where to look for what was
    lost (a killed TaskManager's resource id)."""
    return "\n".join((failure.get("taskManagerId") or "", failure["exceptionName"],
                      failure["stacktrace"]))


def jobs(engine: FlinkEngine, since: float) -> list[FlinkJob]:
    """The Flink jobs of a run that started at `since` (time.time()), in order: from the
    embedded cluster's log, or a cluster's REST API (`/jobs/overview`: its JobManager's own
    record, which the job server's log does not have). A cluster that no longer answers
    gives none (the run's summary must not fail for it)."""
    if engine.master == "[local]":
        return jobs_in_log(engine.log_path)
    try:
        overview = rest(engine.master, "/jobs/overview")["jobs"]
    except (OSError, ValueError, KeyError):
        return []
    ours = sorted((job for job in overview if job["start-time"] >= since * 1000 - 1000
                   and job["name"].startswith("nmt-")), key=lambda job: job["start-time"])
    return [FlinkJob(job["name"], job["state"], job["duration"] / 1000) for job in ours]


_NO_BUFFERS = re.compile(r"Insufficient number of network buffers: required (\d+), but only "
                         r"(\d+) available")


def _failed_job_text(master: str) -> str:
    """The JobManager's own record of the newest failed nmt job: its root exception, causes
    and all (the error Beam hands Python ends before the cause, e.g. no free slot)."""
    failed = [job for job in rest(master, "/jobs/overview")["jobs"]
              if job["state"] == "FAILED" and job["name"].startswith("nmt-")]
    if not failed:
        return ""
    newest = max(failed, key=lambda job: job["start-time"])
    return rest(master, f"/jobs/{newest['jid']}/exceptions").get("root-exception") or ""


def failure_reason(engine: FlinkEngine, err: BaseException) -> str | None:
    """Why a Flink job failed, in words a user can act on, when the error is one the cluster's
    settings or state explain; None for any other."""
    text = ""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:  # Beam re-raises: the cause may be deeper
        seen.add(id(err))
        text += str(err) + "\n"
        err = err.__cause__ or err.__context__
    if engine.master != "[local]":
        try:
            text += _failed_job_text(engine.master)
        except OSError:
            return (f"the Flink cluster's JobManager at {engine.master} stopped answering "
                    "while the job ran")
        except (ValueError, KeyError):
            pass  # not Flink's REST API as this module knows it: the error's own words
    found = _NO_BUFFERS.search(text)
    if found:
        return (f"a TaskManager had {found[2]} free network buffers where the job needs "
                f"{found[1]}: give each TaskManager more network memory "
                "(taskmanager.memory.network.fraction, .min and .max in flink-conf.yaml; "
                "engines/flink-conf.yaml has the measured sizes)")
    if "NoResourceAvailableException" in text:
        return ("no TaskManager offered a slot within the cluster's slot.request.timeout, "
                "after its restarts: start TaskManagers (python -m engines.flink_cluster "
                "status shows them)")
    return None

"""The few lines that end `nmt run`: what ran and how long, how good the model is, whether it
was blessed (and if not, which thresholds it missed), where it was pushed, what to do next.

`summary_lines` builds them from plain data (`RunFacts`); `collect` reads that data from ML
Metadata (metadata/runs.py, metadata/artifacts.py) after a run.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import sys
from typing import Callable, Sequence

from metadata.artifacts import list_artifacts
from metadata.runs import get_run
from metadata.store import connect, sqlite_config
from pipeline.config import PIPELINE_NAME, PipelineConfig, default_pipeline_root
from metadata.signatures import signature


@dataclasses.dataclass(frozen=True)
class ComponentTime:
    name: str
    state: str  # executed, cached (metadata's component states)
    seconds: float


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The Evaluator's judgement of this run's candidate model: its eval-split scores against
    the first reference (the gate) and against all."""
    bleu_1ref: float
    chrf_1ref: float
    bleu: float
    chrf: float
    blessed: bool
    min_bleu: float
    max_metric_drop: float
    baseline_model: int | None  # the latest blessed model it was compared with
    failures: tuple[str, ...] = ()  # one phrase per failed threshold


@dataclasses.dataclass(frozen=True)
class RunFacts:
    wall_seconds: float
    components: tuple[ComponentTime, ...]
    pipeline_root: str | None = None  # None: the default, which `nmt` finds without a flag
    pipeline_name: str | None = None  # None: the default one
    to_component: str | None = None  # where --to stopped the run (not at its last component)
    verdict: Verdict | None = None  # None: the Evaluator did not run
    pushed_version: str | None = None
    pushed_path: str | None = None
    nmt: str = "nmt"  # how to call the running nmt from here (nmt_command)
    engine: str | None = None  # the Beam engine of the data steps
    flink_jobs: tuple = ()  # flink.FlinkJob of each Beam component, on Flink


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def _blessing(verdict: Verdict) -> str:
    if not verdict.blessed:
        return "no: " + "; ".join(verdict.failures)
    if verdict.baseline_model is None:
        return (f"yes: single-reference BLEU >= {verdict.min_bleu:g} (the first model: there "
                "is no blessed one to compare with)")
    return (f"yes: single-reference BLEU >= {verdict.min_bleu:g}, and neither its BLEU nor "
            f"chrF more than {verdict.max_metric_drop:g} below the latest blessed model "
            f"(model {verdict.baseline_model})")


def score_lines(bleu_1ref: float, chrf_1ref: float, bleu: float, chrf: float) -> list[str]:
    """The eval split's scores, each naming its references, then their sacreBLEU signatures."""
    return [f"Eval split, one reference: BLEU {bleu_1ref:.2f}, chrF {chrf_1ref:.2f} "
            "(these gate the Pusher)",
            f"Eval split, all references: BLEU {bleu:.2f}, chrF {chrf:.2f}",
            f"Signatures: BLEU {signature('bleu', 1)} (all references: nrefs:var); "
            f"chrF {signature('chrf', 1)}"]


def _flags(**values: str | None) -> str:
    """` --pipeline-root /r` for pipeline_root="/r"; nothing for None."""
    return "".join(f" --{name.replace('_', '-')} {shlex.quote(value)}"
                   for name, value in values.items() if value is not None)


def nmt_command(argv0: str | None = None, which: Callable[[str], str | None] = shutil.which,
                cwd: str | None = None) -> str:
    """How a user calls the running `nmt` from here: `nmt` when that is the one PATH finds,
    else its path, relative to the working directory when under it: `.venv/bin/nmt` after a
    `make run` in a virtualenv that is not activated. `argv0` (default sys.argv[0]) not
    naming an `nmt` program (`python -m cli`): `nmt`."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(argv0) != "nmt" or os.sep not in argv0:  # not a script, or from PATH
        return "nmt"
    cwd = cwd or os.getcwd()
    running = os.path.normpath(os.path.join(cwd, argv0))
    found = which("nmt")
    if found and os.path.realpath(os.path.join(cwd, found)) == os.path.realpath(running):
        return "nmt"
    relative = os.path.relpath(running, cwd)
    return shlex.quote(running if relative.startswith(os.pardir) else relative)


def _next_command(facts: RunFacts) -> str:
    if facts.to_component:
        return (f"the same `{facts.nmt} run` without --to {facts.to_component} goes on from "
                "here (finished components are cached)")
    if facts.pushed_version:
        flags = _flags(pipeline_root=facts.pipeline_root, pipeline_name=facts.pipeline_name)
        return f'{facts.nmt} translate{flags} "Hello."'
    return (f"{facts.nmt} report{_flags(pipeline_root=facts.pipeline_root)}  (this run's "
            "metrics next to the previous ones)")


def summary_lines(facts: RunFacts) -> list[str]:
    """The summary, one line each: times per component, BLEU/chrF, blessing, push, next."""
    stopped = f", stopped after {facts.to_component} (--to)" if facts.to_component else ""
    lines = [f"Run summary: the pipeline took {_duration(facts.wall_seconds)}{stopped}."]
    width = max((len(c.name) for c in facts.components), default=0)
    lines += [f"  {c.name:<{width}}  {c.seconds:7.1f} s  {c.state}" for c in facts.components]
    if facts.engine:
        lines.append(f"  Beam engine: {facts.engine}")
    lines += [f"    Flink job {job.name}: {job.seconds:.1f} s, {job.state.lower()}"
              for job in facts.flink_jobs]
    if facts.verdict:
        verdict = facts.verdict
        lines += ["  " + line for line in score_lines(verdict.bleu_1ref, verdict.chrf_1ref,
                                                      verdict.bleu, verdict.chrf)]
        lines.append(f"  Blessed: {_blessing(verdict)}")
    if not facts.to_component:
        lines.append(f"  Pushed: version {facts.pushed_version} to {facts.pushed_path}"
                     if facts.pushed_version else "  Pushed: not pushed")
    lines.append(f"  Next: {_next_command(facts)}")
    return lines


def failed_thresholds(result) -> list[str]:
    """One phrase per failed threshold of a TFMA ValidationResult."""
    phrases = []
    for per_slice in result.metric_validations_per_slice:
        for failure in per_slice.failures:
            key = failure.metric_key
            value = failure.metric_value.double_value.value
            what = (f"{key.name} changed by {value:+.3f} against the baseline"
                    if key.is_diff else f"{key.name} is {value:.3f}")
            phrases.append(f"{what} ({failure.message.strip() or 'threshold not met'})")
    return phrases or ["no threshold failed (see the validation result)"]


def _verdict(store, run: str, config: PipelineConfig) -> Verdict | None:
    blessings = list_artifacts(store, "ModelBlessing", run_id=run)
    if not blessings:
        return None
    judged = blessings[0]["properties"]
    failures: tuple[str, ...] = ()
    if not judged["blessed"]:
        import tensorflow_model_analysis as tfma  # slow to import: only for a rejected model

        evaluation = next(a for a in list_artifacts(store, "ModelEvaluation", run_id=run)
                          if a["id"] == judged["evaluation"])
        failures = tuple(failed_thresholds(tfma.load_validation_result(evaluation["uri"])))
    return Verdict(bleu_1ref=judged["bleu_1ref"], chrf_1ref=judged["chrf_1ref"],
                   bleu=judged["bleu"], chrf=judged["chrf"], blessed=judged["blessed"],
                   min_bleu=config.trainer_settings.bleu_threshold,
                   max_metric_drop=config.max_metric_drop,
                   baseline_model=judged["baseline_model"], failures=failures)


def collect(config: PipelineConfig, wall_seconds: float,
            to_component: str | None = None, engine: str | None = None,
            flink_jobs: Sequence = ()) -> RunFacts:
    """The facts of the newest run in the pipeline root's store (the one that just ended)."""
    store = connect(sqlite_config(config.metadata_path))
    run = get_run(store)
    components = tuple(ComponentTime(c["component"], c["state"], c["duration_s"] or 0.0)
                       for c in run["components"])
    names = {c.name for c in components}
    verdict = _verdict(store, run["run"], config) if "Evaluator" in names else None
    pushes = (list_artifacts(store, "PushedModel", run_id=run["run"])
              if "AtomicPusher" in names else [])
    pushed = next((p["properties"] for p in pushes if p["properties"]["pushed"]), {})
    return RunFacts(wall_seconds=wall_seconds, components=components,
                    pipeline_root=(None if config.pipeline_root == default_pipeline_root()
                                   else config.pipeline_root),
                    pipeline_name=(None if config.pipeline_name == PIPELINE_NAME
                                   else config.pipeline_name),
                    to_component=to_component,
                    verdict=verdict, pushed_version=pushed.get("version"),
                    pushed_path=pushed.get("destination"), nmt=nmt_command(),
                    engine=engine, flink_jobs=tuple(flink_jobs))

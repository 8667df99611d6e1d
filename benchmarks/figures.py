"""Renders the tables of today's figures from benchmarks/results/ into README.md and
BENCHMARKS.md, between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`.

Usage: python benchmarks/figures.py          # rewrite the tables (make figures)
       python benchmarks/figures.py --check  # exit 1 naming each table that differs
                                             # (make figures-check; tests/test_figures.py)

A table is declared in TABLES: its columns and its rows. A row reads one result file
(benchmarks/results.py's layout) and fills its cells from format templates over the file's
record, e.g. "{figures[dev_greedy][bleu]:.2f}"; a row whose file does not exist yet renders
"not measured yet". benchmarks/README.md says how to add a table.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import re
import statistics
import sys
from typing import Callable, NamedTuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:  # run as a script, from anywhere
    sys.path.insert(0, REPO)

from benchmarks import results  # noqa: E402

PAGES = ("README.md", "BENCHMARKS.md")
NOT_MEASURED = "not measured yet"
Cell = str | Callable[[dict], str]


@dataclasses.dataclass(frozen=True)
class Row:
    """One row per file: `source` is a result file's name in benchmarks/results/ (a glob gives
    one row per matching file), `cells` one template or function per column. With `items`,
    one row per element of the list it picks from the file's record, as `item` in the
    templates."""
    source: str
    cells: tuple[Cell, ...]
    items: Callable[[dict], list] | None = None


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]


def _cell(cell: Cell, record: dict) -> str:
    return cell(record) if callable(cell) else cell.format(**record)


def _machine(record: dict) -> str:
    """The machine kind in a few words: its CPU and the features that set its kernels."""
    machine = record["machine"]
    features = machine.get("cpu_features") or []
    kind = ("AMX" if "amx_bf16" in features else "AVX-512 bf16" if "avx512_bf16" in features
            else "AVX-512" if "avx512f" in features else "AVX2" if "avx2" in features else "")
    cpu = (machine.get("cpu_model") or "CPU").replace("(R)", "").replace(" Processor", "")
    return ", ".join(part for part in (cpu, kind, f"{machine.get('cores')} cores",
                                       machine.get("gpu")) if part)


def _source(record: dict) -> str:
    return f"`{record['file']}`"


def _speed(record: dict, variant: str, key: str = "sentences_per_second",
           model: int | None = None) -> float:
    """A translate_speed.py figure of one model it measured, by its place (default:
    DEFAULT_DECODING): the best round's sentences per second, or ms per sentence."""
    place = DEFAULT_DECODING if model is None else model
    value = list(record["figures"]["models"].values())[place][variant][key]
    return max(value) if isinstance(value, list) else value


def _long_bleu(record: dict, model: str) -> float:
    """A long_sentences.py model's BLEU on the dev lines of more than 30 English words."""
    return record["figures"]["models"][model]["bleu_over_30_words"]


def _greedy_and_beam(pair: "LongBudget", value: Callable[[dict, str], str]
                     ) -> Callable[[dict], str]:
    """`value` of today's recipe greedy / beam 4 in one budget ("–": beam not measured)."""
    return lambda record: " / ".join("–" if name is None else value(record, name)
                                     for name in (pair.today, pair.beam))


def _over_before(pair: "LongBudget") -> Callable[[dict], str]:
    """Today's recipe's long-line BLEU over 4b41846's, greedy / beam 4."""
    return _greedy_and_beam(pair, lambda record, name: (
        f"{_long_bleu(record, name) / _long_bleu(record, pair.before):.2f}×"))


def _scale_rows(record: dict, mode: str, size: int, component: str | None = None) -> list:
    """A scale.py result's completed rows of one Beam mode and corpus size (full corpora,
    not smoke ones), of one component or all."""
    return [row for row in record["figures"]["rows"]
            if row.get("status") == "ok" and row["mode"] == mode and row["size"] == size
            and not row.get("lines_per_copy") and component in (None, row["component"])]


def _speedup(size: int, key: str = "subprocess_s",
             mode: str = "multi_processing") -> Callable[[dict], str]:
    """How much faster a Beam mode (default: 2 workers) ran the data half than the in-memory
    DirectRunner, from a scale.py result: the in-memory seconds over the mode's, summed."""
    def cell(record: dict) -> str:
        seconds = {m: sum(row[key] for row in _scale_rows(record, m, size))
                   for m in ("in_memory", mode)}
        return (f"{seconds['in_memory'] / seconds[mode]:.2f}×"
                if seconds[mode] and seconds["in_memory"] else NOT_MEASURED)
    return cell


def _newest_rows(record: dict, mode: str, size: int) -> list:
    """_scale_rows of all components, each component's newest only (a result that holds two
    sittings of a mode counts each component once)."""
    return list({row["component"]: row for row in _scale_rows(record, mode, size)}.values())


def _data_half(mode: str, size: int, key: str, fold: Callable = sum) -> Callable[[dict], str]:
    """The data half's seconds (summed) or peak MB (the largest) over its components, from a
    scale.py result, for one Beam mode and corpus size."""
    def cell(record: dict) -> str:
        values = [row[key] for row in _newest_rows(record, mode, size)]
        return f"{fold(values):,.0f}" if values else NOT_MEASURED
    return cell


def _component(component: str, mode: str, size: int, key: str,
               digits: int = 1) -> Callable[[dict], str]:
    """One component's figure from a scale.py result (its newest row), "–" if not measured."""
    def cell(record: dict) -> str:
        rows = _scale_rows(record, mode, size, component)
        return f"{rows[-1][key]:,.{digits}f}" if rows else "–"
    return cell


def _failed(mode: str, size: int) -> Callable[[dict], str]:
    """The components of a scale.py result that failed in one Beam mode and corpus size, in
    their newest row (a later sitting's run of the component replaces a failed one; "–":
    none); the other cells of its row count only those that completed."""
    def cell(record: dict) -> str:
        newest = {row["component"]: row for row in record["figures"]["rows"]
                  if row["mode"] == mode and row["size"] == size}
        return ", ".join(component for component, row in newest.items()
                         if row.get("status") != "ok") or "–"
    return cell


def _at_peak(mode: str, size: int, kinds: tuple[str, ...]) -> Callable[[dict], str]:
    """What some process kinds held, together, at the data half's peak (its component of
    largest peak_rss_mb), from a scale.py result that split the peak by kind (a kind the mode
    did not have held nothing)."""
    def cell(record: dict) -> str:
        rows = _newest_rows(record, mode, size)
        if not rows:
            return NOT_MEASURED
        peak = max(rows, key=lambda row: row["peak_rss_mb"])
        return f"{sum(peak.get(f'at_peak_{kind}_mb', 0) for kind in kinds):,.0f}"
    return cell


def _named_models(record: dict) -> list[dict]:
    """A result's models, each with its name, one table row each."""
    return [{"name": name, **model} for name, model in record["figures"]["models"].items()]


def _versus_first(record: dict) -> dict | None:
    """A long_sentences.py model's paired comparison with its file's first model, on the
    whole dev set (None for the first model)."""
    return next((v["dev"] for k, v in record["item"].items() if k.startswith("against_")),
                None)


PEAK_COLUMNS = ("engine", "failed", "data half s", "peak MB", "at the peak, MB: nmt process",
                "Python workers", "JVM", "result file")
# scale.py's process kinds in PEAK_COLUMNS' order
PEAK_KINDS = (("runner",), ("workers",), ("jvm",))
# With a session cluster: its worker pool's SDK workers are Python workers; the run's JVM is
# its job server, the cluster's JobManager and TaskManagers columns of their own.
CLUSTER_COLUMNS = (*PEAK_COLUMNS[:3], "a lost TaskManager's cost", *PEAK_COLUMNS[3:6],
                   "JVM: nmt's (job server, embedded Flink)", "JobManager", "TaskManagers",
                   "result file")
CLUSTER_KINDS = (("runner",), ("workers", "worker_pool"), ("jvm",), ("jobmanager",),
                 ("taskmanagers",))
CLUSTER, LOST_TASKMANAGER = "flink_cluster", "flink_cluster_lost_taskmanager"


def _peak_cells(mode: str, kinds: tuple[tuple[str, ...], ...] = PEAK_KINDS
                ) -> tuple[Cell, ...]:
    """A Beam mode's peak over the data half at 16x, and what process kinds held then."""
    return (_data_half(mode, 16, "peak_rss_mb", max),
            *(_at_peak(mode, 16, together) for together in kinds))


def _peak_row(source: str, mode: str, label: str,
              kinds: tuple[tuple[str, ...], ...] = PEAK_KINDS,
              after_seconds: tuple[Cell, ...] = ()) -> Row:
    """A Beam mode's data half at 16x from a scale.py result that split the peak by process
    kind: what failed, the seconds (only if nothing did), `after_seconds`, the peak and who
    held it."""
    return Row(source, (
        label, _failed(mode, 16),
        lambda r: "–" if _failed(mode, 16)(r) != "–" else _data_half(mode, 16, "component_s")(r),
        *after_seconds, *_peak_cells(mode, kinds), _source))


def _loss_cost(record: dict) -> str:
    """What losing a TaskManager in Transform's job cost at 16x (scale.py's
    flink_cluster_lost_taskmanager): the data half's seconds and Transform's, each less the
    cluster's without a loss, and what happened to the job."""
    lost, whole = (_scale_rows(record, mode, 16) for mode in (LOST_TASKMANAGER, CLUSTER))
    if not (lost and whole):
        return NOT_MEASURED
    loss = lost[-1].get("taskmanager_loss") or {}
    if not loss.get("killed"):
        return f"none lost ({loss.get('reason')})"
    transform = [row.get("components_in_run", {}).get("Transform")  # ML Metadata's
                 for row in (lost[-1], whole[-1])]
    job = (f"restarted {loss['failures']}×" if loss.get("job_state") == "FINISHED"
           else str(loss.get("job_state")).lower())
    return (f"{lost[-1]['component_s'] - whole[-1]['component_s']:+,.0f} s"
            + (f", Transform {transform[0][1] - transform[1][1]:+,.0f} s" if all(transform)
               else "")
            + f" (killed {loss['killed_s_into_job']:.0f} s into Transform's job, {job})")


def _against_first(record: dict) -> str:
    """A model's dev BLEU, and its paired difference from the file's first model."""
    model = record["item"]
    against = _versus_first(record)
    if against is None:
        return f"{model['dev_bleu']:.2f}"
    return (f"{model['dev_bleu']:.2f} ({against['difference']:+.2f}, "
            f"{against['bootstrap_std']:.2f})")


LONG_COLUMNS = ("export", "BLEU, >30 words", "chrF, >30 words",
                "output/reference length, median / min", "loops, all lines", "lines warned",
                "dev BLEU, all lines (vs first: diff, sd)", "machine", "commit", "result file")
LONG_CELLS = ("{item[name]}", "{item[bleu_over_30_words]:.2f}", "{item[chrf_over_30_words]:.2f}",
              "{item[length_ratio_median]:.2f} / {item[length_ratio_min]:.2f}", "{item[loops]}",
              "{item[warned_lines]}", _against_first, _machine, "{commit}", _source)


def _chain_runs(record: dict) -> list[dict]:
    """A warm_chain.py result's runs, arm by arm, each with its arm and number."""
    return [{"arm": arm, "run": number, **run}
            for arm, state in record["figures"]["arms"].items()
            for number, run in enumerate(state["runs"], 1)]


def _started_from(record: dict) -> str:
    """What a chain's run started from: nothing, its base's training state or its served
    weights (all runs before training states existed; their results lack schedule_steps).
    The first state chains' results lack continued_from: the state was all they could use."""
    run = record["item"]
    if run["total_train_steps"] == run["train_steps"]:
        return "scratch"
    if "schedule_steps" in run and run.get("continued_from", "state") == "state":
        return "training state"
    return "served weights"


def _history_link(record: dict) -> str:
    """A link to the history section of a decision, named by its heading's first words."""
    section = record["item"]["section"]
    return (f"[{section.split(':')[0].split(' (')[0]}]"
            f"(docs/benchmarks-history.md#{_anchor(section)})")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _figure(label: str, source: str, value: Cell) -> Row:
    """A row of the table of today's figures: what, its value, where it was measured."""
    return Row(source, (label, value, _machine, "{commit}", _source))


GREEDY, BEAM, MS = "greedy, by length", "beam 4, by length", "ms_per_sentence"
GREEDY_INPUT, BEAM_INPUT = "greedy, input order", "beam 4, input order"
# The export before issue #67's changes (f223834's), 2f92848's (float32), then today's with
# float32 (the default) and with bfloat16 decoding weights, all from the same weights; "today"
# in single figures is the float32 export.
DECODING, DEFAULT_DECODING = "translate_speed_one_at_a_time_epyc_bf16.json", 2
# The export before issue #67's changes, then today's float32 and bfloat16 exports (the same
# weights as DECODING's), in a process set up as `nmt translate` sets up its own: one thread
# per op, a request per core at once.
SIDE_BY_SIDE_DECODING = "translate_speed_side_by_side_epyc_bf16.json"
# The AMD EPYC make run's model with the loop guard one pass per copy length, then in one
# pass, then the rotary model.
LOOP_GUARD_DECODING = "translate_speed_rotary_epyc_bf16.json"
SERVING_PROFILE = "serving_profile_avx2.json"  # f223834's export
SERVING_PROFILE_TODAY = "serving_profile_attention_epyc_bf16.json"  # today's float32 export
# The same comparisons on an Intel Xeon with AVX-512 but no bfloat16 units (float32 only), one
# sitting, from a `make run`'s weights there: f223834's export and today's float32 one, one
# request at a time and side by side; the Evaluator with each checkout's code and export.
XEON_DECODING = "translate_speed_one_at_a_time_xeon_f32.json"
XEON_SIDE_BY_SIDE = "translate_speed_side_by_side_xeon_f32.json"
XEON_EVALUATOR = "evaluator_time_xeon.json"
# And on an Intel Xeon with AMX (bfloat16 matrix units), one sitting, from a `make run`'s
# weights there: f223834's export, today's float32 and today's bfloat16 one, one request at a
# time; the Evaluator with each checkout's code and export.
AMX_DECODING = "translate_speed_one_at_a_time_amx.json"
AMX_EVALUATOR = "evaluator_time_amx.json"
# And on an Intel Xeon with AVX-512 bfloat16 instructions but no AMX, one sitting, from a `make
# run`'s weights there (float32 by its probe): f223834's export and today's, side by side as
# `nmt translate` sets its process up (today's: without Grappler); `nmt evaluate` as a user runs
# it with f223834's code and export, 7257a38's code and today's.
BF16_XEON_SIDE_BY_SIDE = "translate_speed_side_by_side_xeon_bf16.json"
BF16_XEON_EVALUATE = "evaluate_time_xeon_bf16.json"
# The AMX Xeon again, a later sitting, from another `make run`'s weights there: f223834's
# export, today's float32 and bfloat16 ones side by side as `nmt translate` sets its process
# up; the Evaluator with each checkout's code and export (today's: its model without Grappler).
AMX_SIDE_BY_SIDE = "translate_speed_side_by_side_amx.json"
AMX_EVALUATOR_GRAPPLER = "evaluator_time_grappler_amx.json"
AMX_EVALUATE = "evaluate_time_amx.json"  # f223834, today float32, today bfloat16
# An AMD EPYC with AVX-512 bfloat16 instructions, one sitting, from a `make run`'s weights
# there, once decode_precision "auto" became the default: f223834's export, today's float32
# one and today's default one (its probe chose bfloat16 there), side by side as `nmt translate`
# sets its process up; the Evaluator and `nmt evaluate` with each checkout's code and export.
EPYC_AUTO_SIDE_BY_SIDE = "translate_speed_side_by_side_epyc_bf16_auto.json"
EPYC_AUTO_EVALUATOR = "evaluator_time_auto_epyc_bf16.json"
EPYC_AUTO_EVALUATE = "evaluate_time_auto_epyc_bf16.json"
# Dev-set BLEU of today's export decoding in bfloat16 against float32, paired bootstrap.
DECODE_PRECISION_BLEU = "decode_precision_paired_epyc_bf16.json"
# The Evaluator: f223834's code and export, 90671de's code (the merged batches) with
# 2f92848's export, 086e936's (greedy sub-batches of 256) with its export, and today's with its
# float32 and its bfloat16 export.
EVALUATOR_TIME = "evaluator_time_frozen_epyc_bf16.json"
# The same export, the Evaluator's code before and after sacreBLEU's statistics moved into a
# TFMA preprocessor.
EVALUATOR_STATISTICS = "evaluator_time_preprocessor_avx2.json"
# One model's export by the code before and after Transform's layer left the object graph.
EXPORT_TIME = "export_time_avx2.json"
# Decoding of those two exports of the default recipe's weights (before / today).
EXPORT_DECODING = "translate_speed_export_avx2.json"


def _export_seconds(record: dict) -> str:
    """Each checkout's median export time (before / today), and the translations that differ."""
    checkouts = record["figures"]["checkouts"].values()
    differ = max(n for c in checkouts for n in c["translations_differing_from_first_checkout"]
                 .values())
    return (" / ".join(f"{c['export_median_seconds']:.1f}" for c in checkouts)
            + f" ({differ} of {record['figures']['dev_lines']} dev translations differ)")


def _differing(record: dict) -> int:
    """A translate_speed.py result's outputs, over all variants, that differ from the first
    model's."""
    return sum(variant.get("outputs_differing_from_the_first_model", 0)
               for model in record["figures"]["models"].values() for variant in model.values()
               if isinstance(variant, dict))


def _faster_than_before(variant: str, today: int | None = None) -> Callable[[dict], str]:
    """Today's export's (model `today`, default DEFAULT_DECODING) sentences per second over
    the first model's (best rounds)."""
    return lambda r: f"{_speed(r, variant, model=today) / _speed(r, variant, model=0):.2f}×"


def _export_rows(record: dict, exports: tuple[str, ...]) -> list[dict]:
    """A translate_speed.py result's variants, as rows: each of its first models' best
    sentences per second under the names `exports` (which end with "float32", "bfloat16"),
    and the outputs of those two that differ from the first model's."""
    models = dict(zip(exports, record["figures"]["models"].values()))
    differ = "outputs_differing_from_the_first_model"
    return [{"variant": name,
             **{export: max(model[name]["sentences_per_second"])
                for export, model in models.items()},
             "differ": f"{models['float32'][name][differ]} / {figures[differ]}",
             "sentences": figures["sentences"]}
            for name, figures in models["bfloat16"].items()]


def _variants(record: dict) -> list[dict]:
    """DECODING's rows: before, 2f92848's and today's export (float32, bfloat16), with the
    first request's seconds of before's and today's float32."""
    before, _, float32 = list(record["figures"]["models"].values())[:3]
    return [{**row, "first": f"{min(before[row['variant']]['first_request_seconds']):.1f} / "
                             f"{min(float32[row['variant']]['first_request_seconds']):.1f}"}
            for row in _export_rows(record, ("before", "previous", "float32", "bfloat16"))]


def _bleu_chrf(record: dict) -> str:
    """Each model's `nmt evaluate` BLEU (chrF) in a translate_speed.py result."""
    return " / ".join(f"{v['bleu']:.2f} ({v['chrf']:.2f})"
                      for v in record["figures"]["nmt_evaluate"].values())


def _beside(record: dict, name: str) -> dict:
    """The result file `name` in the directory `record` was read from."""
    return results.read(os.path.join(os.path.dirname(record["path"]), name))


def _side_by_side_variants(record: dict) -> list[dict]:
    """A side-by-side translate_speed.py result's variants, as rows: before's export and
    today's (float32, bfloat16), and today's float32 over its speed one request at a time (the
    DECODING result beside it)."""
    before, float32, bfloat16 = list(record["figures"]["models"].values())[:3]
    alone = _beside(record, DECODING)
    return [{"variant": name, "before": max(before[name]["sentences_per_second"]),
             "float32": max(float32[name]["sentences_per_second"]),
             "bfloat16": max(figures["sentences_per_second"]),
             "alone": _speed(alone, name), "sentences": figures["sentences"]}
            for name, figures in bfloat16.items()]


def _xeon_variants(record: dict) -> list[dict]:
    """XEON_DECODING's variants as rows: before's export and today's float32 one, one request at
    a time and side by side (the XEON_SIDE_BY_SIDE result beside it)."""
    side = _beside(record, XEON_SIDE_BY_SIDE)
    (before, today), (before_side, today_side) = (
        list(r["figures"]["models"].values())[:2] for r in (record, side))
    differ = "outputs_differing_from_the_first_model"
    return [{"variant": name, "before": max(before[name]["sentences_per_second"]),
             "today": max(figures["sentences_per_second"]),
             "before_side": max(before_side[name]["sentences_per_second"]),
             "today_side": max(today_side[name]["sentences_per_second"]),
             "differ": f"{figures[differ]} / {today_side[name][differ]}",
             "sentences": figures["sentences"]}
            for name, figures in today.items()]


def _before_today_rows(record: dict) -> list[dict]:
    """A translate_speed.py result of two models, before's export and today's, as rows: their
    best sentences per second, today's outputs that differ, and the first requests' seconds."""
    before, today = list(record["figures"]["models"].values())[:2]
    return [{"variant": name, "before": max(before[name]["sentences_per_second"]),
             "today": max(figures["sentences_per_second"]),
             "differ": figures["outputs_differing_from_the_first_model"],
             "first": f"{min(before[name]['first_request_seconds']):.1f} / "
                      f"{min(figures['first_request_seconds']):.1f}",
             "sentences": figures["sentences"]}
            for name, figures in today.items()]


def _three_exports_rows(record: dict) -> list[dict]:
    """_export_rows of before's export, today's float32 and bfloat16 ones, with each one's
    first request's seconds."""
    models = list(record["figures"]["models"].values())[:3]
    return [{**row, "first": " / ".join(
        f"{min(model[row['variant']]['first_request_seconds']):.1f}" for model in models)}
        for row in _export_rows(record, ("before", "float32", "bfloat16"))]


def _over_first_model(record: dict) -> str:
    """Each later model's best Evaluator time over the first's, in an evaluator_time.py
    result."""
    models = [min(v["seconds"]) for v in record["figures"]["models"].values()]
    return " / ".join(f"{today / models[0]:.2f}" for today in models[1:])


def _stages(record: dict) -> list[dict]:
    """A serving_profile.py result's stages, with their share of the greedy signature."""
    seconds = record["figures"]["seconds"]
    whole = seconds["whole signature, greedy"]
    return [{"stage": stage, "seconds": value,
             "share": f"{value / whole:.0%}" if "beam" not in stage else "–"}
            for stage, value in seconds.items()]


def _per_model(record: dict, key: str, fold: Callable = min) -> str:
    """`key` of each model in a result's figures[key] (before / today), folded over rounds."""
    return " / ".join(f"{fold(v['seconds']):.0f}" for v in record["figures"][key].values())


def _evaluate_over_before(record: dict, today: int = -1) -> str:
    """The first checkout's seconds over checkout `today`'s (by default the last) in an
    evaluate_time.py result, best rounds / medians."""
    checkouts = list(record["figures"]["checkouts"].values())
    before, today = checkouts[0]["seconds"], checkouts[today]["seconds"]
    return (f"{min(before) / min(today):.2f}× / "
            f"{statistics.median(before) / statistics.median(today):.2f}×")


def _same_scores(record: dict) -> str:
    """Whether every checkout of an evaluate_time.py result scored and checked alike."""
    scores = {(v["bleu"], v["chrf"], v["overlap"]["seen_normalized"])
              for v in record["figures"]["checkouts"].values()}
    return " (the same BLEU, chrF and seen lines)" if len(scores) == 1 else " (scores differ)"


# Flink's rows in these files ran with Java's default heap, before flink.JOB_SERVER_HEAP.
ENGINES = (("in_memory", "DirectRunner, in memory"), ("multi_processing",
           "DirectRunner, 2 workers"), ("flink", "Flink, Java's default JVM heap"))
ENGINES_16X = (*ENGINES, ("flink_heap_1g", "Flink, 1 GiB JVM heap (today's default)"))
ENGINES_HEAP = (ENGINES[1], ("flink", "Flink, 1 GiB JVM heap (the default)"),
                ("flink_heap_512m", "Flink, 512 MiB JVM heap"),
                ("flink_heap_512m_serial", "Flink, 512 MiB JVM heap, serial collector"))

class LongBudget(NamedTuple):
    """Today's recipe against 4b41846's, both trained in one budget on one machine kind and
    translated in one long_sentences.py sitting: the export names in its result file."""
    budget: str
    source: str
    today: str
    beam: str | None  # today's recipe with beam search of 4, if measured
    before: str


# Issue #56's goal by training budget. At 4,000 steps today's recipe is `joins_4`, before the
# loop guard's last two changes (serving only: its greedy long lines score the same with them).
LONG_BUDGETS = (
    LongBudget("4,000 steps", "long_sentences_training_epyc_bf16.json", "joins_4", None,
               "before"),
    LongBudget("30 minutes (the default)", "long_sentences_budget_epyc_bf16.json", "default",
               "default_beam_4", "before_budget"),
    LongBudget("60 minutes", "long_sentences_budget60_epyc_bf16.json", "default_60",
               "default_60_beam_4", "before_60"),
)
DEFAULT_BUDGET = LONG_BUDGETS[1]
# The exports of benchmarks/long_sentences.py's results, as decisions against each file's
# first export (named here).
LONG_SENTENCES_HISTORY = "Long sentences translated whole (issue #56), 2026-11-28"
LONG_SENTENCE_FILES = {
    "long_sentences_epyc_bf16.json": "the same weights as the Trainer exported them at "
                                     "4b41846 (AMD EPYC, bf16)",
    "long_sentences_training_epyc_bf16.json": "4b41846's default, trained the same 4,000 "
                                              "steps, as exported then (AMD EPYC, bf16)",
    "long_sentences_letters_epyc_bf16.json": "joins_4 as its Trainer exported it (AMD EPYC, "
                                             "bf16)",
    "long_sentences_beam_epyc_bf16.json": "default_letters, greedy (AMD EPYC, bf16)",
    "long_sentences_rotary_epyc_bf16.json": "the default `make run`'s weights, greedy, the "
                                            "guard in one pass (AMD EPYC, bf16)",
    "long_sentences_subword_epyc_bf16.json": "the default `make run`'s weights, greedy (AMD "
                                             "EPYC, bf16)",
}
LONG_SENTENCE_EXPORTS = {
    "long_sentences_epyc_bf16.json": {
        "clauses": {"change": "a sentence over the model's length translated in pieces cut at "
                              "its clauses, with the loop guard (serving)", "kept": "yes"},
        "whole": {"change": "every sentence translated whole, positions beyond the trained "
                            "length, with the loop guard (serving)", "kept": "no"},
        "clauses_no_guard": {"change": "clause pieces without the loop guard (serving)",
                             "kept": "no"},
        "clauses_35": {"change": "clause pieces of at most 35 tokens, not 50 (serving)",
                       "kept": "no"},
        "clauses_25": {"change": "clause pieces of at most 25 tokens, not 50 (serving)",
                       "kept": "no"},
    },
    "long_sentences_training_epyc_bf16.json": {
        "joins_4": {"change": "training pairs joined 2 to 4 (windows of four), up to 128 "
                              "tokens; sentences up to 128 tokens translated whole",
                    "kept": "yes: long lines whole, the whole set within noise or better"},
        "joins_8": {"change": "training pairs joined 2 to 8, up to 128 tokens", "kept": "no"},
        "joins_4_pieces_50": {"change": "joins of 2 to 4, served in clause pieces of 50 "
                                        "tokens", "kept": "no"},
        "joins_8_pieces_50": {"change": "joins of 2 to 8, served in clause pieces of 50 "
                                        "tokens", "kept": "no"},
    },
    "long_sentences_letters_epyc_bf16.json": {
        "joins_4_letters": {"change": "the loop guard counts letters inside a word "
                                      "(serving)",
                            "kept": "yes: no loop left, the rest unchanged"},
    },
    "long_sentences_beam_epyc_bf16.json": {
        "default_letters_beam_4": {"change": "beam search of 4 (`--beam 4`)",
                                   "kept": "as an option: greedy stays the default (several "
                                           "times faster)"},
        "ngram_10": {"change": "the loop guard over copies of up to 10 pieces, not 6 (serving)",
                     "kept": "yes: beam search's last loop gone, greedy unchanged"},
        "ngram_10_beam_4": {"change": "beam search of 4 with the guard over 10 pieces",
                            "kept": "yes"},
    },
    "long_sentences_rotary_epyc_bf16.json": {
        "default_old_guard": {"change": "the loop guard one pass per copy length, as before "
                                        "(serving)",
                              "kept": "no: the same translations, slower"},
        "rotary": {"change": "rotary positions in self-attention instead of added sinusoids, "
                             "trained in the same 30-minute budget",
                   "kept": "no: long lines shorter and lower, the whole set the same"},
        "rotary_beam_4": {"change": "rotary positions, beam search of 4", "kept": "no"},
    },
    "long_sentences_subword_epyc_bf16.json": {
        "subword": {"change": "subword regularization (`subword_alpha=0.2`, a segmentation "
                              "drawn from the 64 best each epoch), trained in the same "
                              "30-minute budget",
                    "kept": "no: the whole set lower, the long lines the same"},
        "subword_beam_4": {"change": "subword regularization, beam search of 4", "kept": "no"},
        "subword_mild": {"change": "subword regularization with a milder draw "
                                   "(`subword_alpha=0.5`), the same budget", "kept": "no"},
        "subword_mild_beam_4": {"change": "the milder draw, beam search of 4", "kept": "no"},
    },
}


TABLES = (
    Table("scores", ("machine", "commit", "steps", "`make run`, min", "dev BLEU, greedy",
                     "dev BLEU, beam 4", "test split BLEU, one reference", "dev chrF, greedy"),
          (Row("make_run_*.json", (
              _machine, "{commit}", "{figures[steps]:,}", "{figures[minutes]:.0f}",
              "{figures[dev_greedy][bleu]:.2f}", "{figures[dev_beam][bleu]:.2f}",
              "{figures[test_greedy][bleu_one_reference]:.2f}",
              "{figures[dev_greedy][chrf]:.2f}")),)),
    Table("make-run", ("machine", "commit", "steps", "training, min", "`make run`, min",
                       "peak memory, GB", "dev BLEU, greedy / beam 4", "dev chrF",
                       "test BLEU, one reference", "result file"),
          (Row("make_run_*.json", (
              _machine, "{commit}", "{figures[steps]:,}", "{figures[training_minutes]:.1f}",
              "{figures[minutes]:.1f}", "{figures[peak_memory_gb]:.1f}",
              "{figures[dev_greedy][bleu]:.2f} / {figures[dev_beam][bleu]:.2f}",
              "{figures[dev_greedy][chrf]:.2f}", "{figures[test_greedy][bleu_one_reference]:.2f}",
              _source)),)),
    Table("today", ("figure", "value", "machine", "commit", "result file"), (
        _figure("run-to-run difference, dev BLEU (paired bootstrap sd)", "run_to_run_amx.json",
                "{figures[difference]:+.2f} ({figures[bootstrap_sd]:.2f})"),
        _figure("dev BLEU below the eval split's: references / lengths / content", "gap.json",
                "{figures[references]:.1f} / {figures[lengths]:.1f} / {figures[content]:.1f}"),
        _figure("dev English words that fra.txt lacks: lines over 30 words / the rest",
                "long_lines_cause_epyc_bf16.json",
                "{figures[unseen_share_long_mean]:.0%} / {figures[unseen_share_other_mean]:.0%}"),
        _figure("dev lines over 30 words, BLEU over 4b41846's in the same 30-minute budget, "
                "greedy / beam 4 (the issue #56 goal: 2×)", DEFAULT_BUDGET.source,
                _over_before(DEFAULT_BUDGET)),
        _figure("decoding, sentences/s, greedy / beam 4 (best round)", DECODING,
                lambda r: f"{_speed(r, GREEDY):.0f} / {_speed(r, BEAM):.0f}"),
        _figure("beam 4's time per sentence over greedy's", DECODING,
                lambda r: f"{_speed(r, BEAM, MS) / _speed(r, GREEDY, MS):.1f}×"),
        _figure("time per sentence, the loop guard in one pass against one pass per copy "
                "length, greedy / beam 4", LOOP_GUARD_DECODING,
                lambda r: " / ".join(f"{_speed(r, v, MS, 1) / _speed(r, v, MS, 0):.2f}×"
                                     for v in (GREEDY, BEAM))),
        _figure("decoding in the request's order, today's export over the one before, greedy / "
                "beam 4", DECODING, lambda r: " / ".join(
                    _faster_than_before(v)(r) for v in (GREEDY_INPUT, BEAM_INPUT))),
        _figure("`nmt evaluate` on the dev set (today's command, requests side by side), s, "
                "before's export / 2f92848's / today float32 / today bfloat16", DECODING,
                lambda r: _per_model(r, "nmt_evaluate")),
        _figure("decoding side by side (a core per request) over one request at a time, "
                "today's float32 export, greedy / beam 4 in the request's order",
                SIDE_BY_SIDE_DECODING, lambda r: " / ".join(
                    f"{item['float32'] / item['alone']:.2f}×"
                    for item in _side_by_side_variants(r)
                    if item["variant"] in (GREEDY_INPUT, BEAM_INPUT))),
        _figure("dev BLEU (chrF) by `nmt evaluate`, greedy, before / 2f92848 / today float32 / "
                "today bfloat16", DECODING, _bleu_chrf),
        _figure("dev BLEU, bfloat16 decoding weights against float32 (paired bootstrap sd)",
                DECODE_PRECISION_BLEU, lambda r: " ".join(
                    f"{c['difference']:+.2f} ({c['bootstrap_std']:.2f})"
                    for c in r["figures"]["candidates"].values())),
        _figure("the Evaluator in `make run`'s setting, s, before / merged batches / 086e936 "
                "(greedy sub-batches of 256) / today float32 / today bfloat16 (today's process "
                "with its imports frozen, as `nmt run`'s)", EVALUATOR_TIME,
                lambda r: _per_model(r, "models")),
        _figure("the Evaluator in `make run`'s setting on a float32 Xeon, s, before / today "
                "(best of 2 rounds)", XEON_EVALUATOR, lambda r: _per_model(r, "models")),
        _figure("`nmt evaluate` on the dev set on a float32 Xeon (today's command), s, "
                "before's export / today's", XEON_SIDE_BY_SIDE,
                lambda r: _per_model(r, "nmt_evaluate")),
        _figure("the Evaluator in `make run`'s setting on an AMX Xeon, s, before / today float32 "
                "/ today bfloat16 (best of 2 rounds)", AMX_EVALUATOR,
                lambda r: _per_model(r, "models")),
        _figure("`nmt evaluate` on the dev set on an AMX Xeon (today's command), s, before's "
                "export / today float32 / today bfloat16", AMX_DECODING,
                lambda r: _per_model(r, "nmt_evaluate")),
        _figure("dev BLEU (chrF) by `nmt evaluate` on an AMX Xeon, greedy, before / today "
                "float32 / today bfloat16", AMX_DECODING, _bleu_chrf),
        _figure("the Evaluator in `make run`'s setting on an AMX Xeon, later, s, before / today "
                "float32 / today bfloat16 (the model without Grappler; best of 2 rounds)",
                AMX_EVALUATOR_GRAPPLER, lambda r: _per_model(r, "models")),
        _figure("the same, today's time over before's (the issue #67 goal: at most 0.5), float32 "
                "/ bfloat16", AMX_EVALUATOR_GRAPPLER, _over_first_model),
        _figure("`nmt evaluate` on the dev set on that AMX Xeon, later (requests side by side, no "
                "overlap check), s, before's export / today float32 / today bfloat16 (best of 2 "
                "rounds)", AMX_SIDE_BY_SIDE, lambda r: _per_model(r, "nmt_evaluate")),
        _figure("dev BLEU (chrF) by `nmt evaluate` there, greedy, before / today float32 / today "
                "bfloat16", AMX_SIDE_BY_SIDE, _bleu_chrf),
        _figure("`nmt evaluate` as a user runs it after `nmt run` on that AMX Xeon, later, s, "
                "f223834 with its own export / today float32 / today bfloat16 (best of 3 "
                "rounds)", AMX_EVALUATE, lambda r: _per_model(r, "checkouts")),
        _figure("the same, f223834's time over today's float32 (the issue #67 goal: 3×), best "
                "rounds / medians", AMX_EVALUATE, lambda r: _evaluate_over_before(r, 1)),
        _figure("the same over today's bfloat16", AMX_EVALUATE,
                lambda r: _evaluate_over_before(r, 2)),
        _figure("the Evaluator in `make run`'s setting on an AVX-512 bfloat16 EPYC, today's "
                "default decoding precision (auto: bfloat16 there), s, before / today float32 / "
                "today's default (best of 2 rounds)", EPYC_AUTO_EVALUATOR,
                lambda r: _per_model(r, "models")),
        _figure("the same, today's time over before's (the issue #67 goal: at most 0.5), float32 "
                "/ today's default", EPYC_AUTO_EVALUATOR, _over_first_model),
        _figure("`nmt evaluate` as a user runs it after `nmt run` there, s, f223834 with its "
                "own export / today float32 / today's default (best of 3 rounds)",
                EPYC_AUTO_EVALUATE, lambda r: _per_model(r, "checkouts")),
        _figure("the same, f223834's time over today's default (the issue #67 goal: 3×), best "
                "rounds / medians", EPYC_AUTO_EVALUATE, lambda r: _evaluate_over_before(r, 2)),
        _figure("dev BLEU (chrF) by `nmt evaluate` there, greedy, before / today float32 / today's "
                "default", EPYC_AUTO_SIDE_BY_SIDE, _bleu_chrf),
        _figure("`nmt evaluate` as a user runs it after `nmt run` (the newest pushed model, the "
                "training-overlap check), s, f223834 with its own export / 61daa94 / 56fb44c "
                "(the overlap check's reader) / ba936f1 (Keras 2 from the start) / today (each "
                "line's sacreBLEU statistics once) (best of 3 rounds)", "evaluate_time_avx2.json",
                lambda r: _per_model(r, "checkouts") + _same_scores(r)),
        _figure("the same, f223834's time over today's (the issue #67 goal: 3×), best rounds / "
                "medians", "evaluate_time_avx2.json", _evaluate_over_before),
        _figure("`nmt evaluate` on the dev set on a bfloat16 Xeon without AMX (requests side by "
                "side, no overlap check), s, before's export / today's (best of 2 rounds)",
                BF16_XEON_SIDE_BY_SIDE, lambda r: _per_model(r, "nmt_evaluate")),
        _figure("`nmt evaluate` as a user runs it after `nmt run` on that Xeon, s, f223834 with "
                "its own export / 7257a38 / today (Grappler off, the overlap check's "
                "normalization in C) (best of 3 rounds)", BF16_XEON_EVALUATE,
                lambda r: _per_model(r, "checkouts") + _same_scores(r)),
        _figure("the same, f223834's time over today's (the issue #67 goal: 3×), best rounds / "
                "medians", BF16_XEON_EVALUATE, _evaluate_over_before),
        _figure("the Evaluator, s, sacreBLEU's statistics for each slice / once per example",
                EVALUATOR_STATISTICS, lambda r: _per_model(r, "models")),
        _figure("the Trainer's export of the default recipe's weights, s, before / today (median "
                "of 3)", EXPORT_TIME, _export_seconds),
        _figure("the same for the smoke profile's (the tests')", "export_time_smoke_avx2.json",
                _export_seconds),
        _figure("decoding, the default recipe's export today over 58104d3's, greedy by length "
                "/ in order, beam 4 by length / in order (best rounds)", EXPORT_DECODING,
                lambda r: " / ".join(_faster_than_before(v, today=1)(r) for v in (
                    GREEDY, GREEDY_INPUT, BEAM, BEAM_INPUT)) + f" ({_differing(r)} outputs "
                "differ)"),
        _figure("`nmt evaluate` on the dev set with those exports, s, 58104d3's / today's",
                EXPORT_DECODING, lambda r: _per_model(r, "nmt_evaluate")),
        _figure("training step, ms, mixed_bfloat16 / float32",
                "step_time_loss_gradient_amx.json",
                "{figures[ms_per_step_median][bf16]:.0f} / "
                "{figures[ms_per_step_median][f32]:.0f}"),
        _figure("training step, ms, float32", "step_time_vocab_avx2.json",
                "{figures[ms_per_step_median][f32_8k]:,.0f}"),
        _figure("fra.txt: lines read / examples (train, eval, test)", "data_half.json",
                "{figures[lines_read]:,} / {figures[examples]:,} "
                "({figures[split_sizes][train]:,}, {figures[split_sizes][eval]:,}, "
                "{figures[split_sizes][test]:,})"),
        _figure("the data half at 16× as one run, s, in memory / 2 workers / Flink",
                "scale_engines_16x_one_run.json",
                lambda r: " / ".join(_data_half(mode, 16, "component_s")(r)
                                     for mode in ("in_memory", "multi_processing", "flink"))),
        _figure("the same, peak MB, in memory / 2 workers / Flink",
                "scale_engines_16x_one_run.json",
                lambda r: " / ".join(_data_half(mode, 16, "peak_rss_mb", max)(r)
                                     for mode in ("in_memory", "multi_processing", "flink"))),
        _figure("the data half at 4×, speed-up of 2 workers", "scale_data_half_x4_amx.json",
                _speedup(4)),
        _figure("`nmt`'s interpreter housekeeping: smoke `nmt run` / `nmt translate` of one "
                "sentence, s, the interpreter's defaults → `nmt` (median of 3, alternating)",
                "interpreter_time_epyc_bf16.json",
                lambda r: " / ".join(
                    f"{r['figures']['median']['interpreter_defaults'][command]['wall_s']:.1f} → "
                    f"{r['figures']['median']['nmt'][command]['wall_s']:.1f}"
                    for command in ("run", "translate"))),
        _figure("`make test`: tests passed, minutes", "test_suite.json",
                "{figures[passed]} in {figures[minutes]:.1f}"),
        _figure("`make test`: CPU minutes in all / of its three costliest modules",
                "test_suite.json", lambda r: f"{r['figures']['cpu_minutes']:.1f} / " + ", ".join(
                    f"{os.path.basename(module).removeprefix('test_').removesuffix('.py')} "
                    f"{seconds / 60:.1f}" for module, seconds
                    in list(r["figures"]["cpu_seconds_by_module"].items())[:3])),
    )),
    *(Table(name, ("stage", "seconds, 1,000 dev lines", "share of the greedy signature"),
            (Row(source, ("{item[stage]}", "{item[seconds]:.2f}", "{item[share]}"),
                 items=_stages),))
      for name, source in (("serving-profile", SERVING_PROFILE),
                           ("serving-profile-today", SERVING_PROFILE_TODAY))),
    Table("decoding", ("variant", "before (f223834), sentences/s", "2f92848",
                       "today float32", "today bfloat16", "today float32 over before",
                       "bfloat16 over float32",
                       "outputs that differ from before's, float32 / bfloat16",
                       "first request, s, before / today", "lines"),
          (Row(DECODING, ("{item[variant]}", "{item[before]:.1f}", "{item[previous]:.1f}",
                          "{item[float32]:.1f}", "{item[bfloat16]:.1f}",
                          lambda r: f"{r['item']['float32'] / r['item']['before']:.2f}×",
                          lambda r: f"{r['item']['bfloat16'] / r['item']['float32']:.2f}×",
                          "{item[differ]}", "{item[first]}", "{item[sentences]:,}"),
               items=_variants),)),
    Table("decoding-float32-xeon", (
        "variant", "before (f223834), one request at a time, sentences/s", "today float32",
        "today over before", "before, side by side", "today float32, side by side",
        "today over before, side by side",
        "outputs that differ from before's, one at a time / side by side", "lines"),
          (Row(XEON_DECODING, (
              "{item[variant]}", "{item[before]:.1f}", "{item[today]:.1f}",
              lambda r: f"{r['item']['today'] / r['item']['before']:.2f}×",
              "{item[before_side]:.1f}", "{item[today_side]:.1f}",
              lambda r: f"{r['item']['today_side'] / r['item']['before_side']:.2f}×",
              "{item[differ]}", "{item[sentences]:,}"), items=_xeon_variants),)),
    Table("decoding-bfloat16-xeon", (
        "variant", "before (f223834), side by side, sentences/s", "today float32",
        "today over before", "outputs that differ from before's",
        "first request, s, before / today", "lines"),
          (Row(BF16_XEON_SIDE_BY_SIDE, (
              "{item[variant]}", "{item[before]:.1f}", "{item[today]:.1f}",
              lambda r: f"{r['item']['today'] / r['item']['before']:.2f}×",
              "{item[differ]}", "{item[first]}", "{item[sentences]:,}"),
               items=_before_today_rows),)),
    Table("decoding-amx", (
        "variant", "before (f223834), sentences/s", "today float32", "today bfloat16",
        "float32 over before", "bfloat16 over before",
        "outputs that differ from before's, float32 / bfloat16", "lines"),
          (Row(AMX_DECODING, (
              "{item[variant]}", "{item[before]:.1f}", "{item[float32]:.1f}",
              "{item[bfloat16]:.1f}",
              lambda r: f"{r['item']['float32'] / r['item']['before']:.2f}×",
              lambda r: f"{r['item']['bfloat16'] / r['item']['before']:.2f}×",
              "{item[differ]}", "{item[sentences]:,}"),
               items=lambda r: _export_rows(r, ("before", "float32", "bfloat16"))),)),
    *(Table(name, (
        "variant", "before (f223834), side by side, sentences/s", "today float32",
        "today bfloat16", "float32 over before", "bfloat16 over before",
        "outputs that differ from before's, float32 / bfloat16",
        "first request, s, before / float32 / bfloat16", "lines"),
          (Row(source, (
              "{item[variant]}", "{item[before]:.1f}", "{item[float32]:.1f}",
              "{item[bfloat16]:.1f}",
              lambda r: f"{r['item']['float32'] / r['item']['before']:.2f}×",
              lambda r: f"{r['item']['bfloat16'] / r['item']['before']:.2f}×",
              "{item[differ]}", "{item[first]}", "{item[sentences]:,}"),
               items=_three_exports_rows),))
      for name, source in (("decoding-amx-side-by-side", AMX_SIDE_BY_SIDE),
                           ("decoding-epyc-auto", EPYC_AUTO_SIDE_BY_SIDE))),
    Table("decoding-side-by-side", (
        "variant", "before (f223834), sentences/s", "today float32", "today bfloat16",
        "today float32 over before", "today float32 over one request at a time", "lines"),
          (Row(SIDE_BY_SIDE_DECODING, (
              "{item[variant]}", "{item[before]:.1f}", "{item[float32]:.1f}",
              "{item[bfloat16]:.1f}",
              lambda r: f"{r['item']['float32'] / r['item']['before']:.2f}×",
              lambda r: f"{r['item']['float32'] / r['item']['alone']:.2f}×",
              "{item[sentences]:,}"), items=_side_by_side_variants),)),
    Table("scaling", ("component", "1× s", "4× s", "16× s", "16× s, 2 workers",
                      "16× peak MB, in memory / 2 workers"),
          tuple(Row("scale.json", (
              component,
              *(_component(component, "in_memory", s, "component_s") for s in (1, 4, 16)),
              _component(component, "multi_processing", 16, "component_s"),
              lambda r, c=component: (
                  _component(c, "in_memory", 16, "peak_rss_mb", 0)(r) + " / "
                  + _component(c, "multi_processing", 16, "peak_rss_mb", 0)(r))))
                for component in ("FraTxtExampleGen", "StatisticsGen", "Transform"))),
    Table("decisions", ("change", "dev BLEU difference", "bootstrap sd", "against", "kept",
                        "history"),
          (Row("decisions.json", (
              "{item[change]}", "{item[difference]}", "{item[sd]}", "{item[against]}",
              "{item[kept]}", _history_link),
              items=lambda r: r["figures"]["decisions"]),
           *(Row(source, (
               "{item[change]}", lambda r: f"{_versus_first(r)['difference']:+.2f}",
               lambda r: f"{_versus_first(r)['bootstrap_std']:.2f}", against, "{item[kept]}",
               "[" + LONG_SENTENCES_HISTORY + "](docs/benchmarks-history.md#"
               + _anchor(LONG_SENTENCES_HISTORY) + ")"),
               items=lambda r, exports=LONG_SENTENCE_EXPORTS[source]: [
                   {**model, **exports[name]} for name, model in r["figures"]["models"].items()
                   if name in exports])
             for source, against in LONG_SENTENCE_FILES.items()))),
    # Placeholders for measurements under way: each renders "not measured yet" until its
    # result file exists.
    Table("engines", ("engine", "1× s", "4× s", "16× s", "1× peak MB", "4× peak MB",
                      "16× peak MB", "result file"),
          tuple(Row("scale_engines.json", (
              label,
              *(_data_half(mode, s, "component_s") for s in (1, 4, 16)),
              *(_data_half(mode, s, "peak_rss_mb", max) for s in (1, 4, 16)),
              _source)) for mode, label in ENGINES)),
    Table("engines-16x", ("engine", "data half s", "speed vs in memory", "peak MB",
                          "CPU s: nmt process", "CPU s: Python workers", "CPU s: JVM",
                          "result file"),
          tuple(Row("scale_engines_16x.json", (
              label, _data_half(mode, 16, "component_s"), _speedup(16, "component_s", mode),
              _data_half(mode, 16, "peak_rss_mb", max),
              *(_data_half(mode, 16, f"cpu_{kind}_s") for kind in ("runner", "workers", "jvm")),
              _source)) for mode, label in ENGINES_16X)),
    Table("engines-heap", PEAK_COLUMNS,
          tuple(_peak_row("scale_engines_16x_heap.json", mode, label)
                for mode, label in ENGINES_HEAP)),
    Table("engines-one-run", ("engine", "data half s", "speed vs in memory", "peak MB",
                              *PEAK_COLUMNS[4:]),
          tuple(Row("scale_engines_16x_one_run.json", (
              label, _data_half(mode, 16, "component_s"), _speedup(16, "component_s", mode),
              *_peak_cells(mode), _source))
              for mode, label in (*ENGINES[:2], ("flink", "Flink (the default engine)")))),
    Table("engines-cluster", CLUSTER_COLUMNS,
          tuple(_peak_row("scale_engines_16x_cluster.json", mode, label, CLUSTER_KINDS,
                          (_loss_cost if mode == LOST_TASKMANAGER else "–",))
                for mode, label in (ENGINES[0], ("flink", "Flink, embedded (the default)"),
                                    (CLUSTER, "Flink session cluster, 2 TaskManagers"),
                                    (LOST_TASKMANAGER, "the same, a TaskManager lost in "
                                                       "Transform")))),
    Table("engines-release", PEAK_COLUMNS,
          tuple(_peak_row("scale_engines_16x_release.json", mode, label)
                for mode, label in (("flink_hour_cache", "Flink, a job's workers kept an hour, "
                                                         "glibc's arenas (before)"),
                                    ("flink", "Flink, workers stopped 10 s after their job, "
                                              "2 arenas (the default)")))),
    Table("engines-sdk-worker", PEAK_COLUMNS,
          tuple(_peak_row("scale_engines_16x_one_worker.json", mode, label)
                for mode, label in (ENGINES[1], ("flink_one_sdk_worker",
                                                 "Flink, one SDK worker for both slots")))),
    Table("long-lines-cause", ("model", "joined short lines: BLEU whole / in parts",
                               "chrF whole / in parts",
                               "short lines as rich in new words as the long: BLEU",
                               "machine", "commit", "result file"),
          (Row("long_lines_cause_*.json", (
              "{item[name]}", "{item[joined_bleu_whole]:.2f} / {item[joined_bleu_in_parts]:.2f}",
              "{item[joined_chrf_whole]:.2f} / {item[joined_chrf_in_parts]:.2f}",
              "{item[rich_short_lines_bleu]:.2f}", _machine, "{commit}", _source),
              items=_named_models),)),
    Table("joins", ("measure", "4b41846's recipe (`clauses`)", "joins of 2 to 4 (`joins_4`)",
                    "machine", "result file"),
          (Row("test_split_joins_epyc_bf16.json", (
              "test split BLEU, one reference (once)",
              "{figures[models][clauses][overall_first_reference][bleu]:.2f}",
              "{figures[models][joins_4][overall_first_reference][bleu]:.2f}",
              _machine, _source)),
           Row("test_split_joins_epyc_bf16.json", (
               "test split BLEU, sentences over 10 words, all references",
               "{figures[models][clauses][over_10_words][bleu]:.2f}",
               "{figures[models][joins_4][over_10_words][bleu]:.2f}", _machine, _source)),
           Row("step_time_joins_epyc_bf16.json", (
               "training steps per second, relative",
               "{figures[speedup_vs_first][default]:.2f}",
               "{figures[speedup_vs_first][joins_4]:.2f}", _machine, _source)))),
    Table("subword", ("model", "test split BLEU, one reference (once)", "all references",
                      "machine", "commit", "result file"),
          (Row("test_split_subword*_epyc_bf16.json", (
              "{item[name]}", "{item[overall_first_reference][bleu]:.2f}",
              "{item[overall][bleu]:.2f}", _machine, "{commit}", _source),
              items=_named_models),)),
    Table("long-budget", ("each trained for", "BLEU, >30 words: today's recipe, greedy / beam 4",
                          "4b41846's recipe", "today's over 4b41846's, greedy / beam 4",
                          "dev BLEU, all lines: today's / 4b41846's", "machine", "commit",
                          "result file"),
          tuple(Row(pair.source, (
              pair.budget,
              _greedy_and_beam(pair, lambda r, name: f"{_long_bleu(r, name):.2f}"),
              lambda r, b=pair.before: f"{_long_bleu(r, b):.2f}",
              _over_before(pair),
              lambda r, t=pair.today, b=pair.before: " / ".join(
                  f"{r['figures']['models'][name]['dev_bleu']:.2f}" for name in (t, b)),
              _machine, "{commit}", _source))
              for pair in LONG_BUDGETS)),
    Table("long-today", LONG_COLUMNS,
          (Row(DEFAULT_BUDGET.source, LONG_CELLS,
               items=lambda r: [model for model in _named_models(r) if model["name"] in
                                (DEFAULT_BUDGET.today, DEFAULT_BUDGET.beam,
                                 DEFAULT_BUDGET.before)]),)),
    Table("long-sentences", LONG_COLUMNS,
          (Row("long_sentences_*.json", LONG_CELLS, items=_named_models),)),
    Table("warm-chain-runs", ("arm", "run", "budget min", "started from", "model", "its steps",
                              "steps in all", "dev BLEU", "dev chrF", "machine", "commit",
                              "result file"),
          (Row("warm_chain_*.json", (
              "{item[arm]}", "{item[run]}",
              lambda r: f"{r['item']['minutes']:g}" if r["item"].get("minutes") else "–",
              _started_from,
              "{item[model_shape][num_layers]} encoder layers, d_model "
              "{item[model_shape][d_model]}", "{item[train_steps]:,}",
              "{item[total_train_steps]:,}", "{item[dev_bleu]:.2f}", "{item[dev_chrf]:.2f}",
              _machine, "{item[commit]}", _source), items=_chain_runs),)),
    Table("warm-chain", ("comparison", "candidate", "baseline", "dev BLEU: candidate / "
                         "baseline", "difference", "bootstrap sd", "not better in",
                         "result file"),
          (Row("warm_chain_*.json", (
              "{item[comparison]}", "{item[candidate]}", "{item[baseline]}",
              "{item[candidate_bleu]:.2f} / {item[baseline_bleu]:.2f}",
              "{item[difference]:+.2f}", "{item[bootstrap_std]:.2f}",
              lambda r: f"{100 * r['item']['p_not_better']:.1f} % of resamples", _source),
              items=lambda r: r["figures"]["comparisons"]),)),
)


def render(table: Table, results_dir: str = results.RESULTS) -> str:
    """The table as markdown, from the result files in `results_dir`."""
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    missing = set()
    for row in table.rows:
        paths = sorted(glob.glob(os.path.join(results_dir, row.source)))
        if not paths and row.source not in missing:
            missing.add(row.source)
            lines.append(f"| {NOT_MEASURED}: `{row.source}` |" + " |" * (len(table.columns) - 1))
        for path in paths:
            record = {**results.read(path), "file": os.path.basename(path), "path": path}
            for item in row.items(record) if row.items else [None]:
                lines.append("| " + " | ".join(_cell(cell, {**record, "item": item})
                                               for cell in row.cells) + " |")
    return "\n".join(lines)


def _block(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- figures:{re.escape(name)} -->\n)(.*?)(<!-- /figures:"
                      rf"{re.escape(name)} -->)", re.DOTALL)


def update(text: str, results_dir: str = results.RESULTS) -> tuple[str, list[str]]:
    """The page with every generated table rewritten, and the names of those that changed."""
    known = {table.name for table in TABLES}
    changed = [f"{name} (no such table in benchmarks/figures.py)"
               for name in re.findall(r"<!-- figures:([\w-]+) -->", text) if name not in known]
    for table in TABLES:
        pattern = _block(table.name)
        rendered = render(table, results_dir) + "\n"
        for match in list(pattern.finditer(text)):
            if match.group(2) != rendered:
                changed.append(table.name)
        text = pattern.sub(lambda m: m.group(1) + rendered + m.group(3), text)
    return text, changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a generated table differs")
    parser.add_argument("--repo", default=REPO, help="where README.md and BENCHMARKS.md are")
    parser.add_argument("--results", default=results.RESULTS)
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        path = os.path.join(args.repo, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new, changed = update(text, args.results)
        stale += [f"{page}: figures:{name}" for name in changed]
        if new != text and not args.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
    if stale and args.check:
        print("Generated tables differ from benchmarks/results/ (run `make figures`):\n  "
              + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

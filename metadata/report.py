"""`nmt report`: one run on one page that people would rather look at than read.

A single self-contained HTML file (images inlined as data: URIs, and also written beside it as
PNGs): the run and its components, training/validation loss curves, BLEU/chrF by English
sentence length, eval-split translations next to their references, and where the model looked
(cross-attention of the last decoder layer) for a few sentences. Everything comes from the
run's artifacts as ML Metadata lists them, so any past run can be reported.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  registers the ops of the Transform graph in the model

from metadata.artifacts import (  # noqa: E402
    SERVING_MODEL_DIR, evaluation_metrics, list_artifacts, read_json)
from metadata.runs import get_run  # noqa: E402
from metadata.store import MetadataError  # noqa: E402
from metadata.values import as_text  # noqa: E402
from metadata.signatures import signature  # noqa: E402
from trainer_module.settings import HISTORY_FILE  # noqa: E402
from components.fra_example_gen.records import read_split  # noqa: E402
from transform_module.preprocessing import RESERVED_TOKENS  # noqa: E402
from transform_module.tokens import END_ID, PAD_ID  # noqa: E402

REPORT_FILE = "report.html"
ATTENTION_SENTENCES = 3
_PAD, _END = RESERVED_TOKENS[PAD_ID], RESERVED_TOKENS[END_ID]
_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
img { max-width: 100%; display: block; margin: 0.5em 0; }
figure { margin: 0 0 1.5em; }
.figures { display: flex; flex-wrap: wrap; gap: 1.5em; align-items: flex-start; }
.refs { color: #555; }
"""


@dataclasses.dataclass(frozen=True)
class _Sample:
    english: str
    references: list[str]
    translation: str = ""


@dataclasses.dataclass(frozen=True)
class _RunArtifacts:
    """What the report shows, as `list_artifacts` describes it."""
    model: dict[str, Any]
    model_run: dict[str, Any]
    evaluation: dict[str, Any]
    blessing: dict[str, Any]
    examples: dict[str, Any]  # ExampleGen's (raw) examples: the eval split is translated
    pushed: dict[str, Any] | None


def _run_artifacts(store: Any, run_id: str) -> _RunArtifacts:
    artifacts = list_artifacts(store, run_id=run_id)

    def first(type_name: str, raw_examples: bool = False) -> dict[str, Any] | None:
        return next((a for a in artifacts if a["type"] == type_name
                     and (not raw_examples or "input" in a["properties"])), None)

    wanted = {"model": "Model", "model_run": "ModelRun", "evaluation": "ModelEvaluation",
              "blessing": "ModelBlessing", "examples": "Examples"}
    found = {field: first(type_name, raw_examples=field == "examples")
             for field, type_name in wanted.items()}
    missing = [wanted[field] for field, artifact in found.items() if artifact is None]
    if missing:
        raise MetadataError(
            f"Run {run_id} has no {', '.join(missing)} artifact: its Trainer or Evaluator did "
            "not finish. Report a run that evaluated a model (see `nmt metadata runs`).")
    return _RunArtifacts(**found, pushed=first("PushedModel"))


# --- Figures ------------------------------------------------------------------------------

def _loss_figure(history: list[dict[str, float]]) -> plt.Figure:
    figure, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = [h["step"] for h in history]
    for ax, metric, title in ((axes[0], "loss", "Loss (label-smoothed cross-entropy)"),
                              (axes[1], "masked_accuracy", "Token accuracy")):
        for prefix, label in (("", "training"), ("val_", "validation")):
            ax.plot(steps, [h[prefix + metric] for h in history], marker="o", label=label)
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        ax.legend()
    figure.tight_layout()
    return figure


def _bleu_figure(by_length: dict[str, dict[str, float]], overall: dict[str, float]
                 ) -> plt.Figure:
    figure, ax = plt.subplots(figsize=(7, 3.6))
    buckets = list(by_length)
    x = np.arange(len(buckets))
    for offset, metric, label in ((-0.2, "bleu", "BLEU, all references"),
                                  (0.2, "chrf", "chrF, all references")):
        bars = ax.bar(x + offset, [by_length[b][metric] for b in buckets], 0.4,
                      label=f"{label} (overall {overall[metric]:.1f})")
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(x, buckets)
    ax.set_xlim(-0.6, max(len(buckets), 4) - 0.4)  # bars keep their width with few buckets
    ax.set_xlabel("English sentence length (words)")
    ax.set_ylabel("score (0-100)")
    ax.legend()
    figure.tight_layout()
    return figure


def _attention_figure(weights: np.ndarray, source: list[str], target: list[str]) -> plt.Figure:
    figure, ax = plt.subplots(figsize=(1.2 + 0.5 * len(source), 1.0 + 0.4 * len(target)))
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, aspect="auto")
    ax.set_xticks(range(len(source)), source, rotation=45, ha="right")
    ax.set_yticks(range(len(target)), target)
    ax.set_xlabel("English (source) token")
    ax.set_ylabel("French (output) token")
    figure.colorbar(image, ax=ax, fraction=0.05)
    figure.tight_layout()
    return figure


def _save(figure: plt.Figure, output_dir: str, name: str) -> str:
    """Writes the PNG and returns it as a data: URI, so the HTML needs no other file."""
    path = os.path.join(output_dir, name)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode("ascii")


# --- The model on eval sentences ----------------------------------------------------------

def _eval_samples(examples_uri: str, count: int) -> list[_Sample]:
    """`count` eval-split sentences spread from the shortest to the longest."""
    samples = [_Sample(english, references)
               for english, references in read_split(examples_uri, "eval")]
    samples.sort(key=lambda s: (len(s.english.split()), s.english))
    picks = sorted({round(i) for i in np.linspace(0, len(samples) - 1, min(count, len(samples)))})
    return [samples[i] for i in picks]


def _translated(model: Any, samples: list[_Sample]) -> list[_Sample]:
    output = model.signatures["serving_default"](tf.constant([s.english for s in samples]))
    return [dataclasses.replace(s, translation=t.decode())
            for s, t in zip(samples, output["translation"].numpy())]


def _attention(model: Any, sentence: str) -> tuple[np.ndarray, list[str], list[str]]:
    """Attention [target, source] without padding, target cut after its end token."""
    output = model.signatures["attention"](tf.constant([sentence]))
    source = [t.decode() for t in output["source_tokens"].numpy()[0]]
    target = [t.decode() for t in output["target_tokens"].numpy()[0]]
    source = source[:source.index(_PAD)] if _PAD in source else source
    target = target[:target.index(_END) + 1] if _END in target else \
        target[:target.index(_PAD)] if _PAD in target else target
    return output["attention"].numpy()[0][:len(target), :len(source)], source, target


# --- HTML ---------------------------------------------------------------------------------

def _table(header: list[str] | None, rows: list[list[str]]) -> str:
    """Cells are HTML already (escaped by the caller)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header or [])
    head = f"<tr>{head}</tr>" if head else ""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _escaped(value: Any) -> str:
    return html.escape(as_text(value))


def _summary(run: dict[str, Any], found: _RunArtifacts) -> str:
    source = found.examples["properties"]["input"]
    blessing = found.blessing["properties"]
    rows = [
        ("Pipeline", run["pipeline"]), ("Status", run["status"]),
        ("Started", run["start"]), ("Duration (s)", run["duration_s"]),
        ("Model", f"{found.model['id']}: {found.model['uri']}"),
        ("BLEU / chrF, eval split, one reference (the gate)",
         f"{as_text(blessing.get('bleu_1ref'))} / "
         f"{as_text(blessing.get('chrf_1ref'))}"),
        ("BLEU / chrF, eval split, all references",
         f"{as_text(blessing.get('bleu'))} / {as_text(blessing.get('chrf'))}"),
        ("sacreBLEU signatures", f"BLEU {signature('bleu', 1)} (all references: nrefs:var); "
                                 f"chrF {signature('chrf', 1)}"),
        ("Blessed", f"{as_text(blessing['blessed'])} (baseline model: "
                    f"{as_text(blessing['baseline_model'])})"),
        ("Pushed version", found.pushed["properties"]["version"] if found.pushed else None),
        ("Input file", f"{source['path']} ({source['size_bytes']:,} bytes, "
                       f"sha256 {source['sha256']})"),
        ("Examples per split", found.examples["properties"]["splits"]),
    ]
    return _table(None, [[html.escape(k), _escaped(v)] for k, v in rows])


def _figure(uri: str, alt: str, caption: str = "") -> str:
    text = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{uri}" alt="{html.escape(alt)}">{text}</figure>'


def _page(title: str, sections: list[tuple[str, str]]) -> str:
    body = "".join(f"<section><h2>{html.escape(heading)}</h2>{content}</section>"
                   for heading, content in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{body}</body></html>")


def _attention_section(model: Any, samples: list[_Sample], output_dir: str) -> str:
    """Heat maps for the samples nearest six words long: short enough to read, long enough
    to show where the model looks."""
    focus = sorted(samples, key=lambda s: abs(len(s.english.split()) - 6))[:ATTENTION_SENTENCES]
    figures = [_figure(_save(_attention_figure(*_attention(model, s.english)), output_dir,
                             f"attention-{i}.png"),
                       f"attention for: {s.english}", f"{s.english} → {s.translation}")
               for i, s in enumerate(focus, start=1)]
    return '<div class="figures">' + "".join(figures) + "</div>"


def write_report(store: Any, run_id: str, output_dir: str, samples: int = 8) -> str:
    """Writes <output_dir>/report.html (and its PNGs) for one run; returns the HTML's path."""
    run = get_run(store, run_id)
    found = _run_artifacts(store, run["run"])
    os.makedirs(output_dir, exist_ok=True)
    history = read_json(os.path.join(found.model_run["uri"], HISTORY_FILE))
    scores = evaluation_metrics(found.evaluation["uri"])
    model = tf.saved_model.load(os.path.join(found.model["uri"], SERVING_MODEL_DIR))
    translated = _translated(model, _eval_samples(found.examples["uri"], samples))
    sections = [
        ("Summary", _summary(run, found)),
        ("Components", _table(["Component", "State", "Seconds"], [
            [_escaped(c["component"]), _escaped(c["state"]), _escaped(c["duration_s"])]
            for c in run["components"]])),
        ("Training and validation loss", _figure(
            _save(_loss_figure(history), output_dir, "loss.png"), "loss curves")),
        ("BLEU by sentence length", _figure(
            _save(_bleu_figure(scores["by_length"], scores["overall"]), output_dir,
                  "bleu_by_length.png"), "BLEU and chrF by English sentence length")),
        ("Sample translations", _table(["English", "Model", "References"], [
            [_escaped(s.english), _escaped(s.translation),
             '<span class="refs">' + "<br>".join(map(html.escape, s.references)) + "</span>"]
            for s in translated])),
        ("Attention", _attention_section(model, translated, output_dir)),
    ]
    path = os.path.join(output_dir, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(_page(f"Run {run['run']}", sections))
    return path

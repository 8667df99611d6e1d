"""`nmt evaluate`: a model's sacreBLEU BLEU and chrF on a test set, as published MT results are
scored, with every line, the lines whose English the model trained on, and the others apart.

The scores are sacreBLEU's own `corpus_score` on the model's translations, so they equal what
sacreBLEU's command line prints for the hypotheses file. Seen and unseen lines come from the
training-overlap check (inference/overlap.py) on the train split the model's ML Metadata
lineage names; a model without lineage (a copied SavedModel) is scored on all lines only.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import tempfile
import time
from typing import Any, Callable

import sacrebleu

from inference import overlap as overlap_lib
from inference.evaluation_set import EvaluationSet

_LOG = logging.getLogger(__name__)
# Seconds between two progress lines when stderr is not a terminal (a log file, CI).
PROGRESS_EVERY_S = 10.0


@dataclasses.dataclass(frozen=True)
class Lineage:
    """What the overlap check compared with, or why it could not."""
    model: int | None = None  # the Model artifact in ML Metadata
    train_splits: tuple[str, ...] = ()  # newest first: a warm start's base's data too
    missing: str | None = None  # why there is no lineage: then every line is scored as one


def _subset(items: list, keep: list[bool]) -> list:
    return [item for item, k in zip(items, keep) if k]


def score(hypotheses: list[str], references: list[list[str]],
          parts: dict[str, list[bool]] | None = None) -> dict[str, dict[str, Any]]:
    """{part: sacreBLEU's corpus BLEU and chrF of its lines, with their signatures (None for
    no lines)}; `parts` maps a name to the lines it keeps (default: {"all": every line}).

    sacreBLEU's statistics of each line are extracted once, and a part's scores computed from
    the sums over its lines, as sacreBLEU's `corpus_score` computes a corpus's: scoring every
    part anew extracted most lines' twice. The signatures are the whole test set's."""
    parts = parts or {"all": [True] * len(hypotheses)}
    metrics = {"bleu": sacrebleu.BLEU(), "chrf": sacrebleu.CHRF()}
    statistics = {}
    if hypotheses:
        for name, metric in metrics.items():
            # pylint: disable=protected-access
            metric._check_corpus_score_args(hypotheses, references)
            statistics[name] = metric._extract_corpus_statistics(hypotheses, references)
    scores = {}
    for part, keep in parts.items():
        lines = sum(keep)
        scores[part] = {"lines": lines, **{
            name: metric._aggregate_and_compute(  # pylint: disable=protected-access
                _subset(statistics[name], keep)).score if lines else None
            for name, metric in metrics.items()}}
        if lines:
            scores[part].update({f"{name}_signature": metric.get_signature().format()
                                 for name, metric in metrics.items()})
    return scores


def score_parts(hypotheses: list[str], test_set: EvaluationSet,
                seen: list[bool] | None) -> dict[str, dict[str, Any]]:
    """`score`'s {"all": ..., "seen": ..., "unseen": ...} (only "all" without an overlap
    check)."""
    parts = {"all": [True] * len(hypotheses)}
    if seen is not None:
        parts.update(seen=seen, unseen=[not s for s in seen])
    return score(hypotheses, test_set.references, parts)


class Progress:
    """'Translated 640 of 2,675 sentences (24%), 51.2 sentences/s, ETA 40s': a bar redrawn in
    place on a terminal, else a log line every PROGRESS_EVERY_S seconds."""

    def __init__(self, total: int, stream=None, clock: Callable[[], float] = time.monotonic):
        from trainer_module.callbacks import duration

        self._duration = duration
        self.total, self._clock = total, clock
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._started = self._last = clock()
        self.seconds = 0.0  # from the first call (done=0, the model loaded) to the last

    def __call__(self, done: int) -> None:
        now = self._clock()
        if done == 0:
            self._started = self._last = now
            return
        self.seconds = now - self._started
        if not self._tty and now - self._last < PROGRESS_EVERY_S and done < self.total:
            return
        self._last = now
        rate = done / max(now - self._started, 1e-9)
        eta = (self.total - done) / rate if rate else 0.0
        text = (f"Translated {done:,} of {self.total:,} sentences ({done / self.total:.0%}), "
                f"{rate:.1f} sentences/s, ETA {self._duration(eta)}")
        if self._tty:
            bar = "#" * round(20 * done / self.total)
            self._stream.write(f"\r[{bar:<20}] {text}" + ("\n" if done >= self.total else ""))
            self._stream.flush()
        else:
            _LOG.info("%s", text)


def write_atomically(path: str, lines: list[str]) -> None:
    """The hypotheses, one per line, appearing whole or not at all."""
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=directory, delete=False,
                                     prefix=".hypotheses-") as f:
        f.write("".join(line + "\n" for line in lines))
    os.replace(f.name, path)


def training_lineage(store_config, model_dir: str) -> Lineage:
    """The train splits of the model in `model_dir`, from an ML Metadata store."""
    from metadata.lineage import training_examples
    from metadata.store import MetadataError, connect

    try:
        found = training_examples(connect(store_config), model_dir)
    except MetadataError as err:
        return Lineage(missing=str(err))
    if found is None:
        return Lineage(missing=f"ML Metadata knows no model in {model_dir} (a copied or "
                               "foreign SavedModel?)")
    return Lineage(model=found["model"], train_splits=tuple(found["train_splits"]))


def training_sentences(train_splits: tuple[str, ...]) -> list[str]:
    """The English sentence of every training example of the splits, each once."""
    from components.fra_example_gen.records import read_english

    return list(dict.fromkeys(english for split in train_splits
                              for english in read_english(os.path.dirname(split), "train")))


def evaluate(test_set: EvaluationSet, model_dir: str, beam: int | None, lineage: Lineage,
             hypotheses_path: str | None = None, requests_at_once: int = 1) -> dict[str, Any]:
    """Translates the test set (`requests_at_once`: translate.translate's), checks it against
    training and scores it: the --json result."""
    from inference import translate

    checked = None
    if lineage.train_splits:
        _LOG.info("Reading the model's training sentences (%s).", ", ".join(lineage.train_splits))
        checked = overlap_lib.find(test_set.sources, training_sentences(lineage.train_splits))
    _LOG.info("Translating %s sentences with %s.", f"{len(test_set.sources):,}",
              f"beam search (width {beam})" if beam else "greedy decoding")
    progress = Progress(len(test_set.sources))
    hypotheses = translate.translate(test_set.sources, model_dir, beam, progress=progress,
                                     requests_at_once=requests_at_once)
    if hypotheses_path:
        write_atomically(hypotheses_path, hypotheses)
    result: dict[str, Any] = {
        "model": model_dir, "test_set": test_set.name, "lines": len(test_set.sources),
        "references_per_line": test_set.num_refs,
        "decoding": f"beam {beam}" if beam else "greedy",
        "sentences_per_second": len(hypotheses) / progress.seconds if progress.seconds else None,
        "hypotheses": hypotheses_path,
        "overlap": None,
        "scores": score_parts(hypotheses, test_set, checked.seen if checked else None)}
    if checked:
        result["overlap"] = {
            "model": lineage.model, "train_splits": list(lineage.train_splits),
            "training_sentences": checked.training_sentences,
            "seen_exactly": sum(checked.exact), "seen_normalized": sum(checked.normalized),
            "normalization": overlap_lib.NORMALIZATION}
    else:
        result["overlap"] = {"missing": lineage.missing}
    return result

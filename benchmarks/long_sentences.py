"""Long sentences and loops, side by side: exports of one trained model on the dev set.

    PYTHONPATH=. .venv/bin/python -m benchmarks.long_sentences \\
        --source $D/tatoeba-test-v2021-08-07.unseen.eng \\
        --reference $D/tatoeba-test-v2021-08-07.unseen.fra \\
        --model before=nmt_runs/serving/nmt-fra-eng/1764300000 \\
        --model after=/tmp/reexported [--output long_sentences_epyc_bf16.json]

For each model (NAME=SAVED_MODEL; `reexport.py` exports trained weights with this checkout's
code and settings; one SavedModel may come twice under two names), decoded as `nmt translate`
does (greedy, or beam search for a name given `--beam NAME=WIDTH`): sacreBLEU BLEU and chrF
(one reference) of the whole dev set and of its lines of more than LONG_WORDS English words;
there, each output's length in words over its reference's (median and minimum); the lines
that `nmt translate` warns about (a piece cut at the model's length, or a clause cut between
words); and the outputs of the whole dev set with a loop (`has_loop`). Each model after the first is
also compared with the first by a paired bootstrap, on the whole set and on the long lines.
Models run in alternating order over two rounds; the second round's times are kept.
"""
from __future__ import annotations

import argparse
import logging
import re
import statistics
import time

from benchmarks import results
from benchmarks.gap import bleu_statistics
from benchmarks.paired import paired_bootstrap, read_lines
from inference import evaluate as evaluate_lib
from inference import translate as translate_lib

LONG_WORDS = 30
# A loop: one word n-gram (n <= 4), or 2-10 letters inside a word ("mélocélocéloc"), three
# times in a row, as the loop guard counts (hparams.decode_loop_repeats): French says "très
# très" or "non, non", not more.
_WORD_LOOP = re.compile(r"\b((?:\w+\W+){1,4}?)\1\1", re.UNICODE)
_LETTER_LOOP = re.compile(r"([^\W\d_]{2,10}?)\1{2,}", re.UNICODE)


def has_loop(text: str) -> bool:
    """True when `text` repeats itself as a looping decoder does."""
    return bool(_WORD_LOOP.search(text + " ") or _LETTER_LOOP.search(text))


class WarnedLines(logging.Handler):
    """Counts the lines `nmt translate` warns about (a piece cut at the model's length, a
    clause cut between words) from its own warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines = 0

    def emit(self, record: logging.LogRecord) -> None:
        found = re.match(r"(?:Line \d+ has|(\d+) lines have)", record.getMessage())
        if found:
            self.lines += int(found.group(1) or 1)


def measure(model: str, sources: list[str], references: list[str],
            beam: int | None = None) -> dict:
    warned = WarnedLines()
    logging.getLogger(translate_lib.__name__).addHandler(warned)
    started = time.monotonic()
    try:
        hypotheses = translate_lib.translate(sources, model, beam)
    finally:
        logging.getLogger(translate_lib.__name__).removeHandler(warned)
    seconds = time.monotonic() - started
    long_lines = [i for i, s in enumerate(sources) if len(s.split()) > LONG_WORDS]
    ratios = [len(hypotheses[i].split()) / max(len(references[i].split()), 1)
              for i in long_lines]
    whole = evaluate_lib.score(hypotheses, [references])
    long = evaluate_lib.score([hypotheses[i] for i in long_lines],
                              [[references[i] for i in long_lines]])
    return {"dev_bleu": whole["bleu"], "dev_chrf": whole["chrf"],
            "long_lines": len(long_lines), "bleu_over_30_words": long["bleu"],
            "chrf_over_30_words": long["chrf"],
            "length_ratio_median": statistics.median(ratios) if ratios else None,
            "length_ratio_min": min(ratios) if ratios else None,
            "loops": sum(map(has_loop, hypotheses)),
            "loop_lines": [i + 1 for i, h in enumerate(hypotheses) if has_loop(h)],
            "warned_lines": warned.lines, "seconds": seconds, "_hypotheses": hypotheses}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="the dev set's English, a line each")
    parser.add_argument("--reference", required=True, help="its French, a line each")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR",
                        help="a SavedModel, the first the baseline (repeatable)")
    parser.add_argument("--beam", action="append", default=[], metavar="NAME=WIDTH",
                        help="decode the model named NAME with beam search of WIDTH, as "
                             "`nmt translate --beam WIDTH` does (default: greedy)")
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args = parser.parse_args(argv)
    sources, references = read_lines(args.source), read_lines(args.reference)
    models = dict(m.split("=", 1) for m in args.model)
    beams = {name: int(width) for name, width in (b.split("=", 1) for b in args.beam)}
    if set(beams) - set(models):
        parser.error(f"--beam names no --model: {sorted(set(beams) - set(models))}")
    measured: dict[str, dict] = {}
    for order in (list(models), list(reversed(models))):  # two rounds, alternating
        for name in order:
            measured[name] = measure(models[name], sources, references, beams.get(name))
    long_lines = [i for i, s in enumerate(sources) if len(s.split()) > LONG_WORDS]
    baseline = next(iter(models))
    stats = {name: bleu_statistics(m.pop("_hypotheses"), [[r] for r in references])
             for name, m in measured.items()}
    for name in list(models)[1:]:
        measured[name]["against_" + baseline] = {
            "dev": paired_bootstrap(stats[baseline], stats[name]),
            "over_30_words": paired_bootstrap(stats[baseline][long_lines],
                                              stats[name][long_lines])}
    figures = {"models": {name: {"path": models[name], "beam": beams.get(name), **m}
                          for name, m in measured.items()},
               "source": args.source, "long_words": LONG_WORDS}
    results.emit(args.output, "Translations of the dev set (greedy unless a model's beam says) "
                 "by exports of one trained model: whole-set and long-line BLEU/chrF, length "
                 "ratios, loops, warnings",
                 figures)


if __name__ == "__main__":
    main()

"""Why the dev set's long lines score low: their length, or their words? One model at a time.

    PYTHONPATH=. .venv/bin/python -m benchmarks.long_lines_cause \\
        --source $D/tatoeba-test-v2021-08-07.unseen.eng \\
        --reference $D/tatoeba-test-v2021-08-07.unseen.fra \\
        --fra-txt ../shared/data/fra-eng/fra.txt \\
        --model before=DIR --model joins_4=DIR [--output long_lines_cause_epyc_bf16.json]

Two measurements, greedy as `nmt translate` decodes:
- Length alone: short dev lines (one sentence of at most SHORT_WORDS words), taken in file
  order, are joined with semicolons into lines of more than LONG_WORDS words, one sentence
  each (so serving translates it whole). Each joined line is translated whole, and its parts
  one by one and joined the same way; both are scored (BLEU, chrF) against the joined
  references. Whole as good as in parts: the model handles the length.
- Words: the share of a line's English words that fra.txt's English never has (lower-cased
  \\w+ words), on the long lines and on the rest of the dev set; and each model's BLEU on the
  short lines whose share is at least the long lines' median: if those score like the long
  lines, the words are the cause.
"""
from __future__ import annotations

import argparse
import re
import statistics

from benchmarks import results
from benchmarks.long_sentences import LONG_WORDS
from benchmarks.paired import read_lines
from inference import evaluate as evaluate_lib
from inference import translate as translate_lib

SHORT_WORDS = 12
_SENTENCE_END = re.compile(r"[.!?…]+[\"'»”]*$")
_INSIDE_END = re.compile(r"[.!?…]\s")
_WORD = re.compile(r"\w+", re.UNICODE)


def joined_lines(sources: list[str], references: list[str]
                 ) -> list[tuple[list[str], list[str]]]:
    """Runs of consecutive short one-sentence lines, as (English, French) sentences, each run
    just over LONG_WORDS English words."""
    runs, english, french = [], [], []
    for source, reference in zip(sources, references):
        if len(source.split()) > SHORT_WORDS or not _SENTENCE_END.search(source) or \
                _INSIDE_END.search(source):
            continue  # long, or not one sentence that ends
        english.append(source)
        french.append(reference)
        if sum(len(sentence.split()) for sentence in english) > LONG_WORDS:
            runs.append((english, french))
            english, french = [], []
    return runs


def parts_of(sentences: list[str]) -> list[str]:
    """The sentences as parts of one: all but the last lose their final stop."""
    return [_SENTENCE_END.sub("", s).rstrip() for s in sentences[:-1]] + sentences[-1:]


def join(sentences: list[str], separator: str) -> str:
    """The sentences as one, their parts joined by `separator`."""
    return separator.join(parts_of(sentences))


def unseen_share(line: str, known: set[str]) -> float:
    """The share of a line's lower-cased words that are not in `known`."""
    words = _WORD.findall(line.lower())
    return sum(w not in known for w in words) / max(len(words), 1)


def english_words(fra_txt: str) -> set[str]:
    """The lower-cased words of fra.txt's English column."""
    with open(fra_txt, encoding="utf-8") as f:
        return {w for line in f for w in _WORD.findall(line.split("\t", 1)[0].lower())}


def measure(model: str, runs: list[tuple[list[str], list[str]]], sources: list[str],
            references: list[str], rich: list[int]) -> dict:
    """One model's BLEU and chrF on the joined lines, whole and in parts, and its BLEU on the
    `rich` dev lines."""
    wholes = translate_lib.translate([join(e, "; ") for e, _ in runs], model, None)
    translations = iter(translate_lib.translate(
        [part for e, _ in runs for part in parts_of(e)], model, None))
    in_parts = [join([next(translations) for _ in e], " ; ") for e, _ in runs]
    joined_references = [[join(f, " ; ") for _, f in runs]]
    whole, pieces = (evaluate_lib.score(h, joined_references) for h in (wholes, in_parts))
    dev = translate_lib.translate([sources[i] for i in rich], model, None)
    rich_score = evaluate_lib.score(dev, [[references[i] for i in rich]])
    return {"joined_bleu_whole": whole["bleu"], "joined_bleu_in_parts": pieces["bleu"],
            "joined_chrf_whole": whole["chrf"], "joined_chrf_in_parts": pieces["chrf"],
            "whole_over_parts_bleu": whole["bleu"] / pieces["bleu"],
            "rich_short_lines_bleu": rich_score["bleu"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="the dev set's English, a line each")
    parser.add_argument("--reference", required=True, help="its French, a line each")
    parser.add_argument("--fra-txt", required=True, help="the training corpus")
    parser.add_argument("--model", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args = parser.parse_args(argv)
    sources, references = read_lines(args.source), read_lines(args.reference)
    known = english_words(args.fra_txt)
    long_lines = [i for i, s in enumerate(sources) if len(s.split()) > LONG_WORDS]
    shares = [unseen_share(s, known) for s in sources]
    long_median = statistics.median(shares[i] for i in long_lines)
    rich = [i for i, s in enumerate(sources)
            if len(s.split()) <= LONG_WORDS and shares[i] >= long_median]
    runs = joined_lines(sources, references)
    models = dict(m.split("=", 1) for m in args.model)
    figures = {
        "long_words": LONG_WORDS, "short_words": SHORT_WORDS, "joined_lines": len(runs),
        "joined_words_mean": statistics.mean(len(join(e, "; ").split()) for e, _ in runs),
        "unseen_share_long_median": long_median,
        "unseen_share_long_mean": statistics.mean(shares[i] for i in long_lines),
        "unseen_share_other_mean": statistics.mean(
            shares[i] for i in range(len(sources)) if i not in set(long_lines)),
        "rich_short_lines": len(rich),
        "models": {name: {"path": path, **measure(path, runs, sources, references, rich)}
                   for name, path in models.items()}}
    results.emit(args.output, "Why long dev lines score low: short dev lines joined into long "
                 "ones translated whole against in parts, and the share of words fra.txt's "
                 "English lacks", figures)


if __name__ == "__main__":
    main()

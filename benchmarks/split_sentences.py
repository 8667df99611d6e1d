"""Dev-set BLEU of a model exported before sentence splitting, with the splitting applied around
its `serving_default`: each line split by `trainer_module.segmentation.split_sentences`, every
sentence translated as `nmt translate` does, the translations joined with a space. That is
the computation today's export does in its graph, so an old model can be scored both ways
without retraining (BENCHMARKS.md, "Decisions").

Usage: python -m benchmarks.split_sentences --model DIR \
           --source ../shared/data/tatoeba-dev/X.eng --reference ../shared/data/tatoeba-dev/X.fra \
           [--hypotheses out.txt] [--output out.json]
"""
from __future__ import annotations

import argparse

import tensorflow as tf

from benchmarks import results
from inference.evaluate import score, write_atomically
from inference.translate import translate
from trainer_module.segmentation import split_sentences


def translate_by_sentence(lines: list[str], model_dir: str) -> tuple[list[str], int]:
    """The lines' translations, sentence by sentence, and how many sentences there were."""
    sentences = split_sentences(tf.constant(lines))
    translated = translate([s.decode() for s in sentences.flat_values.numpy()], model_dir)
    splits = sentences.row_splits.numpy()
    return ([" ".join(translated[start:end]) for start, end in zip(splits[:-1], splits[1:])],
            len(translated))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a SavedModel or serving directory")
    parser.add_argument("--source", required=True, help="English, one line each")
    parser.add_argument("--reference", required=True, help="French, one reference per line")
    parser.add_argument("--hypotheses", help="write the translations here")
    parser.add_argument("--output", help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(args.reference, encoding="utf-8") as f:
        references = f.read().splitlines()
    hypotheses, sentences = translate_by_sentence(lines, args.model)
    result = {"model": args.model, "sentences": sentences, **score(hypotheses, [references])["all"]}
    if args.hypotheses:
        write_atomically(args.hypotheses, hypotheses)
    results.emit(args.output, "dev-set BLEU of a model exported before sentence splitting, "
                 "with the splitting applied around it", result)


if __name__ == "__main__":
    main()

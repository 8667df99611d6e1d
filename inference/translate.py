"""`nmt translate`: English sentences in, French out, with a pushed (or any exported) model."""
from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import unicodedata
from typing import Callable, Iterable, Iterator

from components.graph_optimization import skip_graph_optimization

_LOG = logging.getLogger(__name__)
# Sentences per request, one request at a time: the signature decodes a request's sentences
# in sub-batches of export.DECODE_ROWS rows (256 greedily), which only fill when requests are
# that large.
BATCH_SIZE = 256
# Sentences per request, requests side by side (`serve_side_by_side`): smaller requests keep
# every core busy to the end, where the longest sentences come (BENCHMARKS.md).
SIDE_BY_SIDE_BATCH_SIZE = 64


class TranslateError(RuntimeError):
    """No usable model or input; the message says what to do."""


def resolve_model_dir(path: str) -> str:
    """A SavedModel directory, or a serving directory whose newest complete version is used.

    Through tf.io.gfile, so the Kubeflow pipeline's gs://BUCKET/.../serving/nmt-fra-eng works
    as well as a local directory.
    """
    import tensorflow as tf  # heavy: not when the CLI merely starts

    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path
    from components.serving_versions import pushed_versions

    versions = pushed_versions(path) if tf.io.gfile.isdir(path) else []
    if not versions:
        raise TranslateError(f"No pushed model in {path}: run the pipeline first "
                             "(`nmt run`) or pass --model PATH to a SavedModel.")
    return os.path.join(path, str(versions[-1]))


def serve_side_by_side() -> int:
    """Sets this process's TensorFlow up as a CPU model server set for throughput: one thread
    per op, as many ops at once as the process has cores. Requests sent side by side then each
    run on a core of its own, where with TensorFlow's default threads each op was split over
    all cores and two requests at once gained little (BENCHMARKS.md, "Decoding speed").
    Returns how many requests to send at once: the cores, or 1 where TensorFlow has started
    already, as in a process that trained (its threads are fixed then, and stay as they are).
    """
    import tensorflow as tf

    cores = len(os.sched_getaffinity(0))
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(cores)
    except RuntimeError:  # TensorFlow has started
        return 1
    return cores


def set_up_serving() -> int:
    """Sets this process up as `nmt translate` and `nmt evaluate` serve: requests side by
    side (`serve_side_by_side`), the graphs as exported (`skip_graph_optimization`). Call it
    before TensorFlow starts. Returns how many requests to send at once."""
    requests_at_once = serve_side_by_side()
    skip_graph_optimization()
    return requests_at_once


def exported_beam_width(model_dir: str) -> int:
    """The width the model's beam_search signature was exported with."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the ops of the Transform graph

    signature = tf.saved_model.load(model_dir).signatures["beam_search"]
    return int(signature(tf.constant(["Hello."]))["beam_width"][0])


def clean_line(raw: bytes, number: int) -> str | None:
    """Decodes one input line; returns None (with a warning) for input we cannot translate."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        _LOG.warning("Input line %d is not valid UTF-8 (%s): skipped.", number, err.reason)
        return None
    text = text.rstrip("\r\n")
    if any(unicodedata.category(c) == "Cc" for c in text):
        _LOG.warning("Input line %d contains control characters: they are treated as spaces.",
                     number)
    if not text.strip():
        _LOG.warning("Input line %d is empty: nothing to translate.", number)
        return None
    return text


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def translate(sentences: Iterable[str | None], model_dir: str, beam: int | None = None,
              progress: Callable[[int], None] | None = None,
              batch_size: int | None = None, by_length: bool = True,
              requests_at_once: int = 1) -> list[str]:
    """Translates in batches; None (rejected input) gives an empty line, keeping alignment.
    `progress` is told how many sentences are done: 0 once the model is loaded, then after
    each batch, in order. `by_length` batches sentences of similar lengths together (the
    answers keep the input's order): a batch decodes until its slowest sentence stops, so one
    long sentence, or one caught repeating itself up to its length limit, holds back only
    sentences of its own length. `requests_at_once` batches go to the model side by side,
    from as many threads (`serve_side_by_side`); `batch_size` defaults to BATCH_SIZE, or
    SIDE_BY_SIDE_BATCH_SIZE for requests side by side."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the ops of the Transform graph

    model = tf.saved_model.load(model_dir)
    _warn_if_emulated(model)
    signature = model.signatures["beam_search" if beam else "serving_default"]
    sentences = list(sentences)
    todo = [(i, s) for i, s in enumerate(sentences) if s is not None]
    if by_length:
        todo.sort(key=lambda item: len(item[1]))
    results = [""] * len(sentences)
    truncated: list[tuple[int, int, int]] = []  # (sentence number, its tokens, the limit)
    cut_between_words: list[tuple[int, int, int]] = []  # (the same, for a clause)
    clauses = None
    done = 0
    if progress:
        progress(done)
    if batch_size is None:
        batch_size = BATCH_SIZE if requests_at_once <= 1 else SIDE_BY_SIDE_BATCH_SIZE
    batches = list(_batches(todo, batch_size))
    requests = concurrent.futures.ThreadPoolExecutor(max(requests_at_once, 1))
    try:
        outputs = requests.map(lambda batch: signature(tf.constant([s for _, s in batch])),
                               batches)
        # In order: a batch's answers are read once the batches before it are.
        for batch, output in zip(batches, outputs):
            if beam and int(output["beam_width"][0]) != beam:
                raise TranslateError(
                    f"This model's beam search uses width {int(output['beam_width'][0])}, "
                    f"not {beam}: pass --beam {int(output['beam_width'][0])} (the width is set "
                    "by the profile's beam_width when the model is exported).")
            # Models exported before clause splitting have no clause_tokens.
            clauses = output.get("clause_tokens")
            for (index, _), text, tokens, clause, limit in zip(
                    batch, output["translation"].numpy(), output["source_tokens"].numpy(),
                    (clauses if clauses is not None else output["source_tokens"]).numpy(),
                    output["max_source_tokens"].numpy()):
                if tokens > limit:
                    truncated.append((index + 1, int(tokens), int(limit)))
                elif clause > limit:
                    cut_between_words.append((index + 1, int(clause), int(limit)))
                results[index] = text.decode("utf-8")
            done += len(batch)
            if progress:
                progress(done)
    finally:  # an error (a wrong --beam) drops the batches not yet sent
        requests.shutdown(cancel_futures=True)
    # Before clause splitting a model cut whole sentences; since, only a word too long is cut.
    cut = "a sentence" if clauses is None else "a word (text without spaces)"
    _warn(sorted(truncated), cut + " of {tokens} tokens: only its first {limit} were "
          "translated", cut + " of more than the model's {limit} tokens: only its first "
          "{limit} were translated")
    _warn(sorted(cut_between_words), "a clause of {tokens} tokens with no comma or clause "
          "boundary within the model's {limit}: it was translated in pieces cut between words",
          "a clause of more than the model's {limit} tokens with no comma or clause boundary "
          "within it: it was translated in pieces cut between words")
    return results


def _warn_if_emulated(model) -> None:
    """Warns once when the model decodes with bfloat16 weights (export.decoding_copy) on a CPU
    without bfloat16 units, which emulates them: slower than float32 weights would decode."""
    from trainer_module import devices

    weights = getattr(model, "decoding_variables", ())
    if any(v.dtype.name == "bfloat16" for v in weights) and not devices.cpu_has_bfloat16_units():
        _LOG.warning("This model decodes with bfloat16 weights, and this CPU has no bfloat16 "
                     "units: it emulates them, slower than float32 weights would decode. "
                     "Export it with --hparam decode_precision=float32 to serve it here.")


def _warn(lines: list[tuple[int, int, int]], one: str, many: str, most: int = 3) -> None:
    """A warning per line (number, tokens, limit) as `one` says, or one warning for them all
    (`many`) when there are more than `most`."""
    if len(lines) <= most:
        for number, tokens, limit in lines:
            _LOG.warning("Line %d has %s.", number, one.format(tokens=tokens, limit=limit))
        return
    numbers = ", ".join(str(number) for number, _, _ in lines[:10])
    _LOG.warning("%d lines have %s (lines %s%s).", len(lines), many.format(limit=lines[0][2]),
                 numbers, ", ..." if len(lines) > 10 else "")


def read_stdin_lines() -> list[str | None]:
    return [clean_line(raw, n) for n, raw in enumerate(sys.stdin.buffer, start=1)]

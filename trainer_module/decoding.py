"""In-graph decoding (greedy, beam search) for a `Transformer`.

All three take a batch of source ids [B, S] padded with PAD_ID, work inside tf.function with a
variable batch size and length, and return (token_ids [B, L] int32, scores [B] float32).
token_ids hold the generated tokens without START_ID, up to and including END_ID, then PAD_ID;
a sentence that reaches its length limit first simply ends without END_ID. L is the number of
steps run (at most max(max_length)).

max_length is a scalar or one limit per sentence [B] (see `max_decode_length`), so a sentence
decodes the same whatever else is in its batch. A sentence leaves the loop's batch when it
ends, and the model's key/value cache grows by a position a step.

PAD_ID and START_ID never occur in target outputs, so they are never generated.

The loop guard (`loop_ngram`, `loop_repeats`; 0 turns it off) never lets a hypothesis say one
n-gram, n <= loop_ngram, more than loop_repeats times in a row: the token that would repeat it
once more is barred at that step, so the hypothesis goes on with the model's next choice (often
END_ID) instead of repeating itself up to the length limit. Given the pieces' `PieceSpelling`,
it counts letters looping inside a word too: a copy may begin inside the piece before it and
end inside the piece after it ("ta ##m ##a ##m ##a ##m" says "am" three times, and so does
"##n ##ist ##ist ##iste").
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import tensorflow as tf

from trainer_module.hparams import HParams
from trainer_module.model import Transformer
from transform_module.tokens import END_ID, PAD_ID, START_ID

_NEG_INF = -1e9  # finite, so sums and top_k stay free of NaN

# next_logits(last_tokens [B], step, state) -> (logits [B, V] float32, state)
NextLogits = Callable[[tf.Tensor, tf.Tensor, Any], tuple[tf.Tensor, Any]]


def max_decode_length(source_ids: tf.Tensor, hparams: HParams) -> tf.Tensor:
    """[B] int32: min(ceil(ratio * source_length) + extra, decode_max_length), PAD not counted."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.float32), axis=1)
    limit = tf.cast(tf.math.ceil(hparams.decode_length_ratio * lengths), tf.int32)
    return tf.minimum(limit + hparams.decode_max_extra_tokens, hparams.decode_max_length)


def _next_token_log_probs(logits: tf.Tensor) -> tf.Tensor:
    """logits [..., V] -> log-probabilities [..., V] with PAD_ID and START_ID excluded."""
    forbidden = tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=True, off_value=False) | \
        tf.one_hot(START_ID, tf.shape(logits)[-1], on_value=True, off_value=False)
    return tf.nn.log_softmax(tf.where(forbidden, _NEG_INF, logits), axis=-1)


def _write_at(buffer: tf.Tensor, values: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """buffer [..., L] with values [...] written at last-axis position index (fixed shape)."""
    return tf.where(tf.range(tf.shape(buffer)[-1]) == index, values[..., None], buffer)


class PieceSpelling(NamedTuple):
    """Which target pieces spell the same letters inside a word, for the loop guard.

    endings [V, (k)] int32: for each piece, itself and the pieces continuing a word whose
        letters end its letters ("ta": "##a"; "##inist": "##ist", "##st", "##t").
    extensions [V, (k)] int32: for a piece continuing a word, itself and the pieces continuing
        a word whose letters begin with its letters ("##ist": "##iste"); for any other, itself.
    """

    endings: tf.RaggedTensor
    extensions: tf.RaggedTensor

    @classmethod
    def of(cls, pieces: Sequence[bytes | str], joiner: str) -> PieceSpelling:
        """The tables for a vocabulary (id -> piece), whose pieces continuing a word start with
        `joiner` (WordPiece's "##")."""
        texts = [p.decode() if isinstance(p, bytes) else p for p in pieces]
        spelled = [(text[len(joiner):], True)  # (its letters, whether it continues a word)
                   if text.startswith(joiner) and len(text) > len(joiner) else (text, False)
                   for text in texts]
        continuing: dict[str, list[int]] = {}  # letters -> the pieces continuing a word
        for i, (letters, continues) in enumerate(spelled):
            if continues:
                continuing.setdefault(letters, []).append(i)
        endings = [{i} for i in range(len(texts))]
        extensions = [{i} for i in range(len(texts))]
        for i, (letters, continues) in enumerate(spelled):
            for cut in range(len(letters)):
                endings[i].update(continuing.get(letters[cut:], ()))
                if continues:
                    for unit in continuing.get(letters[:cut + 1], ()):
                        extensions[unit].add(i)
        return cls(*(tf.ragged.constant([sorted(row) for row in table], tf.int32,
                                        row_splits_dtype=tf.int64)
                     for table in (endings, extensions)))

    def ends_with(self, pieces: tf.Tensor, units: tf.Tensor) -> tf.Tensor:
        """pieces, units [...] int32 -> [...] bool: each piece is its unit or ends with the
        letters of its unit, a piece continuing a word."""
        flat = tf.reshape(pieces, [-1])
        rows = tf.gather(self.endings, flat)  # [N, (k)]
        owner = rows.value_rowids()
        hits = tf.equal(rows.flat_values, tf.gather(tf.reshape(units, [-1]), owner))
        found = tf.math.unsorted_segment_max(tf.cast(hits, tf.int32), owner, tf.size(flat))
        return tf.reshape(found > 0, tf.shape(pieces))

    def extended(self, units: tf.Tensor, vocab_size: int) -> tf.Tensor:
        """units [..., M] int32 (-1: none) -> [..., V] bool: the units and the pieces
        continuing a word whose letters begin with a unit's."""
        count = tf.shape(units)[-1]
        flat = tf.reshape(units, [-1])
        rows = tf.gather(self.extensions, tf.maximum(flat, 0))  # [N * M, (k)]
        valid = tf.gather(flat >= 0, rows.value_rowids())
        indices = tf.boolean_mask(tf.stack(
            [rows.value_rowids() // tf.cast(count, tf.int64),
             tf.cast(rows.flat_values, tf.int64)], axis=1), valid)
        rows_out = tf.size(flat, out_type=tf.int64) // tf.cast(count, tf.int64)
        marked = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.int32),
                               tf.stack([rows_out, vocab_size]))
        return tf.reshape(marked > 0, tf.concat([tf.shape(units)[:-1], [vocab_size]], 0))


def loop_bans(tokens: tf.Tensor, step: tf.Tensor, vocab_size: int, loop_ngram: int,
              loop_repeats: int, spelling: PieceSpelling | None = None) -> tf.Tensor:
    """tokens [..., L] written before position `step` -> [..., V] bool: the tokens that,
    written at `step`, would end loop_repeats + 1 copies in a row of one n-gram
    (n <= loop_ngram); with `spelling`, copies of letters inside a word too.

    Every n at once: the copies of an n-gram are periodic with period n, so each of their
    known tokens but the first n repeats the one n before it, and the next token would end
    one copy too many if it were the one n before it.
    """
    lengths = tf.range(1, loop_ngram + 1)  # [N]: n
    compared = lengths * loop_repeats - 1  # [N]: the known tokens that repeat one n before
    offsets = tf.range(max(loop_ngram * loop_repeats - 1, 0))  # [M]
    # history[..., j] = tokens[step - 1 - j], the latest first, as many as the longest copies
    # span (clipped at 0: the copies must fit, `fits` below).
    history = tf.gather(tokens, tf.maximum(step - 1 - tf.range(loop_ngram * (loop_repeats + 1)),
                                           0), axis=-1)
    same = tf.equal(tf.gather(history, offsets, axis=-1)[..., None, :],
                    tf.gather(history, offsets[None, :] + lengths[:, None], axis=-1))
    if spelling is not None:
        # The first copy may begin inside the piece before it ("ta ##m ##a ##m ##a").
        last = tf.maximum(compared - 1, 0)  # [N]: the first copy's unit and the piece before
        begins_inside = spelling.ends_with(tf.gather(history, last + lengths, axis=-1),
                                           tf.gather(history, last, axis=-1))  # [..., N]
        same = tf.where(offsets[None, :] == (compared - 1)[:, None], begins_inside[..., None],
                        same)
    counted = offsets[None, :] < compared[:, None]  # [N, M]
    fits = step + 1 >= lengths * (loop_repeats + 1)
    periodic = tf.reduce_all(same | ~counted, axis=-1) & fits  # [..., N]
    # Per n: the token that would end one copy too many, or -1.
    looped = tf.where(periodic, tf.gather(history, lengths - 1, axis=-1), -1)
    banned_shape = tf.concat([tf.shape(looped)[:-1], [vocab_size]], 0)

    def bans() -> tf.Tensor:
        if spelling is None:
            return tf.reduce_any(tf.cast(tf.one_hot(looped, vocab_size), tf.bool), axis=-2)
        # The last copy may end inside the piece after it ("##ist ##ist ##iste").
        return spelling.extended(looped, vocab_size)

    # Most steps of most sentences repeat nothing: then no [..., V] table is built.
    return tf.cond(tf.reduce_any(looped >= 0), bans, lambda: tf.zeros(banned_shape, tf.bool))


def _per_sentence(max_length: tf.Tensor | int,
                  source_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Limits [B] int32 and the loop bound max(limits) (0 for an empty batch)."""
    limits = tf.broadcast_to(tf.cast(max_length, tf.int32), tf.shape(source_ids)[:1])
    return limits, tf.maximum(tf.reduce_max(limits), 0)


def _rows(structure: Any, keep: tf.Tensor) -> Any:
    """Rows `keep` [A'] of every tensor of `structure`, all of them batch-first."""
    return tf.nest.map_structure(lambda tensor: tf.gather(tensor, keep), structure)


def any_batch(structure: Any) -> Any:
    """The shape invariants of batch-first loop state whose batch shrinks and whose inner
    sizes may change (a decoder cache grows by a position a step): all but the last axis
    (decode_probe.py's loop names them too)."""
    return tf.nest.map_structure(lambda tensor: tf.TensorShape([None]).concatenate(
        [None] * (tensor.shape.rank - 2) + tensor.shape[1:][-1:]), structure)


def _greedy_loop(next_logits: NextLogits, state: Any, limits: tf.Tensor,
                 loop_length: tf.Tensor, loop_ngram: int = 0, loop_repeats: int = 0,
                 spelling: PieceSpelling | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Argmax decoding, from `next_logits` (tests/test_model.py also gives it an uncached
    one), whose `state` is batch-first.

    A sentence leaves the batch at the step it ends: later steps run on the rows still
    translating (their rows of `state` gathered), so a batch costs the sum of its translations'
    lengths, not its size times the longest one's."""
    batch_size = tf.shape(limits)[0]

    def body(step, rows, last_tokens, tokens, scores, state):
        # rows [A]: the sentences still translating, in order; tokens [B, L], scores [B]: all
        logits, state = next_logits(last_tokens, step, state)
        log_probs = _next_token_log_probs(logits)
        if loop_ngram and loop_repeats:
            log_probs = tf.where(loop_bans(tf.gather(tokens, rows), step, logits.shape[-1],
                                           loop_ngram, loop_repeats, spelling),
                                 _NEG_INF, log_probs)
        best = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        tokens = tf.tensor_scatter_nd_update(
            tokens, tf.stack([rows, tf.fill(tf.shape(rows), step)], axis=1), best)
        scores = tf.tensor_scatter_nd_add(scores, rows[:, None],
                                          tf.gather(log_probs, best, batch_dims=1))
        going = tf.not_equal(best, END_ID) & (step + 1 < tf.gather(limits, rows))
        rows, best, state = tf.cond(
            tf.reduce_all(going), lambda: (rows, best, state),
            lambda: _rows((rows, best, state), tf.where(going)[:, 0]))
        return step + 1, rows, best, tokens, scores, state

    def cond(step, rows, *_):
        return (step < loop_length) & (tf.size(rows) > 0)

    starting = limits > 0
    rows, state = tf.cond(tf.reduce_all(starting), lambda: (tf.range(batch_size), state),
                          lambda: _rows((tf.range(batch_size), state), tf.where(starting)[:, 0]))
    initial = (tf.constant(0), rows, tf.fill(tf.shape(rows), START_ID),
               tf.fill([batch_size, loop_length], PAD_ID), tf.zeros([batch_size]), state)
    step, _, _, tokens, scores, _ = tf.while_loop(
        cond, body, initial, shape_invariants=(
            tf.TensorShape([]), tf.TensorShape([None]), tf.TensorShape([None]),
            initial[3].shape, initial[4].shape, any_batch(state)))
    return tokens[:, :step], scores


def greedy_decode(model: Transformer, source_ids: tf.Tensor, max_length: tf.Tensor | int,
                  loop_ngram: int = 0, loop_repeats: int = 0,
                  spelling: PieceSpelling | None = None) -> tuple[tf.Tensor, tf.Tensor]:
    """Greedy decoding with the key/value cache: each step runs the decoder on one position.

    Returns token_ids [B, L] int32 and scores [B] float32, the sum of the chosen log-probs.
    """
    limits, loop_length = _per_sentence(max_length, source_ids)
    memory, source_mask = model.encode(source_ids)
    cache = model.init_cache(memory, source_mask)
    return _greedy_loop(model.decode_step, cache, limits, loop_length, loop_ngram,
                        loop_repeats, spelling)


def _length_penalty(length: tf.Tensor, alpha: float) -> tf.Tensor:
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al. 2016)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_search_decode(model: Transformer, source_ids: tf.Tensor, max_length: tf.Tensor | int,
                       beam_width: int, alpha: float, loop_ngram: int = 0,
                       loop_repeats: int = 0, spelling: PieceSpelling | None = None
                       ) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search with the key/value cache; returns the best hypothesis per sentence.

    Each step ranks the 2 * beam_width best extensions by log-probability. An extension ending in
    END_ID (or reaching the sentence's limit) is finished if it ranks within the first beam_width;
    the beam_width best unfinished ones go on. The answer is the finished hypothesis with the
    best score log_prob / length_penalty. A sentence is done at its limit, or once no unfinished
    hypothesis can beat its best finished one even at the limit: not, as in OpenNMT-py, as soon
    as its most probable extension ends, which would ignore the length penalty and answer short
    (BENCHMARKS.md, "Decoding speed"). The loop guard bars extensions as in greedy decoding.
    With beam_width=1 and alpha=0 this is exactly greedy decoding.

    Returns token_ids [B, L] int32 and scores [B] float32 (length-normalized log-probability;
    the plain sum when alpha is 0).
    """
    limits, loop_length = _per_sentence(max_length, source_ids)
    batch_size = tf.shape(source_ids)[0]
    memory, source_mask = model.encode(source_ids)
    # Beams of a sentence are consecutive rows: [A * beam_width, ...] for the A sentences still
    # searching; a sentence's beams leave the batch at the step it is done.
    cache = model.init_cache(tf.repeat(memory, beam_width, axis=0),
                             tf.repeat(source_mask, beam_width, axis=0))
    candidates = 2 * beam_width  # at most beam_width of them end in END_ID: enough remain alive
    first_rank = tf.range(candidates) < beam_width

    def beams(sentences: tf.Tensor) -> tf.Tensor:
        """[A'] indices of sentences among the A -> [A' * beam_width] rows of their beams."""
        return tf.reshape(sentences[:, None] * beam_width + tf.range(beam_width, dtype=
                                                                     sentences.dtype), [-1])

    def body(step, rows, alive_tokens, alive_log_probs, alive_last, cache,
             all_finished_tokens, all_finished_scores):
        # rows [A]: the sentences still searching; all_finished_* [B, ...]: every sentence's
        logits, cache = model.decode_step(tf.reshape(alive_last, [-1]), step, cache)
        vocab_size = logits.shape[-1]  # static, so reshapes keep the loop's static shapes
        log_probs = tf.reshape(_next_token_log_probs(logits), [-1, beam_width, vocab_size])
        if loop_ngram and loop_repeats:
            log_probs = tf.where(loop_bans(alive_tokens, step, vocab_size, loop_ngram,
                                           loop_repeats, spelling), _NEG_INF, log_probs)
        extended = tf.reshape(alive_log_probs[:, :, None] + log_probs,
                              [-1, beam_width * vocab_size])
        candidate_log_probs, flat_index = tf.math.top_k(extended, k=candidates)  # [A, 2K]
        parent, token = flat_index // vocab_size, flat_index % vocab_size
        candidate_tokens = _write_at(tf.gather(alive_tokens, parent, batch_dims=1), token, step)

        limit = tf.gather(limits, rows)
        at_limit = step + 1 >= limit
        ends = tf.equal(token, END_ID)
        finishing = first_rank & (ends | at_limit[:, None])
        scores = tf.where(finishing, candidate_log_probs / _length_penalty(step + 1, alpha),
                          _NEG_INF)
        finished_scores, keep = tf.math.top_k(
            tf.concat([tf.gather(all_finished_scores, rows), scores], 1), beam_width)
        finished_tokens = tf.gather(tf.concat([tf.gather(all_finished_tokens, rows),
                                               candidate_tokens], 1), keep, batch_dims=1)
        all_finished_scores = tf.tensor_scatter_nd_update(all_finished_scores, rows[:, None],
                                                          finished_scores)
        all_finished_tokens = tf.tensor_scatter_nd_update(all_finished_tokens, rows[:, None],
                                                          finished_tokens)

        alive_log_probs, keep = tf.math.top_k(
            tf.where(ends, _NEG_INF, candidate_log_probs), beam_width)
        alive_tokens = tf.gather(candidate_tokens, keep, batch_dims=1)
        alive_last = tf.gather(token, keep, batch_dims=1)
        parents = tf.gather(parent, keep, batch_dims=1) + tf.range(tf.size(rows))[:, None] * \
            beam_width
        cache = model.reorder_cache(cache, tf.reshape(parents, [-1]))
        # Log-probabilities only fall as a hypothesis grows, and the penalty only rises up to
        # the limit (alpha >= 0, HParams checks): no unfinished one can score above this.
        best_possible = alive_log_probs[:, 0] / _length_penalty(limit, alpha)
        going = ~at_limit & (finished_scores[:, 0] < best_possible)
        searching = (rows, alive_tokens, alive_log_probs, alive_last)
        searching, cache = tf.cond(
            tf.reduce_all(going), lambda: (searching, cache),
            lambda: (_rows(searching, tf.where(going)[:, 0]),
                     _rows(cache, beams(tf.where(going)[:, 0]))))
        return (step + 1, *searching, cache, all_finished_tokens, all_finished_scores)

    def cond(step, rows, *_):
        return (step < loop_length) & (tf.size(rows) > 0)

    # Only the first beam is live at the start, so the beams do not all repeat one hypothesis.
    initial_log_probs = tf.tile([[0.0] + [_NEG_INF] * (beam_width - 1)], [batch_size, 1])
    empty = tf.zeros([batch_size, beam_width, loop_length], tf.int32)
    searching = (tf.range(batch_size), empty, initial_log_probs,
                 tf.fill([batch_size, beam_width], START_ID))
    starting = limits > 0
    searching, cache = tf.cond(
        tf.reduce_all(starting), lambda: (searching, cache),
        lambda: (_rows(searching, tf.where(starting)[:, 0]),
                 _rows(cache, beams(tf.where(starting)[:, 0]))))
    initial = (tf.constant(0), *searching, cache, empty,
               tf.fill([batch_size, beam_width], _NEG_INF))
    step, *_, finished_tokens, finished_scores = tf.while_loop(
        cond, body, initial, shape_invariants=(
            tf.TensorShape([]), *any_batch(searching), any_batch(cache),
            empty.shape, initial[-1].shape))
    return finished_tokens[:, 0, :step], finished_scores[:, 0]

"""Transform's preprocessing_fn: normalize, tokenize and map words to ids, all in the graph.

The same graph runs in Transform (training data) and inside the exported SavedModel (serving),
so there is no training/serving skew. Only long-standing TF and tensorflow-text ops are used
(TF Serving embeds tensorflow-text 2.12).
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from typing import Any

import tensorflow as tf
import tensorflow_text as text
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from transform_module.tokens import (DEFAULT_FREQUENCY_THRESHOLD, DEFAULT_JOINT_VOCABULARY,
                                     DEFAULT_SENTENCEPIECE_MAX_SENTENCES,
                                     DEFAULT_SPLIT_ELISIONS, DEFAULT_TOKENIZER,
                                     DEFAULT_VOCAB_SIZE, DEFAULT_WHOLE_NUMBERS,
                                     DEFAULT_WORDPIECE_MAX_WORDS, DEFAULT_WORDPIECE_MIN_COUNT,
                                     END_ID, PAD_ID, START_ID, TOKENIZERS, UNK_ID)
from transform_module.sentencepiece import (WORD_START, kept_sentencepiece_vocabularies,
                                            served_assets, sentencepiece_vocabularies)
from transform_module.wordpiece import WORDPIECE_JOINER, wordpiece_vocabularies

# Raw features (from ExampleGen) and transformed features (to the Trainer / TFMA).
ENGLISH, FRENCH = "english", "french"
SOURCE_IDS, TARGET_IDS = "source_ids", "target_ids"
LENGTH_BUCKET = "english_length_bucket"
SOURCE_VOCAB, TARGET_VOCAB = "english_vocab", "french_vocab"
JOINT_VOCAB = "joint_vocab"  # one file for both languages; the two names above point to it

RESERVED_TOKENS = ("[pad]", "[UNK]", "[start]", "[end]")
assert [RESERVED_TOKENS.index(t) for t in RESERVED_TOKENS] == [PAD_ID, UNK_ID, START_ID, END_ID]

# English length buckets (in whitespace-separated words of the raw sentence) for TFMA slices.
LENGTH_BUCKETS = ((1, 5, "01-05"), (6, 10, "06-10"), (11, 20, "11-20"), (21, None, "21+"))

_WORD = r"\pL\pN\pM_"  # RE2's \w is ASCII-only: use Unicode letter/number/mark classes
_EDGE_MARKS = "'’-"  # kept inside words (aujourd'hui, peut-être), split at token edges
# Between two digits these stay inside the number (3,50  5:30  10.5  12/05/2020), so the number
# is one word that detokenizes unchanged; elsewhere they are punctuation and split off.
_NUMBER_SEPARATORS = ".,:/"
# A private-use character (input ones are deleted first) that brackets a separator inside a
# number while punctuation is split off: RE2 has no lookaround to say "between two digits".
_NUMBER_MARK = "\ue000"
# French elided articles, pronouns and conjunctions: "l'homme" -> "l'" "homme" (split_elisions).
_ELISIONS = ("l", "d", "j", "qu", "n", "s", "c", "m", "t", "jusqu", "lorsqu", "puisqu")
_ELISION = rf"(?i)(^|\s)((?:{'|'.join(_ELISIONS)})['’])"


@dataclasses.dataclass(frozen=True)
class TransformSettings:
    """Transform's custom_config (same keys), checked so that a bad value fails with one line.

    whole_numbers: 3,50 / 5:30 / 10.5 stay one word (else the separators are split off and come
    back spaced: "3, 50"). split_elisions: French "l'homme" becomes "l'" "homme", so "homme"
    is one vocabulary entry whatever precedes it; `detokenize` rejoins them. joint_vocabulary:
    one vocabulary learned from both languages (the Trainer then ties the embeddings, see
    `shares_vocabulary`). wordpiece_min_count: the WordPiece learner keeps no piece seen fewer
    times (tensorflow-text's default 10 stops English at ~4,200 pieces, below vocab_size).
    wordpiece_max_words: the learner is fed only this many most frequent distinct words, so its
    time and memory stay bounded whatever the corpus (fra.txt has ~25,000 per language: none
    are dropped there). sentencepiece_max_sentences: the SentencePiece learner reads a sample
    of at most this many distinct sentences per vocabulary (for the same reason).
    """
    tokenizer: str = DEFAULT_TOKENIZER
    vocab_size: int = DEFAULT_VOCAB_SIZE
    frequency_threshold: int = DEFAULT_FREQUENCY_THRESHOLD
    whole_numbers: bool = DEFAULT_WHOLE_NUMBERS
    split_elisions: bool = DEFAULT_SPLIT_ELISIONS
    joint_vocabulary: bool = DEFAULT_JOINT_VOCABULARY
    wordpiece_min_count: int = DEFAULT_WORDPIECE_MIN_COUNT
    wordpiece_max_words: int = DEFAULT_WORDPIECE_MAX_WORDS
    sentencepiece_max_sentences: int = DEFAULT_SENTENCEPIECE_MAX_SENTENCES
    # A warm start's base (a served version, or a serving directory: its newest version) keep
    # its SentencePiece vocabulary instead of learning one, so every id means the same piece;
    # nothing served yet: learn.
    served_vocabulary: str = ""

    def __post_init__(self) -> None:
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(
                f"unknown tokenizer {self.tokenizer!r}; valid: {', '.join(TOKENIZERS)}")
        if self.served_vocabulary and self.tokenizer != "sentencepiece":
            raise ValueError(f"a served model's vocabulary (served_vocabulary) is kept only "
                             f"for the sentencepiece tokenizer, not {self.tokenizer!r}")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "bool" and not isinstance(value, bool):
                raise ValueError(f"Transform setting {field.name} must be true or false, "
                                 f"got {value!r}")
            if field.type == "int" and (isinstance(value, bool) or not isinstance(value, int)
                                        or value < 1):
                raise ValueError(f"Transform setting {field.name} must be a positive integer, "
                                 f"got {value!r}")

    @classmethod
    def from_config(cls, custom_config: dict[str, Any] | None) -> TransformSettings:
        """Known keys of a custom_config (others, e.g. code_version, are not settings)."""
        names = {field.name for field in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (custom_config or {}).items() if k in names})


def normalize(sentences: tf.Tensor, whole_numbers: bool = DEFAULT_WHOLE_NUMBERS,
              split_elisions: bool = False) -> tf.Tensor:
    """NFKC, control, format and private-use characters removed, punctuation split off words,
    whitespace collapsed; case kept. Numbers keep their inner separators (`whole_numbers`);
    French elisions are split off the next word (`split_elisions`).

    RE2 has no lookaround, so "apostrophe/hyphen not followed by a word character" is
    written as explicit token-edge rules.
    """
    x = text.normalize_utf8(sentences, "NFKC")  # also maps (narrow) no-break spaces to spaces
    x = tf.strings.regex_replace(x, r"\p{Cc}", " ")  # control characters separate words
    x = tf.strings.regex_replace(x, r"[\p{Cf}\p{Co}]", "")  # format/private-use chars vanish
    keep = _EDGE_MARKS  # ends with "-": anything appended would make a range of the class
    if whole_numbers:
        keep = _NUMBER_MARK + keep
        for _ in range(2):  # matches cannot overlap: the 2nd comma of "1,2,3" needs a 2nd pass
            x = tf.strings.regex_replace(
                x, rf"(\pN)([{_NUMBER_SEPARATORS}])(\pN)", rf"\1{_NUMBER_MARK}\2{_NUMBER_MARK}\3")
    x = tf.strings.regex_replace(x, rf"([^{_WORD}\s{keep}])", r" \1 ")
    if whole_numbers:
        x = tf.strings.regex_replace(
            x, rf"{_NUMBER_MARK} ([{_NUMBER_SEPARATORS}]) {_NUMBER_MARK}", r"\1")
    x = tf.strings.regex_replace(x, rf"(^|\s)([{_EDGE_MARKS}]+)", r"\1\2 ")
    x = tf.strings.regex_replace(x, rf"([{_EDGE_MARKS}]+)(\s|$)", r" \1\2")
    if split_elisions:  # after the edge rules: only "l'" followed by a word character is left
        x = tf.strings.regex_replace(x, _ELISION + rf"([{_WORD}])", r"\1\2 \3")
    x = tf.strings.regex_replace(x, r"\s+", " ")
    return tf.strings.strip(x)


def tokenize(sentences: tf.Tensor, whole_numbers: bool = DEFAULT_WHOLE_NUMBERS,
             split_elisions: bool = False) -> tf.RaggedTensor:
    """[...] strings -> [..., (tokens)] words after `normalize`."""
    return tf.strings.split(normalize(sentences, whole_numbers, split_elisions))


def length_bucket(sentences: tf.Tensor) -> tf.Tensor:
    """[B] raw English sentences -> [B] bucket names by number of words."""
    words = tf.strings.split(tf.strings.strip(sentences)).row_lengths()
    bucket = tf.fill(tf.shape(words), LENGTH_BUCKETS[-1][2])
    for low, high, name in reversed(LENGTH_BUCKETS[:-1]):
        bucket = tf.where((words >= low) & (words <= high), name, bucket)
    return bucket


def _vocabularies(texts: dict[str, list[tf.Tensor | tf.RaggedTensor]],
                  settings: TransformSettings) -> dict[str, Any]:
    """By vocabulary name, the vocabulary file (a Transform asset) learned from every
    normalized sentence of its `texts`; for sentencepiece, (vocabulary file, model file).
    The subword vocabularies are learned together (one Beam stage, so several workers learn
    them at once)."""
    def flat(values: list[tf.Tensor | tf.RaggedTensor]) -> tf.Tensor:
        return tf.concat([v.flat_values if isinstance(v, tf.RaggedTensor) else v
                          for v in values], axis=0)

    served = settings.served_vocabulary and served_assets(settings.served_vocabulary)
    if served:
        return kept_sentencepiece_vocabularies({name: flat(t) for name, t in texts.items()},
                                               served)
    if settings.tokenizer == "sentencepiece":
        return sentencepiece_vocabularies(
            {name: flat(t) for name, t in texts.items()}, settings.vocab_size,
            settings.sentencepiece_max_sentences, RESERVED_TOKENS)
    words = {name: flat([tf.strings.split(v) for v in t]) for name, t in texts.items()}
    if settings.tokenizer == "wordpiece":
        return wordpiece_vocabularies(words, settings.vocab_size, settings.wordpiece_min_count,
                                      settings.wordpiece_max_words)
    return {name: tft.vocabulary(w, top_k=settings.vocab_size, vocab_filename=name,
                                 frequency_threshold=settings.frequency_threshold)
            for name, w in words.items()}


def _ids(texts: tf.Tensor | tf.RaggedTensor, vocab: tf.Tensor | tuple[tf.Tensor, tf.Tensor],
         settings: TransformSettings) -> tf.RaggedTensor:
    """Normalized sentences [...] -> ids [..., (T)] of the learned vocabulary, the reserved
    ids first; anything not in the vocabulary -> [UNK]. With wordpiece or sentencepiece a word
    becomes one or more pieces, so the innermost ragged dimension counts pieces, not words."""
    if settings.tokenizer == "sentencepiece":
        _, model_file = vocab
        return _sentencepiece_ids(texts, model_file)  # its ids put the reserved tokens first
    words = tf.strings.split(texts)
    if settings.tokenizer == "wordpiece":
        index = tft.apply_vocabulary(words, vocab, lookup_fn=_wordpiece_lookup)
    else:
        index = tft.apply_vocabulary(words, vocab, default_value=-1)
    return tf.ragged.map_flat_values(
        lambda i: tf.where(i < 0, tf.cast(UNK_ID, i.dtype), i + len(RESERVED_TOKENS)), index)


def _sentencepiece_ids(texts: tf.Tensor | tf.RaggedTensor, model_file: tf.Tensor
                       ) -> tf.RaggedTensor:
    """[...] sentences -> [..., (P)] ids of the SentencePiece model in `model_file`.

    tensorflow-text's SentencepieceOp takes the model as an attribute, so the exported graph
    carries it (serving reads no file) and it must be known when the graph is built: in
    Transform's final trace. The traces before it, while the analyzers run, compute nothing
    from the ids; there they are zeros of the same type and ragged shape (one per word).
    SentencepieceOp and SentencepieceTokenizeOp are in the tensorflow-text build that TF
    Serving 2.12 links in (docs/pipeline.md)."""
    known = isinstance(model_file, (str, bytes)) or not tf.is_symbolic_tensor(model_file)
    if not known:
        words = tf.strings.split(texts)
        return words.with_flat_values(tf.zeros_like(words.flat_values, tf.int64))
    with tf.init_scope():
        model = tf.io.read_file(model_file).numpy()
    tokenizer = text.SentencepieceTokenizer(model=model)  # int32 ids: its only integer type
    if isinstance(texts, tf.RaggedTensor):
        ids = texts.with_flat_values(tokenizer.tokenize(texts.flat_values))
    else:
        ids = tokenizer.tokenize(texts)
    return tf.ragged.map_flat_values(tf.cast, ids, tf.int64)


def _wordpiece_lookup(words: tf.RaggedTensor, vocab_file: tf.Tensor
                      ) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """[..., (W)] words -> [..., (P)] piece indices in `vocab_file`, -1 for a word that cannot
    be spelled with the pieces. WordpieceTokenizeWithOffsets is a tf-text 2.0 op, so TF
    Serving (tf-text 2.12) loads it."""
    # Once the file is known (the final trace, as tft.apply_vocabulary does it), build the table
    # outside the function so serving initializes it once, not on every call.
    known = isinstance(vocab_file, (str, bytes)) or not tf.is_symbolic_tensor(vocab_file)
    with tf.init_scope() if tf.inside_function() and known else contextlib.nullcontext():
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER),
            default_value=-1)
    tokenizer = text.WordpieceTokenizer(table, suffix_indicator=WORDPIECE_JOINER,
                                        token_out_type=tf.int64, unknown_token=None)
    return tokenizer.tokenize(words).merge_dims(-2, -1), table.size()


def preprocessing_fn(inputs: dict[str, Any], custom_config: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """english [B] -> source_ids [B, (S)]; french [B, (R)] -> target_ids [B, (R), (T)].

    Each example keeps all its French references (ragged); the Trainer expands them into one
    training pair per reference. custom_config: `TransformSettings`.
    """
    settings = TransformSettings.from_config(custom_config)
    english = tf.reshape(_dense(inputs[ENGLISH]), [-1])
    texts = {SOURCE_VOCAB: normalize(english, settings.whole_numbers)}  # [B]
    if FRENCH in inputs:  # absent at serving time: only English comes in
        texts[TARGET_VOCAB] = normalize(_ragged(inputs[FRENCH]), settings.whole_numbers,
                                        settings.split_elisions)  # [B, (R)]
    if settings.joint_vocabulary:
        joint = _vocabularies({JOINT_VOCAB: list(texts.values())}, settings)[JOINT_VOCAB]
        for name in (SOURCE_VOCAB, TARGET_VOCAB):  # so each side finds it under its own name
            tft.annotate_asset(name, JOINT_VOCAB)
        vocabs = {name: joint for name in texts}
    else:
        vocabs = _vocabularies({name: [t] for name, t in texts.items()}, settings)
    outputs = {SOURCE_IDS: _ids(texts[SOURCE_VOCAB], vocabs[SOURCE_VOCAB], settings),
               LENGTH_BUCKET: length_bucket(english)}
    if TARGET_VOCAB in texts:
        outputs[TARGET_IDS] = _ids(texts[TARGET_VOCAB], vocabs[TARGET_VOCAB], settings)
    return outputs


def shares_vocabulary(tf_transform_output: tft.TFTransformOutput) -> bool:
    """Whether Transform learned one joint vocabulary (joint_vocabulary): the same ids mean the
    same pieces on both sides, so the Trainer ties the source and target embeddings."""
    return (tf_transform_output.vocabulary_file_by_name(SOURCE_VOCAB)
            == tf_transform_output.vocabulary_file_by_name(TARGET_VOCAB))


def _dense(x) -> tf.Tensor:
    if isinstance(x, tf.SparseTensor):
        return tf.sparse.to_dense(x, default_value="")
    if isinstance(x, tf.RaggedTensor):
        return x.to_tensor(default_value="")
    return x


def _ragged(x) -> tf.RaggedTensor:
    if isinstance(x, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(x)
    if isinstance(x, tf.RaggedTensor):
        return x
    return tf.RaggedTensor.from_tensor(x)


def detokenize(tokens: tf.RaggedTensor) -> tf.Tensor:
    """[B, (T)] French tokens -> [B] sentences: the inverse of wordpiece (or sentencepiece,
    whose vocabulary file is written in wordpiece's form) and `normalize`'s splitting
    (`normalize` never makes a word that starts with "#", so "##" is unambiguous, nor one that
    ends with an apostrophe unless it split an elision, so "l' homme" is "l'homme").

    Spaces go back only where French typography has none (before . , ) and after ( );
    French keeps its space before ! ? : ; and inside « ».
    """
    x = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    x = tf.strings.regex_replace(x, " " + WORDPIECE_JOINER, "")  # rejoin WordPiece continuations
    x = tf.strings.regex_replace(x, WORD_START, "")  # SentencePiece's bare word start, now joined
    x = tf.strings.regex_replace(x, _ELISION + " ", r"\1\2")
    x = tf.strings.regex_replace(x, r" ([.,)\]}…])", r"\1")
    return tf.strings.regex_replace(x, r"([(\[{]) ", r"\1")


def analyze_in_memory(rows: list[dict[str, list[str]]], custom_config: dict[str, Any]
                      ) -> tft.TFTransformOutput:
    """The Transform graph that the pipeline's Transform would learn from `rows`
    ({"english": [sentence], "french": [reference, ...]}; French optional), analyzed in memory
    on Beam's direct runner: for tests and benchmarks that need one without a pipeline run."""
    spec = {ENGLISH: tf.io.FixedLenFeature([1], tf.string)}
    if FRENCH in rows[0]:
        spec[FRENCH] = tf.io.VarLenFeature(tf.string)
    with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        transform_fn = (rows, tft.DatasetMetadata.from_feature_spec(spec)) | \
            tft_beam.AnalyzeDataset(lambda inputs: preprocessing_fn(inputs, custom_config))
        out = tempfile.mkdtemp()
        _ = transform_fn | tft_beam.WriteTransformFn(out)
    return tft.TFTransformOutput(out)

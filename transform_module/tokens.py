"""Token-id conventions and Transform's tokenization defaults.

Kept apart from the model's hyperparameters (`trainer_module/hparams.py`) because Transform's
cache key covers exactly the modules `preprocessing.py` imports (`pipeline/code_version.py`):
editing a profile or the model must not re-run Transform on the whole data.
"""

# Reserved ids; the vocabularies (built by Transform) put these four tokens first.
PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3

# Transform's tokenizers: "word" (the seeds' whole words; rare words become [UNK]),
# "wordpiece" (subwords learned from the training words: rare words are spelled from pieces) or
# "sentencepiece" (a unigram language model of subwords, learned from the training sentences).
TOKENIZERS = ("wordpiece", "word", "sentencepiece")
# SentencePiece with one joint vocabulary: better on unseen sentences than a WordPiece
# vocabulary per language or a joint WordPiece one (BENCHMARKS.md, "Decisions"), and learned in
# seconds.
DEFAULT_TOKENIZER = "sentencepiece"
# Transform's other tokenization defaults (preprocessing.TransformSettings; BENCHMARKS.md):
DEFAULT_WHOLE_NUMBERS = True  # 3,50 and 5:30 stay one word: numbers detokenize unchanged
DEFAULT_SPLIT_ELISIONS = True  # French l'homme -> l' homme: one entry for homme (BENCHMARKS.md)
DEFAULT_JOINT_VOCABULARY = True  # one vocabulary for both languages, tied embeddings
DEFAULT_VOCAB_SIZE = 8000  # pieces (or words) per language, plus the reserved tokens
DEFAULT_FREQUENCY_THRESHOLD = 2  # word tokenizer: rarer words become [UNK]
DEFAULT_WORDPIECE_MIN_COUNT = 10  # the WordPiece learner keeps no rarer piece (tf-text's default)
# The WordPiece learner is pure Python on one worker: it sees only this many most frequent words,
# which bounds its time and memory (docs/scaling.md) and is 4x fra.txt's distinct French words.
DEFAULT_WORDPIECE_MAX_WORDS = 100_000
# The SentencePiece learner reads whole sentences on one worker: it sees a sample of at most this
# many distinct sentences per vocabulary, which bounds its time (all of fra.txt's per language).
DEFAULT_SENTENCEPIECE_MAX_SENTENCES = 200_000

"""Hyperparameters of the translator and named profiles (token ids: `transform_module/tokens.py`).

One frozen `HParams` travels from the Trainer to the model, the optimizer and the decoders, so a
run is fully described by a profile name plus the vocabulary sizes read from the vocab files.
"""
from __future__ import annotations

import dataclasses

# Training precision (Keras mixed-precision policies). Variables stay float32 in all of them and
# the export keeps them (DECODE_PRECISIONS: what decodes); "auto" picks per machine (see
# devices.resolve_precision):
# mixed_float16 on GPUs, mixed_bfloat16 on CPUs with bfloat16 matrix units, else float32.
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16", "auto")
TRAINING_PRECISIONS = PRECISIONS[:-1]  # what "auto" becomes
# Where word order enters the model (model.py): "absolute", the paper's sinusoids added to the
# embeddings, or "rotary", self-attention's queries and keys turned by their positions
# (RoFormer, Su et al. 2021), so attention sees how far apart two words are, not where. In
# the `cpu` budget rotary tied on unseen sentences and translated long ones shorter and
# worse (BENCHMARKS.md, "Long sentences"), so no profile uses it.
POSITIONS = ("absolute", "rotary")
# The exported model's decoding weights (export.decoding_copy): float32, bfloat16 (half the
# bytes a decoding step reads, and the CPU's bfloat16 units), or "auto": bfloat16 where the
# exporting CPU has bfloat16 units and a probe of the trained model decodes faster with them
# (devices.resolve_decode_precision). The float32 weights stay in the export beside bfloat16
# ones, for continued training. The `cpu` and `base` profiles say "auto": on the CPUs with
# the units measured, bfloat16 decoded faster, and its translations scored within noise of
# float32's (BENCHMARKS.md, "Decoding speed"). HParams' own default, float32, is the tests'.
DECODE_PRECISIONS = ("float32", "bfloat16", "auto")


@dataclasses.dataclass(frozen=True)
class HParams:
    """Defaults are the paper's base model (Vaswani et al. 2017, Table 3); profiles override."""

    # Architecture (paper names).
    num_layers: int = 6  # the paper's N: encoder layers, and decoder layers unless set below
    # >0: a decoder of this many layers instead (a deep encoder with a shallow decoder trains
    # and decodes faster for similar quality; Kasai et al. 2021).
    num_decoder_layers: int = 0
    d_model: int = 512
    num_heads: int = 8
    dff: int = 2048
    dropout_rate: float = 0.1
    tie_output_to_embedding: bool = True  # final projection = target embedding matrix transposed
    positions: str = "absolute"  # one of POSITIONS

    # Loss and optimization (paper §5.3-5.4).
    label_smoothing: float = 0.1
    warmup_steps: int = 4000
    # Multiplies the paper's schedule: its peak d_model^-0.5 * warmup^-0.5 is tied to the warmup
    # length, so short runs (short warmup) need this to keep the peak learning rate sane.
    learning_rate_scale: float = 1.0
    # The learning rate decays linearly to zero over this last fraction of the training steps (0:
    # the paper's schedule, which never anneals). Under a time budget the budget decides the
    # last step before the cooldown begins, so the cooldown always completes.
    cooldown_fraction: float = 0.0
    # A warm-started run's schedule (optimization.TransformerSchedule): "continue" takes the
    # rate where the base's training left it, after a short rise; "restart" warms up to the
    # peak again as a fresh run does (kept to measure the choice: BENCHMARKS.md, warm starts).
    continued_schedule: str = "continue"
    # A warm-started run's cooldown and weight average: "total" spans cooldown_fraction and
    # average_fraction of all the steps of the schedule behind its model and its own (at most
    # its own), so that the last run of a chain ends as one long run would; "run" spans those
    # of its own steps only. "total" scored higher in both chains that measured it, each time
    # within about one bootstrap sd (BENCHMARKS.md, "A schedule that builds on the served
    # model").
    continued_tail: str = "total"
    # What a warm-started run starts from: "state", the base's weights and optimizer moments
    # from where its cooldown began (settings.TRAINING_STATE), so that a chain of runs follows
    # one long run's schedule; "served", the served weights (cooled down and averaged) with
    # empty moments. A base without a saved state is continued as "served".
    continued_from: str = "state"
    optimizer: str = "adam"  # "adam" (the paper's) or "rmsprop" (the seeds' recipe, default rate)
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    # >0: the optimizer keeps an exponential moving average of the weights (Keras' use_ema),
    # and that average, not the last noisy weights, is what gets exported.
    ema_momentum: float = 0.0
    # >0: the uniform average of the weights over this last fraction of the training steps is
    # exported instead of the last weights (the anchor averaged its last quarter; unlike the
    # moving average above, it holds no trace of the random initial weights in a short run).
    # ema_momentum > 0 replaces it: the moving average is exported then.
    average_fraction: float = 0.0

    # Training loop and data.
    # Per replica (GPU or CPU worker): sentences x padded length of the longer side. N replicas
    # train N x batch_tokens per step; the loss is the mean over the global batch's tokens.
    batch_tokens: int = 8192
    # How long to train: exactly `train_steps`, or, when train_minutes > 0, as many steps as this
    # machine trains in that many minutes (trainer_module/budget.py; train_steps is then the
    # realized count, written to hparams.json, and `--train-steps` with it repeats the run).
    train_steps: int = 10_000
    train_minutes: float = 0.0
    # Under a time budget, pick the model's size and recipe from the steps the budget buys of
    # each (`MODEL_SIZES`, timed on this device by budget.choose_size); overrides still win.
    adapt_recipe: bool = False
    checkpoint_every: int = 2000
    keep_checkpoints: int = 2  # 0: keep all (a BLEU-vs-time curve, benchmarks/time_curve.py)
    max_source_length: int = 128  # training pairs with more tokens (without START/END) are dropped
    max_target_length: int = 128
    bucketing: bool = True  # False: pad every pair to max_*_length (the seeds' input pipeline)
    # Shuffle buffer in pairs. fra.txt (and so ExampleGen's output) is sorted by length: a
    # buffer smaller than the ~133k training pairs makes each pass run from short to long.
    shuffle_pairs: int = 50_000
    # Shuffling: the same on every worker (their shards are disjoint anyway); a warm start
    # moves it on by the steps behind its base (warm_start.continued_hparams).
    seed: int = 0
    # In this fraction of windows of max_pairs_joined shuffled training pairs, 2 to
    # max_pairs_joined of them are joined end to end into one example
    # (input_pipeline.join_pairs): fra.txt's pairs are single short sentences, and a model
    # that never saw a longer input breaks down on one.
    joined_pairs: float = 0.0
    max_pairs_joined: int = 2
    # >0: subword regularization (Kudo 2018). Each epoch every training sentence is cut into
    # pieces anew, one segmentation drawn from the SentencePiece model's 64 best with this
    # inverse temperature (input_pipeline.resample_pieces), so the model learns to read and
    # write a word in several spellings, as it must one it never saw. Evaluation and serving
    # keep the one best. Needs Transform's sentencepiece tokenizer.
    subword_alpha: float = 0.0
    # A worker caches its training pairs in memory only if they fit this (0: never); else each
    # epoch reads them again (input_pipeline.py).
    cache_megabytes: int = 4096

    # Filled in at training time from the vocabulary files, see `with_vocab_sizes`.
    source_vocab_size: int = 0
    target_vocab_size: int = 0
    # One joint vocabulary (Transform's joint_vocabulary): the source embedding is the target's.
    shared_embeddings: bool = False

    # Accelerators.
    precision: str = "float32"  # one of PRECISIONS
    # Compile the train and validation steps with XLA (decoding stays uncompiled). Batches are
    # then padded to their length bucket's boundary, so XLA compiles once per bucket, not once
    # per batch shape.
    use_xla: bool = False

    # The Evaluator blesses a model of this profile with at least this corpus BLEU on the eval
    # split (--min-bleu overrides it; trainer_module/settings.py).
    min_bleu: float = 0.0

    # Serving translates each sentence of a line on its own, and a sentence of more than
    # max_source_length tokens in pieces cut at its clauses (trainer_module/segmentation.py):
    # the model learned from single sentences of at most that many tokens.
    split_sentences: bool = True
    # A sentence over max_source_length is translated in pieces of at most this many tokens
    # (0: max_source_length), cut at its clauses.
    clause_tokens: int = 0
    # Decoding: per sentence, at most min(ratio * source_length + extra, decode_max_length) tokens.
    decode_length_ratio: float = 1.5
    decode_max_extra_tokens: int = 10
    decode_max_length: int = 256
    decode_precision: str = "float32"  # one of DECODE_PRECISIONS
    beam_width: int = 4
    beam_alpha: float = 1.0  # GNMT length penalty ((5 + length) / 6) ** alpha; BENCHMARKS.md
    # The loop guard (decoding.py): no n-gram of at most decode_loop_ngram tokens is said
    # more than decode_loop_repeats times in a row; the token that would is barred. 0 turns it
    # off. French says "très très" or "non, non"; three copies are the loops the dev set
    # showed ("une forte forte forte partie", "veiqueiqueique"). Inside a word the guard counts
    # letters: a copy may begin or end inside a piece ("tamamamé", "cinistististe"). Ten
    # pieces: beam search looped on a copy of eight ("A-cent-cent-cinq. ").
    decode_loop_ngram: int = 10
    decode_loop_repeats: int = 2

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        if self.d_model % 2:
            raise ValueError(f"d_model={self.d_model} must be even for the sinusoidal encoding")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {', '.join(POSITIONS)}, "
                             f"got {self.positions!r}")
        if self.positions == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ValueError(f"rotary positions need an even head depth, got d_model="
                             f"{self.d_model} / num_heads={self.num_heads}")
        if not 0.0 <= self.dropout_rate < 1.0 or not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError("dropout_rate and label_smoothing must be in [0, 1)")
        if self.num_layers < 1 or self.num_decoder_layers < 0:
            raise ValueError(f"num_layers must be >= 1 and num_decoder_layers >= 0, got "
                             f"{self.num_layers} and {self.num_decoder_layers}")
        if self.continued_schedule not in ("continue", "restart"):
            raise ValueError(f"continued_schedule must be 'continue' or 'restart', got "
                             f"{self.continued_schedule!r}")
        if self.continued_from not in ("state", "served"):
            raise ValueError(f"continued_from must be 'state' or 'served', got "
                             f"{self.continued_from!r}")
        if self.continued_tail not in ("run", "total"):
            raise ValueError(f"continued_tail must be 'run' or 'total', got "
                             f"{self.continued_tail!r}")
        if self.optimizer not in ("adam", "rmsprop"):
            raise ValueError(f"optimizer must be 'adam' or 'rmsprop', got {self.optimizer!r}")
        if not 0.0 <= self.cooldown_fraction <= 1.0:
            raise ValueError(f"cooldown_fraction must be in [0, 1], got {self.cooldown_fraction}")
        if not 0.0 <= self.ema_momentum < 1.0:
            raise ValueError(f"ema_momentum must be in [0, 1), got {self.ema_momentum}")
        if not 0.0 <= self.joined_pairs <= 1.0:
            raise ValueError(f"joined_pairs must be in [0, 1], got {self.joined_pairs}")
        if not 0.0 <= self.subword_alpha <= 1.0:
            raise ValueError(f"subword_alpha must be in [0, 1] (0: the one best segmentation), "
                             f"got {self.subword_alpha}")
        if self.max_pairs_joined < 2:
            raise ValueError(f"max_pairs_joined must be >= 2, got {self.max_pairs_joined}")
        if not 0.0 <= self.average_fraction <= 1.0:
            raise ValueError(f"average_fraction must be in [0, 1], got {self.average_fraction}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, "
                             f"got {self.precision!r}")
        if self.decode_precision not in DECODE_PRECISIONS:
            raise ValueError(f"decode_precision must be one of {', '.join(DECODE_PRECISIONS)}, "
                             f"got {self.decode_precision!r}")
        if self.train_steps < 1 and self.train_minutes <= 0:
            raise ValueError(f"train_steps must be >= 1 (or train_minutes > 0), got "
                             f"{self.train_steps}")
        if self.train_minutes < 0:
            raise ValueError(f"train_minutes must be >= 0, got {self.train_minutes}")
        if self.beam_width < 1:
            raise ValueError(f"beam_width must be >= 1, got {self.beam_width}")
        if self.beam_alpha < 0:  # beam search's stop rule needs a penalty that never falls
            raise ValueError(f"beam_alpha must be >= 0, got {self.beam_alpha}")
        if not 0 <= self.clause_tokens <= self.max_source_length:
            raise ValueError(f"clause_tokens must be in [0, max_source_length="
                             f"{self.max_source_length}], got {self.clause_tokens}")
        if self.decode_loop_ngram < 0 or self.decode_loop_repeats < 0:
            raise ValueError("decode_loop_ngram and decode_loop_repeats must be >= 0 (0: no "
                             f"loop guard), got {self.decode_loop_ngram} and "
                             f"{self.decode_loop_repeats}")
        if self.cache_megabytes < 0:
            raise ValueError(f"cache_megabytes must be >= 0 (0: never cache), got "
                             f"{self.cache_megabytes}")
        if self.shared_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(f"shared_embeddings needs one vocabulary for both sides, got sizes "
                             f"{self.source_vocab_size} and {self.target_vocab_size}")

    @property
    def averaged_fraction(self) -> float:
        """The last fraction of the steps whose uniform average is exported (0: none, or the
        moving average instead)."""
        return 0.0 if self.ema_momentum else self.average_fraction

    def tail_steps_before(self, steps_before: int) -> int:
        """The steps behind a continued run that its cooldown and average are sized by
        (continued_tail "total"), or 0 (sized by its own steps)."""
        return steps_before if self.continued_tail == "total" else 0

    @property
    def decoder_depth(self) -> int:
        """Layers of the decoder (num_decoder_layers, or the paper's N)."""
        return self.num_decoder_layers or self.num_layers

    def with_vocab_sizes(self, source_vocab_size: int, target_vocab_size: int,
                         shared: bool = False) -> HParams:
        """A copy with the vocabulary sizes (and whether it is one joint vocabulary) known only
        once the vocab files exist. Embeddings are shared exactly when the vocabulary is."""
        if self.shared_embeddings and not shared:
            raise ValueError("shared_embeddings needs Transform's joint vocabulary "
                             "(nmt run --joint-vocab); it is set from the vocabulary, not by hand")
        return dataclasses.replace(
            self, source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size,
            shared_embeddings=shared)


PROFILES: dict[str, HParams] = {
    # CI: a 1-layer model that trains a few dozen steps in seconds on a laptop CPU.
    "smoke": HParams(
        num_layers=1, d_model=32, num_heads=2, dff=64, dropout_rate=0.1,
        warmup_steps=20, learning_rate_scale=0.5, average_fraction=0.25, batch_tokens=512,
        train_steps=40, checkpoint_every=20, max_source_length=32, max_target_length=32,
        decode_max_length=48, beam_width=2),
    # 30 minutes on a few CPU cores, ~130k short Tatoeba pairs (~10 target tokens each). As many
    # steps as fit (the budget), 2k-token batches. Pre-norm layers tolerate the short warm-up
    # and a high peak (2.8e-3). Each value was measured against a change of it trained for the
    # same 30 minutes, on unseen sentences, and none of these translated better beyond noise: a
    # lower or higher peak, half the warm-up, 1k- or 4k-token batches, dropout 0.1, no label
    # smoothing, a 1-layer decoder, a narrower or wider model, 4k or 16k pieces, subword
    # regularization. The size and recipe follow the steps the budget buys
    # (`MODEL_SIZES`); bfloat16 only where it pays (devices.py). The last quarter's weights
    # averaged (the last half's: worse). Half the pairs joined (a quarter or three quarters:
    # worse), in windows of four, two to four of them, up to 128 tokens (the HParams default),
    # so that the model sees inputs of several sentences and translates long lines whole
    # (windows of eight: better long lines, worse short ones). The figures behind each value:
    # BENCHMARKS.md, "Decisions" and "Long sentences".
    "cpu": HParams(
        num_layers=2, d_model=256, num_heads=4, dff=1024, dropout_rate=0.0,
        warmup_steps=500, learning_rate_scale=1.0, cooldown_fraction=0.2, average_fraction=0.25,
        batch_tokens=2048, joined_pairs=0.5, max_pairs_joined=4, train_steps=0,
        train_minutes=30.0, adapt_recipe=True, checkpoint_every=500, precision="auto",
        decode_precision="auto", min_bleu=10.0),
    # The paper's base model on one GPU. Batches of 8k tokens instead of 25k: the data set is
    # ~100x smaller than WMT, and 10k steps is already ~60 epochs of it. The weights of the last
    # quarter averaged, as the GPU anchor's were (it gained there on unseen sentences).
    "base": HParams(average_fraction=0.25, precision="auto", decode_precision="auto",
                    use_xla=True, min_bleu=25.0),
    # The seeds' recipe, kept to measure ours against (BENCHMARKS.md): 1+1 layers, d_model 256,
    # 8 heads, dff 2048, RMSprop, pairs padded to length 20 (run it with --vocab-size 15000).
    "seeds": HParams(
        num_layers=1, d_model=256, num_heads=8, dff=2048, dropout_rate=0.5,
        tie_output_to_embedding=False, label_smoothing=0.0, optimizer="rmsprop",
        batch_tokens=64 * 21, train_steps=100_000, checkpoint_every=500, max_source_length=20,
        max_target_length=20, bucketing=False, decode_max_length=20),
}
# The same with two hours: on CPUs with bfloat16 units the budget then buys the deeper model.
PROFILES["cpu_2h"] = dataclasses.replace(PROFILES["cpu"], train_minutes=120.0)


@dataclasses.dataclass(frozen=True)
class ModelSize:
    """One rung of the time budget's size ladder (budget.choose_size): the HParams fields it
    sets over the profile's, and the fewest of its own steps the budget must buy for it to
    train instead of the rung below."""

    name: str
    fields: dict[str, object]
    min_steps: int


# From the profile's own model up to the paper's base. Each rung is slower per step than the
# one below and asks at least as many steps, so the budget times the rungs upward only while
# the next one could still be afforded. Why each threshold: docs/model-and-training.md, "A
# model sized for the device".
MODEL_SIZES = (
    ModelSize("small", {}, 0),
    # At 4,800 of its steps 3+3 with dropout lost to 2+2 on new sentences (the dev set, AMX
    # Xeon); 2+2 without dropout overfit by about 10,300 steps (eval split), which the slower
    # 3+3 step matches at about 7,000 of its own (docs/model-and-training.md).
    ModelSize("deeper", {"num_layers": 3, "dropout_rate": 0.1, "learning_rate_scale": 0.5},
              7_000),
    # The anchor's recipe (the paper's base, dropout 0.3, 1,500 warm-up steps to a peak of
    # 1e-3; mixed precision and XLA on GPUs): 4,660 steps of 16k tokens scored far above the
    # CPU default on unseen sentences (issue #38; docs/model-and-training.md). 8k-token batches
    # fit smaller GPUs; it needs the anchor's training tokens, 4,660 x 16k = about 9,000 x 8k.
    ModelSize("base", {"num_layers": 6, "d_model": 512, "num_heads": 8, "dff": 2048,
                       "dropout_rate": 0.3, "warmup_steps": 1500, "learning_rate_scale": 0.88,
                       "batch_tokens": 8192, "use_xla": True}, 9_000),
)


def get_profile(name: str) -> HParams:
    """The named profile (vocabulary sizes still unset)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown hyperparameter profile {name!r}; valid names: {', '.join(sorted(PROFILES))}"
        ) from None


# Set from the vocabulary files at training time, or by --min-bleu: never by --hparam.
_DERIVED = ("source_vocab_size", "target_vocab_size", "min_bleu")
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def parse_override(text: str) -> tuple[str, bool | int | float | str]:
    """'ema_momentum=0.999' -> ('ema_momentum', 0.999), typed as the HParams field is."""
    name, sep, value = text.partition("=")
    fields = {f.name: f for f in dataclasses.fields(HParams) if f.name not in _DERIVED}
    if not sep or name.strip() not in fields:
        raise ValueError(f"--hparam takes NAME=VALUE with NAME one of {', '.join(fields)}; "
                         f"got {text!r}")
    name, value = name.strip(), value.strip()
    kind = type(getattr(HParams(), name))
    try:
        if kind is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return name, value.lower() in ("true", "1")
        return name, kind(value)
    except ValueError:
        raise ValueError(f"--hparam {name} takes {_KINDS[kind]}, got {value!r}") from None


def with_overrides(hparams: HParams, overrides: dict[str, object]) -> HParams:
    """hparams with the named fields replaced (validated by HParams itself)."""
    return dataclasses.replace(hparams, **dict(parse_override(f"{name}={value}")
                                               for name, value in overrides.items()))

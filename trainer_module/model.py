"""Encoder-decoder Transformer ("Attention Is All You Need", Vaswani et al. 2017) with a KV cache.

Differences from the paper, on purpose:
- Pre-norm residual blocks, x + Dropout(Sublayer(LayerNorm(x))), plus a final LayerNorm after
  each stack. The paper normalizes after the residual add (post-norm); pre-norm keeps gradients
  well scaled at initialization, so training is stable with a short warmup and a higher peak
  learning rate (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"),
  which is what the short CPU runs need.
- Embeddings are initialized N(0, d_model^-0.5), so after the paper's sqrt(d_model) scaling they
  have unit variance, and the tied output projection starts with small logits.
- hparams.positions="rotary" replaces the paper's added sinusoids by rotary positions in
  self-attention (`positions.rotate`); cross-attention has no positions in either case.

Masks are boolean, True where attention is allowed, broadcastable to [batch, queries, keys], and
always passed explicitly (no Keras implicit masking). Padding is PAD_ID at the end of a sequence.

Mixed precision (hparams.precision: mixed_float16 or mixed_bfloat16): every sublayer gets the
model's dtype policy, variables stay float32; attention softmax, logits and the returned attention
weights are float32. The "bfloat16" policy (decoding only) stores the weights in bfloat16, so a
decoding step reads half the bytes; its layer norms stay float32: it computes what a
mixed_bfloat16 forward pass computes.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import tensorflow as tf
import tf_keras as keras

from trainer_module.hparams import HParams
from trainer_module.positions import causal_mask, positional_encoding, rotate
from transform_module.tokens import PAD_ID

# Large negative instead of -inf, so a fully masked row gives a uniform softmax, never NaN.
_MASKED_SCORE = -1e9

LayerCache = dict[str, tf.Tensor]
# {"source_mask": [B, S] bool, "layers": one LayerCache per decoder layer}.
DecoderCache = dict[str, Any]


def layer_norm(name: str, dtype: keras.mixed_precision.Policy) -> keras.layers.LayerNormalization:
    """The one LayerNormalization setting used throughout. Under the bfloat16 policy (bfloat16
    weights for decoding) its scale and offset stay float32 and it normalizes in float32, as
    mixed_bfloat16 training does."""
    if dtype.name == "bfloat16":
        dtype = keras.mixed_precision.Policy("mixed_bfloat16")
    return keras.layers.LayerNormalization(epsilon=1e-6, name=name, dtype=dtype)


def _normalized(norm: keras.layers.LayerNormalization, x: tf.Tensor) -> tf.Tensor:
    """norm(x) for x [B, T, D], or for one position [B, D] (a decoding step): a Keras
    LayerNormalization built on rank 3 keeps that rank's axis."""
    if x.shape.rank == 2:
        return norm(x[:, None])[:, 0]
    return norm(x)


class TokenEmbedding(keras.layers.Layer):
    """Token embedding * sqrt(d_model) + sinusoidal position (unless the attention rotates by
    position instead: add_positions=False); the matrix can be the output layer."""

    def __init__(self, vocab_size: int, d_model: int, add_positions: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.add_positions = add_positions

    def build(self, input_shape: tf.TensorShape) -> None:
        self.embeddings = self.add_weight(
            name="embeddings", shape=[self.vocab_size, self.d_model],
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))
        super().build(input_shape)

    def call(self, token_ids: tf.Tensor, start_position: tf.Tensor | int = 0) -> tf.Tensor:
        """token_ids [B, T] int at positions start_position.. -> [B, T, d_model].

        start_position lets incremental decoding embed one token at its true position.
        """
        x = tf.gather(self.table(), token_ids) * math.sqrt(self.d_model)
        if not self.add_positions:
            return x
        positions = start_position + tf.range(tf.shape(token_ids)[1])
        return x + tf.cast(positional_encoding(positions, self.d_model), x.dtype)

    def table(self) -> tf.Tensor:
        """The matrix [vocab_size, d_model], read whole. Gathering rows from the variable itself
        (a sparse read) would switch it to copy-on-read: TensorFlow then copies all of it at
        every later read, the tied output projection's, once per decoding step."""
        return tf.convert_to_tensor(self.embeddings)

    def logits(self, x: tf.Tensor) -> tf.Tensor:
        """x [B, T, d_model], or one position [B, d_model] -> [..., vocab_size] in x's dtype:
        the tied output projection."""
        table = tf.cast(self.table(), x.dtype)
        if x.shape.rank == 2:
            # A decoding step's few rows: (table x^T)^T multiplies the matrix as it is stored,
            # about twice as fast there as x table^T (BENCHMARKS.md, "Decoding speed").
            return tf.transpose(tf.matmul(table, x, transpose_b=True))
        return tf.einsum("btd,vd->btv", x, table)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model,
                "add_positions": self.add_positions}


class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention (paper §3.2).

    Our own layer rather than keras.layers.MultiHeadAttention so the decoder can project keys and
    values once (`project_key_value`) and attend over cached ones (`attend`). With rotary=True
    (self-attention only) queries and keys are rotated by their positions (`rotate`), which
    start at start_position: a cached decoding step projects one position, `step`.
    """

    def __init__(self, d_model: int, num_heads: int, rotary: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.depth = d_model // num_heads
        self.rotary = rotary
        if rotary and self.depth % 2:
            raise ValueError(f"rotary positions need an even head depth, got {self.depth}")
        self.query_projection = keras.layers.Dense(d_model, name="query", dtype=self.dtype_policy)
        self.key_projection = keras.layers.Dense(d_model, name="key", dtype=self.dtype_policy)
        self.value_projection = keras.layers.Dense(d_model, name="value", dtype=self.dtype_policy)
        self.output_projection = keras.layers.Dense(d_model, name="output", dtype=self.dtype_policy)

    def _split_heads(self, x: tf.Tensor) -> tf.Tensor:
        """[B, T, d_model] -> [B, num_heads, T, depth]; one position [B, d_model] (a decoding
        step, whose projections stay matrices: plain matmuls) -> [B, num_heads, 1, depth]."""
        if x.shape.rank == 2:
            return tf.reshape(x, [-1, self.num_heads, 1, self.depth])
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, self.depth])
        return tf.transpose(x, [0, 2, 1, 3])

    def _at_positions(self, x: tf.Tensor, start_position: tf.Tensor | int) -> tf.Tensor:
        """x [B, H, T, depth] at positions start_position.., rotated if rotary."""
        if not self.rotary:
            return x
        return rotate(x, start_position + tf.range(tf.shape(x)[2]))

    def project_key_value(self, memory: tf.Tensor, start_position: tf.Tensor | int = 0
                          ) -> tuple[tf.Tensor, tf.Tensor]:
        """memory [B, Tk, d_model] (or one position [B, d_model]) at positions
        start_position.. -> keys, values, each [B, num_heads, Tk, depth]."""
        keys = self._split_heads(self.key_projection(memory))
        return (self._at_positions(keys, start_position),
                self._split_heads(self.value_projection(memory)))

    def attend(self, query_input: tf.Tensor, keys: tf.Tensor, values: tf.Tensor,
               attention_mask: tf.Tensor | None, start_position: tf.Tensor | int = 0
               ) -> tuple[tf.Tensor, tf.Tensor]:
        """Attend from query_input [B, Tq, d_model] (or one position [B, d_model]) at positions
        start_position.. over projected keys/values [B, H, Tk, depth].

        attention_mask: bool, rank 3, broadcastable to [B, Tq, Tk]; None: every key.
        Returns output [B, Tq, d_model] (one position: [B, d_model]) and weights
        [B, H, Tq, Tk] float32.
        """
        queries = self._at_positions(self._split_heads(self.query_projection(query_input)),
                                     start_position) * self.depth ** -0.5
        if query_input.shape.rank == 2:
            return self._attend_one_position(queries, keys, values, attention_mask)
        scores = tf.cast(tf.einsum("bhqd,bhkd->bhqk", queries, keys), tf.float32)
        if attention_mask is not None:
            scores = tf.where(attention_mask[:, None], scores, _MASKED_SCORE)
        weights = tf.nn.softmax(scores, axis=-1)
        context = tf.einsum("bhqk,bhkd->bqhd", tf.cast(weights, values.dtype), values)
        shape = tf.shape(context)
        context = tf.reshape(context, [shape[0], shape[1], self.d_model])
        return self.output_projection(context), weights

    def _attend_one_position(self, queries: tf.Tensor, keys: tf.Tensor, values: tf.Tensor,
                             attention_mask: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        """`attend` for one query position (a decoding step): queries [B, H, 1, depth] ->
        output [B, d_model], weights [B, H, 1, Tk].

        The same sums as `attend`'s in element-wise ops (multiply, sum, exp), not Einsum and
        Softmax: oneDNN builds those kernels anew for each shape, and a decoding step's shapes
        change at every step (the cache grows by a position, the batch loses the sentences
        that ended). BENCHMARKS.md, "Decoding speed", has what this bought."""
        scores = tf.cast(tf.reduce_sum(queries * keys, axis=-1), tf.float32)  # [B, H, Tk]
        if attention_mask is not None:  # [B, 1, Tk]: broadcast over the heads
            scores = tf.where(attention_mask, scores, _MASKED_SCORE)
        exp = tf.exp(scores - tf.reduce_max(scores, axis=-1, keepdims=True))
        weights = exp / tf.reduce_sum(exp, axis=-1, keepdims=True)
        context = tf.reduce_sum(tf.cast(weights, values.dtype)[..., None] * values, axis=2)
        return (self.output_projection(tf.reshape(context, [-1, self.d_model])),
                weights[:, :, None])

    def call(self, query_input: tf.Tensor, memory: tf.Tensor,
             attention_mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """query_input [B, Tq, D], memory [B, Tk, D] -> output [B, Tq, D], weights [B, H, Tq, Tk].
        """
        keys, values = self.project_key_value(memory)
        return self.attend(query_input, keys, values, attention_mask)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "rotary": self.rotary}


class PositionWiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike (paper §3.3)."""

    def __init__(self, d_model: int, dff: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.d_model = d_model
        self.dff = dff
        self.inner = keras.layers.Dense(dff, activation="relu", name="inner",
                                        dtype=self.dtype_policy)
        self.outer = keras.layers.Dense(d_model, name="outer", dtype=self.dtype_policy)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        """[B, T, d_model] -> [B, T, d_model]."""
        return self.outer(self.inner(x))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "d_model": self.d_model, "dff": self.dff}


class _TransformerLayer(keras.layers.Layer):
    """What encoder and decoder layers share: self-attention (rotary: positions rotate its
    queries and keys), the FFN block, dropout, config."""

    def __init__(self, d_model: int, num_heads: int, dff: int, dropout_rate: float,
                 rotary: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.dff = dff
        self.dropout_rate = dropout_rate
        self.rotary = rotary
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)
        self.feed_forward = PositionWiseFeedForward(d_model, dff, name="feed_forward",
                                                    dtype=self.dtype_policy)
        self.feed_forward_norm = layer_norm("feed_forward_norm", self.dtype_policy)
        self.self_attention = MultiHeadAttention(d_model, num_heads, rotary,
                                                 name="self_attention", dtype=self.dtype_policy)
        self.self_attention_norm = layer_norm("self_attention_norm", self.dtype_policy)

    def _feed_forward_block(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        return x + self.dropout(self.feed_forward(_normalized(self.feed_forward_norm, x)),
                                training=training)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "d_model": self.d_model, "num_heads": self.num_heads,
                "dff": self.dff, "dropout_rate": self.dropout_rate, "rotary": self.rotary}


class EncoderLayer(_TransformerLayer):
    """Self-attention over the source, then the FFN; each a pre-norm residual block."""

    def call(self, x: tf.Tensor, source_mask: tf.Tensor, training: bool = False) -> tf.Tensor:
        """x [B, S, d_model], source_mask [B, S] bool (False at PAD) -> [B, S, d_model]."""
        normed = self.self_attention_norm(x)
        attended, _ = self.self_attention(normed, normed, attention_mask=source_mask[:, None, :])
        return self._feed_forward_block(x + self.dropout(attended, training=training), training)


class DecoderLayer(_TransformerLayer):
    """Causal self-attention, cross-attention to the encoder output, then the FFN (pre-norm).

    `call` runs all target positions at once (training, scoring); `decode_step` runs one new
    position against a LayerCache of fixed shape, so it fits a tf.while_loop unchanged.
    """

    def __init__(self, d_model: int, num_heads: int, dff: int, dropout_rate: float,
                 rotary: bool = False, **kwargs: Any) -> None:
        super().__init__(d_model, num_heads, dff, dropout_rate, rotary, **kwargs)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, name="cross_attention",
                                                  dtype=self.dtype_policy)
        self.cross_attention_norm = layer_norm("cross_attention_norm", self.dtype_policy)

    def call(self, x: tf.Tensor, memory: tf.Tensor, source_mask: tf.Tensor,
             training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """x [B, T, D], memory [B, S, D], source_mask [B, S] -> x [B, T, D], weights [B, H, T, S].

        No target padding mask is needed: padding is at the end, so the causal mask already keeps
        real positions from seeing it (outputs at PAD positions are ignored by the loss).
        """
        normed = self.self_attention_norm(x)
        attended, _ = self.self_attention(
            normed, normed, attention_mask=causal_mask(tf.shape(x)[1])[None])
        x = x + self.dropout(attended, training=training)
        attended, weights = self.cross_attention(
            self.cross_attention_norm(x), memory, attention_mask=source_mask[:, None, :])
        return self._feed_forward_block(x + self.dropout(attended, training=training),
                                        training), weights

    def init_cache(self, memory: tf.Tensor) -> LayerCache:
        """Cross-attention keys/values of memory [B, S, D] (computed once), and self-attention
        keys/values [B, H, 0, depth], which each step extends by its position."""
        cross_keys, cross_values = self.cross_attention.project_key_value(memory)
        empty = tf.zeros([tf.shape(memory)[0], self.num_heads, 0, self.self_attention.depth],
                         dtype=cross_keys.dtype)
        return {"self_keys": empty, "self_values": empty,
                "cross_keys": cross_keys, "cross_values": cross_values}

    def decode_step(self, x: tf.Tensor, step: tf.Tensor, cache: LayerCache,
                    source_mask: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, LayerCache]:
        """x [B, D] at position `step` -> x [B, D] and the cache extended by that position.

        Only the new position is projected; earlier keys/values come from the cache. One
        position is a matrix, not [B, 1, D]: its projections are then plain matmuls, far fewer
        ops a step than on rank 3. The cache holds the positions so far, not the longest
        sentence's: a step copies and attends over step + 1 positions, not over all of them.
        """
        normed = _normalized(self.self_attention_norm, x)
        new_keys, new_values = self.self_attention.project_key_value(normed, step)
        keys = tf.concat([cache["self_keys"], new_keys], axis=2)
        values = tf.concat([cache["self_values"], new_values], axis=2)
        attended, _ = self.self_attention.attend(normed, keys, values, None, step)
        x = x + self.dropout(attended, training=training)
        attended, _ = self.cross_attention.attend(_normalized(self.cross_attention_norm, x),
                                                  cache["cross_keys"], cache["cross_values"],
                                                  source_mask[:, None, :])
        x = self._feed_forward_block(x + self.dropout(attended, training=training), training)
        return x, {**cache, "self_keys": keys, "self_values": values}


class Transformer(keras.Model):
    """The translator: call((source_ids [B, S], target_in_ids [B, T])) -> logits [B, T, V] float32.

    target_in_ids starts with START_ID (teacher forcing); S and T are independent. For decoding:
    `encode`, then `init_cache` and `decode_step` once per generated token.
    """

    def __init__(self, hparams: HParams, policy: str | None = None, **kwargs: Any) -> None:
        """policy: a Keras dtype policy instead of hparams.precision's; "bfloat16" (bfloat16
        weights) is for decoding only (export.decoding_copy), never for training."""
        if hparams.source_vocab_size <= 0 or hparams.target_vocab_size <= 0:
            raise ValueError("vocabulary sizes are unset: use hparams.with_vocab_sizes(...)")
        if policy is None and hparams.precision == "auto":
            raise ValueError("precision 'auto' is unresolved: use devices.fit_to_devices(hparams)")
        policy = keras.mixed_precision.Policy(policy or hparams.precision)
        super().__init__(dtype=policy, **kwargs)
        self.hparams = hparams
        rotary = hparams.positions == "rotary"
        layer_args = dict(d_model=hparams.d_model, num_heads=hparams.num_heads, dff=hparams.dff,
                          dropout_rate=hparams.dropout_rate, rotary=rotary, dtype=policy)
        if hparams.shared_embeddings:  # one joint vocabulary: one matrix for source, target
            # (and, tied, output) tokens, so names, numbers and cognates learn from both sides
            self.source_embedding = self.target_embedding = TokenEmbedding(
                hparams.target_vocab_size, hparams.d_model, not rotary, name="shared_embedding",
                dtype=policy)
        else:
            self.source_embedding = TokenEmbedding(
                hparams.source_vocab_size, hparams.d_model, not rotary, name="source_embedding",
                dtype=policy)
            self.target_embedding = TokenEmbedding(
                hparams.target_vocab_size, hparams.d_model, not rotary, name="target_embedding",
                dtype=policy)
        self.embedding_dropout = keras.layers.Dropout(hparams.dropout_rate, dtype=policy)
        self.encoder_layers = [EncoderLayer(name=f"encoder_{i}", **layer_args)
                               for i in range(hparams.num_layers)]
        self.decoder_layers = [DecoderLayer(name=f"decoder_{i}", **layer_args)
                               for i in range(hparams.decoder_depth)]
        self.encoder_norm = layer_norm("encoder_norm", policy)
        self.decoder_norm = layer_norm("decoder_norm", policy)
        self.output_projection = None if hparams.tie_output_to_embedding else keras.layers.Dense(
            hparams.target_vocab_size, name="output_projection", dtype=policy)

    # The model, and Keras' step around it, are plain TensorFlow ops and explicit
    # tf.while_loops, so AutoGraph has nothing to convert there: without it, the step function
    # traces without re-writing ~150 functions' source (tests/test_model.py checks it stays so).
    @tf.autograph.experimental.do_not_convert
    def train_step(self, data: Any) -> dict[str, tf.Tensor]:
        return super().train_step(data)

    @tf.autograph.experimental.do_not_convert
    def test_step(self, data: Any) -> dict[str, tf.Tensor]:
        return super().test_step(data)

    def call(self, inputs: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """(source_ids [B, S], target_in_ids [B, T]) int -> logits [B, T, target_vocab] float32."""
        source_ids, target_in_ids = inputs
        memory, source_mask = self.encode(source_ids, training=training)
        logits, _ = self.decode(target_in_ids, memory, source_mask, training=training)
        return logits

    def encode(self, source_ids: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """source_ids [B, S] -> memory [B, S, d_model], source_mask [B, S] bool (False at PAD)."""
        source_mask = tf.not_equal(source_ids, PAD_ID)
        x = self.embedding_dropout(self.source_embedding(source_ids), training=training)
        for layer in self.encoder_layers:
            x = layer(x, source_mask, training=training)
        return self.encoder_norm(x), source_mask

    def decode(self, target_in_ids: tf.Tensor, memory: tf.Tensor, source_mask: tf.Tensor,
               training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        """All target positions at once.

        target_in_ids [B, T], memory [B, S, D], source_mask [B, S] -> logits [B, T, V] float32 and
        cross-attention weights [B, decoder_depth, num_heads, T, S] float32.
        """
        x = self.embedding_dropout(self.target_embedding(target_in_ids), training=training)
        cross_weights = []
        for layer in self.decoder_layers:
            x, weights = layer(x, memory, source_mask, training=training)
            cross_weights.append(weights)
        return self._logits(self.decoder_norm(x)), tf.stack(cross_weights, axis=1)

    def cross_attention_weights(self, source_ids: tf.Tensor,
                                target_in_ids: tf.Tensor) -> tf.Tensor:
        """[B, decoder_depth, num_heads, T, S] float32, every layer and head (inference mode).

        Rows sum to 1 over the real source tokens; PAD source positions get exactly 0.
        """
        memory, source_mask = self.encode(source_ids)
        return self.decode(target_in_ids, memory, source_mask)[1]

    def init_cache(self, memory: tf.Tensor, source_mask: tf.Tensor) -> DecoderCache:
        """The decoding cache over memory [B, S, D], source_mask [B, S], before any step. Its
        self-attention keys and values grow by a position a step (decoding loops give them
        `decoding`'s loose shape invariants)."""
        return {"source_mask": source_mask,
                "layers": [layer.init_cache(memory) for layer in self.decoder_layers]}

    def decode_step(self, token_ids: tf.Tensor, step: tf.Tensor, cache: DecoderCache,
                    training: bool = False) -> tuple[tf.Tensor, DecoderCache]:
        """token_ids [B] int at position `step` (START_ID at 0) -> logits [B, V] float32 for the
        token at step + 1, and the updated cache (same structure and shapes)."""
        x = self.target_embedding(token_ids[:, None], start_position=step)[:, 0]
        x = self.embedding_dropout(x, training=training)
        layer_caches = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, layer_cache = layer.decode_step(x, step, layer_cache, cache["source_mask"], training)
            layer_caches.append(layer_cache)
        logits = self._logits(_normalized(self.decoder_norm, x))
        return logits, {"source_mask": cache["source_mask"], "layers": layer_caches}

    def reorder_cache(self, cache: DecoderCache, indices: tf.Tensor) -> DecoderCache:
        """Rows `indices` [B] of the self-attention caches, for beam search.

        Cross-attention keys/values and the source mask are left alone: beam search only moves
        rows between beams of one sentence, and those rows are identical there.
        """
        return {"source_mask": cache["source_mask"],
                "layers": [{**layer, "self_keys": tf.gather(layer["self_keys"], indices),
                            "self_values": tf.gather(layer["self_values"], indices)}
                           for layer in cache["layers"]]}

    def _logits(self, x: tf.Tensor) -> tf.Tensor:
        """[..., d_model] -> [..., target_vocab] float32 (softmax-safe under float16)."""
        if self.output_projection is None:
            logits = self.target_embedding.logits(x)
        else:
            logits = self.output_projection(x)
        return tf.cast(logits, tf.float32)

    def get_config(self) -> dict[str, Any]:
        return {"hparams": dataclasses.asdict(self.hparams)}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Any = None) -> Transformer:
        return cls(HParams(**config["hparams"]))

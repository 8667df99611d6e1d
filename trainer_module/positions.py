"""Where each token is: the paper's sinusoidal encoding, rotary positions, the causal mask.

Pure functions of positions, computed on the fly so that any length (and one position, in a
decoding step with a cache) works.
"""
from __future__ import annotations

import tensorflow as tf


def _angles(positions: tf.Tensor, dims: int) -> tf.Tensor:
    """positions [T] int -> [T, dims / 2] float32: pos / 10000^(2i/dims), i = 0 .. dims/2 - 1."""
    inverse_frequencies = tf.pow(10000.0, -tf.range(0, dims, 2, dtype=tf.float32) / dims)
    return tf.cast(positions, tf.float32)[:, None] * inverse_frequencies[None, :]


def positional_encoding(positions: tf.Tensor, d_model: int) -> tf.Tensor:
    """Sinusoids of paper §3.5, computed on the fly so any length (and one position) works.

    positions [T] int -> [T, d_model] float32, PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).
    """
    angles = _angles(positions, d_model)
    return tf.reshape(tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1), [-1, d_model])


def rotate(x: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """Rotary position embedding (RoFormer, Su et al. 2021) of x [B, H, T, depth] at positions [T].

    Each pair (x_i, x_{i + depth/2}) turns by the angle pos / 10000^(2i/depth), so the dot
    product of a query at position m with a key at position n depends on m - n alone: what
    attention learns about near words holds at any distance from the sentence's start.
    """
    angles = _angles(positions, x.shape[-1])
    cos, sin = tf.cast(tf.cos(angles), x.dtype), tf.cast(tf.sin(angles), x.dtype)
    first, second = tf.split(x, 2, axis=-1)
    return tf.concat([first * cos - second * sin, second * cos + first * sin], axis=-1)


def causal_mask(length: tf.Tensor) -> tf.Tensor:
    """[T, T] bool: query position i may attend to key positions <= i."""
    positions = tf.range(length)
    return positions[:, None] >= positions[None, :]

"""Processes for the distributed-training tests (tests/test_distributed.py).

Each check runs in a process of its own, because what it tests is fixed when TensorFlow starts
(logical CPU devices, TF_CONFIG) or is read from TensorFlow's C++ log (XLA compilations).

  python tests/distributed_worker.py transform FRA_TXT OUT_DIR
  python tests/distributed_worker.py mixed DATA_DIR OUT_DIR PRECISION STEPS xla|no-xla
  python tests/distributed_worker.py mirrored DATA_DIR
  python tests/distributed_worker.py run_fn DATA_DIR FN_ARGS_JSON WEIGHTS_OUT

`transform` writes a small tf.Transform output (real preprocessing_fn, WordPiece) and
transformed train/eval examples, in the layout the Trainer reads. `run_fn` calls the real
`trainer_module.task.run_fn` (TF_CONFIG decides single or multi-worker) and then writes the
trained weights' fingerprint, so the test can compare workers.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TRAIN, EVAL = "Split-train", "Split-eval"
EXAMPLES = "transformed_examples-00000-of-00001.gz"
SHAPE_BATCHES = 40  # batches whose shapes `mixed` counts, padded and unpadded


def transform(fra_txt: str, out_dir: str, every: int = 250) -> None:
    """~700 lines from all over fra.txt (so lengths vary) -> tf.Transform output + examples."""
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import metadata_io

    from transform_module import preprocessing

    references: dict[str, list[str]] = {}
    with open(fra_txt, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if (i // 20) % every == 0:
                english, french = line.rstrip("\n").split("\t")[:2]
                references.setdefault(english, []).append(french)
    raw = [{"english": [e.encode()], "french": [f.encode() for f in fr]}
           for e, fr in references.items()]
    spec = {"english": tf.io.FixedLenFeature([1], tf.string),
            "french": tf.io.VarLenFeature(tf.string)}
    raw_metadata = tft.DatasetMetadata.from_feature_spec(spec)
    with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        (rows, metadata), transform_fn = (raw, raw_metadata) | \
            tft_beam.AnalyzeAndTransformDataset(lambda inputs: preprocessing.preprocessing_fn(
                inputs, {"tokenizer": "wordpiece", "vocab_size": 400}))
        _ = transform_fn | tft_beam.WriteTransformFn(os.path.join(out_dir, "transform"))
    metadata_io.write_metadata(raw_metadata, os.path.join(out_dir, "transform", "metadata"))
    coder = tft.coders.ExampleProtoCoder(metadata.schema)
    for split, keep in ((TRAIN, lambda i: i % 10), (EVAL, lambda i: not i % 10)):
        os.makedirs(os.path.join(out_dir, split))
        with tf.io.TFRecordWriter(os.path.join(out_dir, split, EXAMPLES), "GZIP") as writer:
            for i, row in enumerate(rows):
                if keep(i):
                    writer.write(coder.encode(row))


def fn_args(data_dir: str, **kwargs):
    # Not `tfx.v1`: importing every TFX component costs ~7 s of CPU in each worker process.
    from tfx.components.trainer.fn_args_utils import FnArgs

    return FnArgs(
        train_files=[os.path.join(data_dir, TRAIN, "*")],
        eval_files=[os.path.join(data_dir, EVAL, "*")],
        transform_output=os.path.join(data_dir, "transform"), **kwargs)


def tiny_hparams(data_dir: str, **overrides):
    """The smoke profile's size with the given overrides and the fixture's vocabularies."""
    import dataclasses

    import tensorflow_transform as tft

    from trainer_module import hparams as hparams_lib
    from trainer_module.task import with_vocabularies

    hparams = dataclasses.replace(hparams_lib.get_profile("smoke"), **overrides)
    return with_vocabularies(hparams, tft.TFTransformOutput(os.path.join(data_dir, "transform")))


def _shapes(batches) -> set[tuple]:
    """The distinct (source, target_in, target_out) shapes: what XLA compiles a step for."""
    return {tuple(tuple(t.shape) for t in (inputs[0], inputs[1], labels))
            for inputs, labels in batches}


def mixed(data_dir: str, out_dir: str, precision: str, steps: str, xla: str) -> None:
    """Mixed precision at smoke size through `build_keras_model`, with XLA ("xla": the `base`
    profile's GPU path) or without ("no-xla": a CPU's), fit on bucketed batches, then the
    float32 export. Writes result.json (batch shapes seen) and the mixed model's weights
    (weights.npz)."""
    import dataclasses

    import numpy as np
    import tensorflow as tf
    import tensorflow_transform as tft

    from trainer_module import export, input_pipeline
    from trainer_module.task import build_keras_model

    base = __import__("trainer_module.hparams", fromlist=["PROFILES"]).PROFILES["base"]
    assert base.use_xla and base.precision == "auto"  # what the XLA run stands in for
    # float32 decoding whatever this CPU has (test_export covers decode_precision=bfloat16).
    hparams = tiny_hparams(data_dir, use_xla=xla == "xla", precision=precision,
                           batch_tokens=256, max_source_length=12, max_target_length=12,
                           train_steps=int(steps), checkpoint_every=int(steps),
                           decode_precision="float32")
    output = tft.TFTransformOutput(os.path.join(data_dir, "transform"))
    train = input_pipeline.make_dataset(os.path.join(data_dir, TRAIN, "*"), output, hparams,
                                        training=True)
    validation = input_pipeline.validation_dataset(os.path.join(data_dir, EVAL, "*"), output,
                                                   hparams)
    model = build_keras_model(hparams)
    model.fit(train, steps_per_epoch=int(steps), validation_data=validation, verbose=0)
    shapes = sorted(_shapes(train.take(int(steps))))
    # Shapes are counted over more batches than were trained (no step is needed to see them).
    padded_shapes = _shapes(train.take(SHAPE_BATCHES))
    dynamic = input_pipeline.make_dataset(os.path.join(data_dir, TRAIN, "*"), output,
                                          dataclasses.replace(hparams, use_xla=False),
                                          training=True)
    dynamic_shapes = _shapes(dynamic.take(SHAPE_BATCHES))
    np.savez(os.path.join(out_dir, "weights.npz"), *model.get_weights())
    mixed_dtype = model.encode(tf.ones([1, 3], tf.int32))[0].dtype.name
    export.export_translator(export.float32_copy(model), output, hparams,
                             os.path.join(out_dir, "export"))
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump({"hparams": dataclasses.asdict(hparams),
                   "transform_output": os.path.join(data_dir, "transform"),
                   "shapes": shapes, "padded_shapes": len(padded_shapes),
                   "dynamic_shapes": len(dynamic_shapes),
                   "mixed_compute_dtype": mixed_dtype,
                   "buckets": len(input_pipeline.bucket_lengths(hparams))}, f)


def mirrored(data_dir: str) -> None:
    """MirroredStrategy over 2 logical CPUs vs one device, same weights, same global batch:
    prints the loss and gradient norms of both and the largest difference, and the target
    tokens of one Trainer step against those of the input's first batches, as JSON."""
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from trainer_module import hparams as hparams_lib
    from trainer_module.model import Transformer
    from trainer_module.optimization import GlobalTokenMeanLoss, masked_cross_entropy

    import dataclasses
    hparams = dataclasses.replace(hparams_lib.get_profile("smoke"), dropout_rate=0.0,
                                  label_smoothing=0.1).with_vocab_sizes(30, 40)
    rng = np.random.default_rng(0)

    def batch(lengths: list[int], width: int):
        source = np.zeros([len(lengths), width], np.int32)
        target_in = np.zeros([len(lengths), width], np.int32)
        target_out = np.zeros([len(lengths), width], np.int32)
        for row, length in enumerate(lengths):
            source[row, :length] = rng.integers(4, 30, length)
            target_out[row, :length] = rng.integers(4, 40, length)
            target_in[row, 0], target_in[row, 1:length] = 2, target_out[row, :length - 1]
        return (source, target_in), target_out

    # Two replicas' batches of different shapes and very different token counts.
    parts = [batch([9, 8, 9, 7], 9), batch([2, 3], 3)]
    loss = GlobalTokenMeanLoss(hparams.label_smoothing)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    # Fixed initial weights: with random ones the two replicas' mean losses (both near log 40
    # for an untrained model) may happen to be close, and so the naive mean below.
    tf.random.set_seed(0)
    with strategy.scope():
        replicated = Transformer(hparams)
        replicated((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    single = Transformer(hparams)
    single((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    single.set_weights(replicated.get_weights())

    def step(model, inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=True))
        return value, tape.gradient(value, model.trainable_variables)

    pad = lambda x: np.pad(x, [[0, 0], [0, 9 - x.shape[1]]])  # noqa: E731
    whole_inputs = tuple(np.concatenate([pad(p[0][k]) for p in parts]) for k in (0, 1))
    whole_labels = np.concatenate([pad(p[1]) for p in parts])
    one_loss, one_grads = step(single, whole_inputs, whole_labels)

    per_replica = strategy.experimental_distribute_values_from_function(
        lambda context: parts[context.replica_id_in_sync_group])
    values, grads = strategy.run(lambda data: step(replicated, data[0], data[1]),
                                 args=(per_replica,))
    two_loss = strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)
    two_grads = [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None) for g in grads]
    replica_means = [float(masked_cross_entropy(labels, single(inputs), hparams.label_smoothing))
                     for inputs, labels in parts]
    # The Trainer's own input: each replica takes a whole batch of batch_tokens from its
    # worker's dataset, so one step of 2 replicas trains the first two batches.
    import tensorflow_transform as tft
    from trainer_module.input_pipeline import make_dataset
    from trainer_module.task import build_keras_model, _train_data

    small = tiny_hparams(data_dir, batch_tokens=256)
    output = tft.TFTransformOutput(os.path.join(data_dir, "transform"))
    with strategy.scope():
        trainer_model = build_keras_model(small)
    history = trainer_model.fit(_train_data(fn_args(data_dir), output, small), epochs=1,
                                steps_per_epoch=1, verbose=0)
    first_batches = make_dataset(os.path.join(data_dir, TRAIN, "*"), output, small,
                                 training=True).take(2)
    print(json.dumps({
        "step_tokens": history.history["target_tokens"][0],
        "first_batch_tokens": [int(tf.math.count_nonzero(labels)) for _, labels in first_batches],
        "replicas": strategy.num_replicas_in_sync,
        "one_device_loss": float(one_loss), "two_device_loss": float(two_loss),
        "mean_of_replica_means": sum(replica_means) / len(replica_means),
        "grad_norm": float(tf.linalg.global_norm(one_grads)),
        "max_grad_difference": max(float(tf.reduce_max(tf.abs(
            tf.convert_to_tensor(a) - tf.convert_to_tensor(b))))
            for a, b in zip(one_grads, two_grads))}))


def run_fn(data_dir: str, args_json: str, weights_out: str) -> None:
    """The real Trainer entry point; the trained model is picked up on its way out of
    `build_keras_model` (the real function), to fingerprint this worker's weights."""
    import numpy as np

    from trainer_module import task

    built = []
    build = task.build_keras_model
    task.build_keras_model = lambda *args, **kwargs: built.append(
        build(*args, **kwargs)) or built[-1]
    task.run_fn(fn_args(data_dir, **json.loads(args_json)))
    weights = built[-1].get_weights()  # the trained model (a probe's would come first)
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in weights))
    with open(weights_out, "w") as f:
        json.dump({"sha256": digest.hexdigest(),
                   "step": int(built[-1].optimizer.iterations.numpy())}, f)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    {"transform": transform, "mixed": mixed, "mirrored": mirrored,
     "run_fn": run_fn}[sys.argv[1]](*sys.argv[2:])

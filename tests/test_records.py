"""records.py reads back what ExampleGen's executor writes: every example, in file order."""
from __future__ import annotations

import tensorflow as tf

from components.fra_example_gen import records
from components.fra_example_gen.executor import to_example


def _write(path, rows: list[tuple[str, list[str]]]) -> None:
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for english, references in rows:
            writer.write(to_example(english, list(enumerate(references))).SerializeToString())


def test_read_split_and_read_english_give_every_example_in_file_order(tmp_path):
    split = tmp_path / "Split-train"
    split.mkdir()
    # More records than one parsing batch, over two files; references of any count, empty
    # text, and letters beyond ASCII.
    first = [(f"Sentence {i}.", [f"Phrase {i}."] * (i % 4)) for i in range(records._BATCH + 7)]
    second = [("Où ?", ["Où ça ?", "", "Où donc ? 😀"]), ("", ["Rien."])]
    _write(split / "data-00000-of-00002.gz", first)
    _write(split / "data-00001-of-00002.gz", second)
    (split / "beam-temp-leftover").mkdir()  # a restarted job's directory is not a file

    assert records.read_split(str(tmp_path), "train") == first + second
    assert records.read_english(str(tmp_path), "train") == [e for e, _ in first + second]
    assert records.read_split(str(tmp_path), "eval") == []
    assert records.read_english(str(tmp_path), "eval") == []

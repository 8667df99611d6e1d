"""The fra.txt ExampleGen component: TFX's FileBasedExampleGen with our Beam executor."""
from __future__ import annotations

import math
from typing import Sequence

from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from components.fra_example_gen import executor, parser

SPLIT_NAMES = ("train", "eval", "test")
PARTITION_FEATURE = "english"


def split_output_config(percentages: Sequence[int]) -> example_gen_pb2.Output:
    """Hash-bucket splits over the English sentence, e.g. (80, 10, 10) -> buckets 8/1/1.

    Hashing the English text (not the pair) keeps every translation of a sentence in the
    same split, so no source sentence leaks from training into evaluation.
    """
    if len(percentages) != len(SPLIT_NAMES) or any(p <= 0 for p in percentages):
        raise ValueError(f"Split percentages must be three positive numbers for "
                         f"{'/'.join(SPLIT_NAMES)}, got {list(percentages)}.")
    if sum(percentages) != 100:
        raise ValueError(f"Split percentages must add up to 100, got {list(percentages)} "
                         f"(sum {sum(percentages)}).")
    divisor = math.gcd(*percentages)
    return example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
        splits=[example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=p // divisor)
                for name, p in zip(SPLIT_NAMES, percentages)],
        partition_feature_name=PARTITION_FEATURE))


class FraTxtExampleGen(FileBasedExampleGen):
    """Reads `<input_base>/<file_pattern>` (English<TAB>French[<TAB>attribution] lines).

    Emits one tf.Example per distinct English sentence: `english` (bytes) and `french`
    (bytes list, every reference in file order), split train/eval/test by English sentence.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, input_base, file_pattern: str = "fra.txt",
                 split_percentages: Sequence[int] = (80, 10, 10),
                 max_line_bytes: int = parser.DEFAULT_MAX_LINE_BYTES):
        super().__init__(
            input_base=input_base,
            input_config=example_gen_pb2.Input(splits=[
                example_gen_pb2.Input.Split(name="single_split", pattern=file_pattern)]),
            output_config=split_output_config(split_percentages),
            custom_config={executor.MAX_LINE_BYTES_KEY: max_line_bytes})

"""Scripts that measure speed, memory and quality (BENCHMARKS.md says how to run each).

Importing the package sets TensorFlow's runtime settings as `nmt` sets them
(runners/tensorflow_env.py: its oneDNN kernels) before TensorFlow runs anything, so that the
scripts time what `nmt` runs. Run them as modules (`python -m benchmarks.step_time …`), which
imports the package first; `step_time.py` records which kernels it timed.
"""
from runners import tensorflow_env

tensorflow_env.apply_defaults()

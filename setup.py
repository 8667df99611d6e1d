"""Installs the fra-eng translation pipeline and its `nmt` command."""
from setuptools import find_packages, setup

setup(
    name="nmt-fra-eng",
    version="0.1.0",
    description="TFX pipeline: fra.txt -> Transformer English-French translator, served.",
    python_requires=">=3.10",
    packages=find_packages(include=["cli*", "pipeline*", "runners*", "engines*", "inference*",
                                    "metadata*", "components*", "transform_module*",
                                    "trainer_module*", "schemas*"]),
    package_data={"schemas": ["*.pbtxt"], "engines": ["flink-conf.yaml"]},
    install_requires=[
        "tfx==1.16.0",
        "tensorflow==2.16.2",
        "tensorflow-text==2.16.1",
        "tensorflow-transform==1.16.0",
        "tensorflow-model-analysis==0.47.1",
        "tensorflow-data-validation==1.16.1",
        "tf-keras",
        "apache-beam[gcp]",
        "kfp>=2.5",  # 2.5.0 is what the TFX 1.16 image (docker/constraints-py310.txt) has
        "sacrebleu",
        "sentencepiece",  # Transform's SentencePiece learner (serving needs only tf-text's op)
        "matplotlib",
    ],
    extras_require={"test": ["pytest", "pytest-xdist"]},
    entry_points={"console_scripts": ["nmt=cli.main:entry_point"]},
)

"""Answers from ML Metadata to "what produced the serving model, from which data, and how good
was it compared with the last one?", so that nobody has to write MLMD queries; and `nmt report`.

Every query reads an open store (store.py: connect, MetadataError) once into one graph
(graph.py), whichever writer laid the store out (layouts.py: TFX's LocalDagRunner, Kubeflow
Pipelines v2), and returns plain dicts and lists (JSON-ready): the CLI prints them as tables or
JSON, the report and the tests use them as they are. One module per question: runs.py,
artifacts.py, lineage.py, models.py, diff.py; values.py reads MLMD's values and writes them as
people read them. Nothing but `runs.record_engine` writes to the store.
"""

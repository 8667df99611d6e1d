"""The `nmt` command: one module per subcommand (run, translate, kubeflow, metadata, report)
`cli.main` builds the parser (the `nmt` entry point), and `cli.errors` is the one place where
an error becomes an `nmt: error:` line and an exit status.

The commands sit on top of the rest: they import `pipeline`, `components`,
`transform_module` and `trainer_module`; nothing there imports `cli` (tests/test_imports.py
checks it).
"""

"""ExampleGen for the tab-separated fra.txt file of manythings.org / Tatoeba.

The component is in `component` (it imports TFX); `parser` is pure Python, so the CLI can use
its defaults without loading TFX.
"""

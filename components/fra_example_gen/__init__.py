"""ExampleGen for the tab-separated fra.txt file of manythings.org / Tatoeba."""
from components.fra_example_gen.component import FraTxtExampleGen

__all__ = ["FraTxtExampleGen"]

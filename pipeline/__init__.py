"""Pipeline assembly, configuration and runners for the fra-eng translator."""

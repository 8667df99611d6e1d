"""Custom TFX components of the fra-eng translation pipeline."""

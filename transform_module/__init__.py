"""Code run by TFX Transform: preprocessing_fn, tokenization, WordPiece vocabularies."""

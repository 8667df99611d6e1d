"""Model code run by the TFX Trainer: Transformer, input pipeline, decoding, export."""

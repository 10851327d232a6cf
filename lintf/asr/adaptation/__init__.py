"""Fitting a trained model to a new speaker without transcripts: test-time warp search, self-training."""

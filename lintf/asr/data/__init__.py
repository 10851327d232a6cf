"""The speech DataModule: manifests -> features and CTC labels in length-bucketed padded batches."""

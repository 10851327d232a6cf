"""Speech corpora from packages (``lintf data ...``): JSON-lines manifests and their builders."""

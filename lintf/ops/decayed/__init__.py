"""The decayed causal product: linear attention with a per-position forget factor (retention, gated linear attention).

``product.py`` is the entry point, ``compiled.py`` the compiled CPU op (``csrc/decayed/``),
``chunked.py`` the pure-PyTorch path, ``cumsum.py`` its element-wise relative (AFT), ``reference.py``
the naive forms the tests compare against.
"""

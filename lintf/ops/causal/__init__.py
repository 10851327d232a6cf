"""The causal product of linear attention, out_i = sum_{j<=i} (q_i . k_j) v_j, with its normaliser and state.

``product.py`` is the entry point, ``compiled.py`` the compiled op (``csrc/causal/``), ``chunked.py``
the pure-PyTorch path, ``state.py`` the state a prefix leaves, ``reference.py`` the naive forms the
tests compare against, ``sequence_parallel.py`` the product over a sequence split across ranks.
"""

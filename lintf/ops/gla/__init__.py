"""Gated linear attention (GLA): linear attention whose state forgets at a data-dependent rate per channel.

``product.py`` is the entry point, ``chunked.py`` the pure-PyTorch path, ``reference.py`` the naive
recurrence the tests compare against.
"""

"""The delta rule (DeltaNet, Gated DeltaNet): a matrix memory that overwrites what a key stored.

``rule.py`` is the entry point, ``chunked.py`` the pure-PyTorch path (the WY form of each chunk),
``state.py`` the state it shares with gated linear attention, ``arguments.py`` the checks both share,
``reference.py`` the naive recurrence the tests compare against.
"""

"""Where a run's files go and which checkpoint layout lintf writes.

The tasks write into these (samples into the run directory, the layout version into each
checkpoint); the run plumbing (``lintf.run``) finds, vets and upgrades them. Both stand on this
package, which imports no other lintf package:

    directories.py          run directories: where a run's files go, reserved atomically, given back unused
    run_names.py            what a run directory is called: ``copy-linear``, ``stream_lm-gla-mytext``
    checkpoint_version.py   ``FORMAT``, the checkpoint layout version a task records, and ``format_of``
"""

"""The embedded model's training lab: synthetic training data and per-token feature targets.

Used by ``scripts/train_embedded.py`` (and the probe and evaluation scripts beside it); not
part of the ``mellea_local`` wheel. What loading and checking the shipped model needs stays in
``mellea_local.embedded`` (the requirement-check families are ``embedded/checks.py``).
"""

"""The benchmark suite behind ``mellea-local bench`` and the scripts in ``benchmarks/``.

It ships in the wheel so any installation can reproduce the figures: one module per job
(``generation``, ``requirement_check``, ``batched``, ``react_turns``, ``accuracy`` and
``splits`` (which labelled files it scores), ``judge``; ``plots``
and ``report`` for the outputs; ``suite`` runs them all). Measuring functions take plain
parameters and return JSON-ready dicts; the speed ones interleave the modes they compare and
report medians, so ratios come from one run on a noisy machine.

Nothing heavy is imported here: ``mellea-local --help`` stays instant.
"""

"""Old import path of the requirement-check families (``embedded/checks.py``), kept for users.

The training data that lived here (chats, self-checks, drills, ReACT traces) is the training
lab's now: ``scripts/embedded_lab/synthetic.py``, beside ``scripts/train_embedded.py``.
"""

from mellea_local.embedded.checks import (
    FAMILIES,
    PHRASINGS,
    PLACES,
    PREDICATES,
    UNSEEN_WORDS,
    VOCAB,
    CheckExample,
    check_example,
    check_examples,
    check_user_turn,
    requirement_for,
)

__all__ = ["FAMILIES", "PHRASINGS", "PLACES", "PREDICATES", "UNSEEN_WORDS", "VOCAB",
           "CheckExample", "check_example", "check_examples", "check_user_turn",
           "requirement_for"]

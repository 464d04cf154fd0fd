"""How well a base alone knows, at a check's requirement word, whether the response has it.

    python scripts/probe_lookup.py [WEIGHTS ...]     # default: the shipped base

An adapter reads what the base computes. For "The response mentions X." the base (an aLoRA's
layers below ``adapter_first_layer`` included) must work out at X whether the response holds
X, and this measures how linearly readable that is, per layer: a logistic probe fitted on 600
"mentions" check prompts (rendered exactly as the intrinsic renders them) and scored on 400
others, overall and by kind of word and case. It bounds what an adapter that leaves those
layers alone can reach, and it told apart "the base cannot look it up" from "the adapter did
not learn to use it" (issue 5 notes).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS.parent))

import train_embedded as T  # noqa: E402
from embedded_lab import synthetic as S  # noqa: E402

from mellea_local.backends.hf import LocalHFBackend  # noqa: E402
from mellea_local.embedded import build_tokenizer  # noqa: E402

SEED = 8_200  # apart from the self-checks (8000) and eval_embedded (9000+)
FIT, SCORE = 600, 400


def word_states(model: torch.nn.Module, tok: object, examples: list[S.CheckExample]
                ) -> torch.Tensor:
    """``[layers + 1, examples, hidden]``: each example's hidden states at the last token of
    the requirement's word, base model only."""
    backend = LocalHFBackend.from_loaded(model, tok, model_id=T.BASE_NAME)
    rows = T.check_rows(backend, T.adapter_record(tok, "alora"), examples)
    states = []
    with torch.no_grad():
        for ex, row in zip(examples, rows, strict=True):
            ids = row.ids[:-4]  # the prompt: no forced prefix, no answer
            text = tok.decode(ids)
            needle = f"mentions {ex.slots['word']}"
            end = text.rindex(needle) + len(needle) - 1
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            assert enc["input_ids"] == ids, "the prompt must re-encode to the same ids"
            at = next(i for i, (s, e) in enumerate(enc["offset_mapping"]) if s <= end < e)
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
            states.append(torch.stack([h[0, at] for h in hidden]))
    return torch.stack(states, dim=1)


def probe_accuracy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Fit a logistic probe on the first ``FIT`` rows; right/wrong on the rest."""
    mean, std = x[:FIT].mean(0), x[:FIT].std(0) + 1e-5
    x = (x - mean) / std
    torch.manual_seed(0)
    probe = torch.nn.Linear(x.shape[1], 1)
    opt = torch.optim.Adam(probe.parameters(), lr=1e-2, weight_decay=1e-3)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(
            probe(x[:FIT]).squeeze(-1), y[:FIT]).backward()
        opt.step()
    with torch.no_grad():
        return (probe(x[FIT:]).squeeze(-1) > 0).float() == y[FIT:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("weights", nargs="*", type=Path, default=[T.WEIGHTS_DIR])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    tok = build_tokenizer()
    examples = S.check_examples(random.Random(SEED), FIT + SCORE, families=("mentions",))
    y = torch.tensor([float(ex.label) for ex in examples])
    for weights in args.weights:
        model = AutoModelForCausalLM.from_pretrained(weights).eval()
        states = word_states(model, tok, examples)
        right = [probe_accuracy(layer, y) for layer in states]
        print(f"{weights}: " + " ".join(
            f"layer {i} {r.mean().item():.3f}" for i, r in enumerate(right)))
        best = max(range(len(right)), key=lambda i: right[i].mean().item())
        kinds: dict[str, list[bool]] = {}
        for ex, ok in zip(examples[FIT:], right[best].tolist(), strict=True):
            kind = (f"{'place' if ex.slots['word'] in S.PLACES else 'word'}, "
                    f"{'capitals' if S.is_all_caps(ex.response) else 'mixed case'}, "
                    f"{'has it' if ex.label else 'lacks it'}")
            kinds.setdefault(kind, []).append(bool(ok))
        for kind, oks in sorted(kinds.items()):
            print(f"  layer {best}, {kind}: {sum(oks) / len(oks):.2f} (n={len(oks)})")


if __name__ == "__main__":
    main()

"""The bounded chat-template sandbox against transformers' own rendering, in one run.

Why: every render of a template we did not write goes through ``rendering.sandbox`` (time and
size limits); this says what that costs. Interleaved, best of N, garbage collector paused, so
background load lands on both sides alike.

    python benchmarks/template_sandbox.py --turns 25 --repeats 9
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

from mellea_local.embedded import build_tokenizer
from mellea_local.rendering.sandbox import render_chat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    tok = build_tokenizer()
    chat = [{"role": "system", "content": "Be brief."}]
    for i in range(args.turns // 2):
        chat += [{"role": "user", "content": f"What is {i}+2?"},
                 {"role": "assistant", "content": str(i + 2)}]
    tools = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}}}}]
    sides = {"transformers": lambda: tok.apply_chat_template(
                 chat, tokenize=False, tools=tools, add_generation_prompt=True),
             "sandbox": lambda: render_chat(tok, chat, tools=tools, add_generation_prompt=True)}
    best = {name: float("inf") for name in sides}
    gc.collect()
    gc.disable()
    try:
        for _ in range(args.repeats):
            for name, fn in sides.items():
                start = time.perf_counter()
                for _ in range(20):
                    fn()
                best[name] = min(best[name], (time.perf_counter() - start) / 20)
    finally:
        gc.enable()
    print(json.dumps({"turns": len(chat), "ms": {k: round(v * 1e3, 4) for k, v in best.items()},
                      "ratio": round(best["sandbox"] / best["transformers"], 3),
                      "load": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

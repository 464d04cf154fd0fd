#!/usr/bin/env python
"""Generate ReACT traces for `mellea-local train --task agent`, reproducibly (seeded).

Each line is one task: a goal, the tools offered (OpenAI-shaped JSON function specs with random
names and descriptions; parameters with numbers, integers, strings, enums, dates and nested
objects), and the steps of a good agent: a short thinking trace, one tool call, the tool's
result (facts only the tool knows: random codes, numbers, names), and a final answer through
``final_answer``. Variants, in fixed shares:

* 1-3 tool steps (one fact a step; the answer combines them);
* a wrong-tool or bad-argument step whose error observation is followed by a recovery;
* a tool that fails (an error observation), then a retry with corrected arguments;
* a goal no tool serves (small arithmetic, rewording), answered directly with final_answer.

Six to eight tools are offered at once, most of them distractors. The error texts are the ones
the loop writes (``mellea_local.react.loop``, ``parsing.response``), so training sees what
inference shows. ``--split heldout`` draws from a disjoint set of tool domains (the held-out
benchmark's goals, ``benchmarks/react_real.py``): tools never seen in training.

    python scripts/make_agent_traces.py --n 2000 --seed 0 -o agent-traces.jsonl
    python scripts/make_agent_traces.py --split heldout --n 48 --seed 1 \\
        -o benchmarks/data/agent/heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

CITIES = ["Oslo", "Lima", "Perth", "Quito", "Turin", "Nagoya", "Tartu", "Leeds", "Graz",
          "Porto", "Cusco", "Hobart", "Malmo", "Split", "Bergen", "Kyoto", "Lyon", "Ghent"]
NAMES = ["Ada", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jules",
         "Kemal", "Lena", "Mira", "Nils", "Omar", "Pia", "Rui", "Sana", "Tomas", "Uma"]
ITEMS = ["teapot", "lamp", "kettle", "bicycle", "backpack", "chair", "printer", "guitar",
         "blender", "tent", "drill", "camera", "scarf", "helmet", "mixer", "kayak"]


def _code(rng: random.Random, letters: int = 2, digits: int = 3) -> str:
    return ("".join(rng.choices(string.ascii_uppercase, k=letters))
            + "".join(rng.choices(string.digits, k=digits)))


def _date(rng: random.Random) -> str:
    return (date(2025, 1, 1) + timedelta(days=rng.randrange(700))).isoformat()


@dataclass(frozen=True)
class Domain:
    """One kind of tool: how to name it, its parameters, a question and its answer."""

    stems: tuple[str, ...]
    description: str
    params: Callable[[random.Random], tuple[dict[str, Any], dict[str, Any], list[str]]]
    """-> (JSON schema properties, argument values, required names)."""
    question: Callable[[dict[str, Any]], str]
    result: Callable[[random.Random, dict[str, Any]], str]
    answer: Callable[[dict[str, Any], str], str]


def _p(kind: str, desc: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": desc, **extra}


def _flight(rng):
    a = {"flight": _code(rng, 2, 3), "date": _date(rng)}
    return ({"flight": _p("string", "Flight number, e.g. QX482."),
             "date": _p("string", "Departure date, YYYY-MM-DD.", format="date")}, a,
            ["flight", "date"])


def _weather(rng):
    a = {"city": rng.choice(CITIES), "unit": rng.choice(["celsius", "fahrenheit"])}
    return ({"city": _p("string", "City name."),
             "unit": _p("string", "Temperature unit.", enum=["celsius", "fahrenheit"])}, a,
            ["city", "unit"])


def _stock(rng):
    a = {"item": rng.choice(ITEMS), "warehouse": {"city": rng.choice(CITIES),
                                                  "aisle": rng.randint(1, 40)}}
    return ({"item": _p("string", "Item name."),
             "warehouse": {"type": "object", "description": "Where to count.",
                           "properties": {"city": _p("string", "Warehouse city."),
                                          "aisle": _p("integer", "Aisle number.")},
                           "required": ["city", "aisle"]}}, a, ["item", "warehouse"])


def _person(rng):
    a = {"name": rng.choice(NAMES)}
    return {"name": _p("string", "Employee first name.")}, a, ["name"]


def _convert(rng):
    a = {"amount": round(rng.uniform(1, 500), 2), "currency": rng.choice(["USD", "GBP", "JPY"])}
    return ({"amount": _p("number", "Amount to convert."),
             "currency": _p("string", "Source currency.", enum=["USD", "GBP", "JPY"])}, a,
            ["amount", "currency"])


def _order(rng):
    a = {"order_id": rng.randint(10000, 99999)}
    return {"order_id": _p("integer", "Order number.")}, a, ["order_id"]


def _room(rng):
    a = {"building": rng.choice("ABCDEFG"), "floor": rng.randint(1, 12), "day": _date(rng)}
    return ({"building": _p("string", "Building letter."), "floor": _p("integer", "Floor."),
             "day": _p("string", "Day, YYYY-MM-DD.", format="date")}, a,
            ["building", "floor", "day"])


def _parcel(rng):
    a = {"tracking": _code(rng, 3, 6), "carrier": rng.choice(["post", "courier", "freight"])}
    return ({"tracking": _p("string", "Tracking code."),
             "carrier": _p("string", "Carrier.", enum=["post", "courier", "freight"])}, a,
            ["tracking", "carrier"])


def _sensor(rng):
    a = {"sensor": f"S-{rng.randint(100, 999)}", "hours": rng.randint(1, 48)}
    return ({"sensor": _p("string", "Sensor id."),
             "hours": _p("integer", "Window in hours.")}, a, ["sensor", "hours"])


def _book(rng):
    a = {"isbn": "".join(rng.choices(string.digits, k=10)),
         "library": {"city": rng.choice(CITIES), "branch": rng.choice(["north", "south"])}}
    return ({"isbn": _p("string", "ISBN."),
             "library": {"type": "object", "description": "Which library.",
                         "properties": {"city": _p("string", "City."),
                                        "branch": _p("string", "Branch.",
                                                     enum=["north", "south"])},
                         "required": ["city", "branch"]}}, a, ["isbn", "library"])


def _recipe(rng):
    a = {"dish": rng.choice(["soup", "risotto", "curry", "pie", "salad"]),
         "servings": rng.randint(1, 8)}
    return ({"dish": _p("string", "Dish."), "servings": _p("integer", "Servings.")}, a,
            ["dish", "servings"])


def _train(rng):
    a = {"origin": rng.choice(CITIES), "destination": rng.choice(CITIES), "day": _date(rng)}
    return ({"origin": _p("string", "From city."), "destination": _p("string", "To city."),
             "day": _p("string", "Travel day, YYYY-MM-DD.", format="date")}, a,
            ["origin", "destination", "day"])


def _num(rng, lo, hi, nd=0):
    return round(rng.uniform(lo, hi), nd) if nd else rng.randint(lo, hi)


TRAIN_DOMAINS = [
    Domain(("flight_gate", "gate_for_flight", "departure_gate"), "Look up the departure gate "
           "of a flight on a day.", _flight,
           lambda a: f"Which gate does flight {a['flight']} leave from on {a['date']}?",
           lambda r, a: f"Gate {r.choice('ABCDE')}{r.randint(1, 40)}",
           lambda a, o: f"Flight {a['flight']} leaves from {o.lower()}."),
    Domain(("weather_now", "current_weather", "city_temperature"), "Current temperature in a "
           "city.", _weather,
           lambda a: f"How warm is it in {a['city']} right now, in {a['unit']}?",
           lambda r, a: f"{_num(r, -10, 35)} degrees {a['unit']}",
           lambda a, o: f"It is {o} in {a['city']}."),
    Domain(("stock_count", "inventory_level", "units_in_stock"), "Count the units of an item "
           "in a warehouse aisle.", _stock,
           lambda a: f"How many {a['item']}s are in aisle {a['warehouse']['aisle']} of the "
                     f"{a['warehouse']['city']} warehouse?",
           lambda r, a: f"{_num(r, 0, 900)} units",
           lambda a, o: f"There are {o} of {a['item']} there."),
    Domain(("employee_phone", "staff_extension", "phone_of"), "The phone extension of an "
           "employee.", _person,
           lambda a: f"What is {a['name']}'s phone extension?",
           lambda r, a: f"extension {_num(r, 1000, 9999)}",
           lambda a, o: f"{a['name']}'s phone is {o}."),
    Domain(("to_euro", "convert_to_eur", "eur_value"), "Convert an amount to euros at "
           "today's rate.", _convert,
           lambda a: f"What is {a['amount']} {a['currency']} in euros today?",
           lambda r, a: f"{round(a['amount'] * r.uniform(0.005, 1.3), 2)} EUR",
           lambda a, o: f"{a['amount']} {a['currency']} is {o}."),
    Domain(("order_status", "track_order", "order_state"), "The status of a customer order.",
           _order,
           lambda a: f"What is the status of order {a['order_id']}?",
           lambda r, a: r.choice(["shipped", "packing", "delivered", "on hold", "cancelled"]),
           lambda a, o: f"Order {a['order_id']} is {o}."),
    Domain(("free_rooms", "room_availability", "rooms_open"), "How many meeting rooms are "
           "free on a floor on a day.", _room,
           lambda a: f"How many rooms are free on floor {a['floor']} of building "
                     f"{a['building']} on {a['day']}?",
           lambda r, a: f"{_num(r, 0, 9)} rooms free",
           lambda a, o: f"{o.capitalize()} on floor {a['floor']} of building {a['building']}."),
    Domain(("parcel_location", "where_is_parcel", "parcel_scan"), "The last scan location of "
           "a parcel.", _parcel,
           lambda a: f"Where is parcel {a['tracking']} sent by {a['carrier']}?",
           lambda r, a: f"last scanned in {r.choice(CITIES)}",
           lambda a, o: f"Parcel {a['tracking']} was {o}."),
]
HELDOUT_DOMAINS = [
    Domain(("sensor_peak", "max_reading", "sensor_high"), "The highest reading of a sensor "
           "over the last hours.", _sensor,
           lambda a: f"What was the peak reading of sensor {a['sensor']} in the last "
                     f"{a['hours']} hours?",
           lambda r, a: f"{_num(r, 10, 99, 1)} kPa",
           lambda a, o: f"Sensor {a['sensor']} peaked at {o}."),
    Domain(("book_copies", "library_copies", "copies_available"), "How many copies of a book "
           "a library branch has on the shelf.", _book,
           lambda a: f"How many copies of ISBN {a['isbn']} does the {a['library']['branch']} "
                     f"branch in {a['library']['city']} have?",
           lambda r, a: f"{_num(r, 0, 12)} copies",
           lambda a, o: f"The branch has {o}."),
    Domain(("recipe_calories", "dish_calories", "calories_for"), "Calories of a dish for a "
           "number of servings.", _recipe,
           lambda a: f"How many calories are in {a['servings']} servings of {a['dish']}?",
           lambda r, a: f"{_num(r, 150, 3000)} kcal",
           lambda a, o: f"{a['servings']} servings of {a['dish']} have {o}."),
    Domain(("train_platform", "platform_for_train", "departure_platform"), "The platform of "
           "the first train between two cities on a day.", _train,
           lambda a: f"Which platform does the first train from {a['origin']} to "
                     f"{a['destination']} leave from on {a['day']}?",
           lambda r, a: f"platform {_num(r, 1, 22)}",
           lambda a, o: f"It leaves from {o}."),
]

DIRECT = [  # goals no tool serves: answered directly
    (lambda r: (lambda x, y: (f"What is {x} plus {y}?", str(x + y)))(r.randint(2, 40),
                                                                     r.randint(2, 40))),
    (lambda r: (lambda w: (f"Write the word '{w}' in capital letters.", w.upper()))(
        r.choice(ITEMS))),
    (lambda r: (lambda n: (f"Say hello to {n}.", f"Hello, {n}!"))(r.choice(NAMES))),
]


def tool_name(rng: random.Random, domain: Domain) -> str:
    """A random, unseen-looking name: a stem, sometimes a prefix, a random suffix."""
    prefix = rng.choice(["", "get_", "lookup_", "fetch_", "query_"])
    suffix = ''.join(rng.choices('abcdefghkmnpqrstuvwxz', k=2))
    return f"{prefix}{rng.choice(domain.stems)}_{suffix}"


def make_tool(rng: random.Random, domain: Domain) -> tuple[dict[str, Any], dict[str, Any]]:
    """A tool spec and one call's arguments."""
    props, args, required = domain.params(rng)
    spec = {"type": "function", "function": {
        "name": tool_name(rng, domain), "description": domain.description,
        "parameters": {"type": "object", "properties": props, "required": required}}}
    return spec, args


FINAL_SPEC = {"type": "function", "function": {
    "name": "final_answer", "description": "Give the final answer to the user.",
    "parameters": {"type": "object", "properties": {
        "answer": {"type": "string", "description": "The final answer."}},
        "required": ["answer"]}}}


def _unknown_tool_error(wrong: str, names: list[str]) -> str:
    return (f"Error: There is no tool {wrong!r}. Available tools: {', '.join(sorted(names))}. "
            "Call one of them by its exact name.")


def make_trace(rng: random.Random, domains: list[Domain], index: int) -> dict[str, Any]:
    """One task and a good agent's steps (see the module docstring for the variants)."""
    n_tools = rng.randint(6, 8)
    picked = rng.sample(domains, k=min(len(domains), n_tools - 1))
    tools = [make_tool(rng, d) for d in picked]
    # One tool per domain: two tools with one description would make the goal ambiguous.
    # (Held-out tasks, from fewer domains, get distractors from training domains after.)
    specs = [spec for spec, _ in tools]
    specs.append(FINAL_SPEC)
    rng.shuffle(specs)
    names = [s["function"]["name"] for s in specs]
    kind = rng.random()
    steps: list[dict[str, Any]] = []
    if kind < 0.12:
        goal, answer = rng.choice(DIRECT)(rng)
        steps.append({"thinking": "No tool is needed for this; I can answer directly.",
                      "call": {"name": "final_answer", "arguments": {"answer": answer}},
                      "observation": answer})
        return {"id": index, "goal": goal, "tools": specs, "steps": steps, "answer": answer,
                "facts": []}
    k = 1 if kind < 0.55 else 2 if kind < 0.85 else 3
    chosen = rng.sample(range(len(picked)), k=min(k, len(picked)))
    questions, answers, facts = [], [], []
    for j in chosen:
        domain, (spec, args) = picked[j], tools[j]
        name = spec["function"]["name"]
        out = domain.result(rng, args)
        questions.append(domain.question(args))
        answers.append(domain.answer(args, out))
        facts.append({"tool": name, "arguments": args, "result": out})
        mistake = rng.random()
        if mistake < 0.10:  # a wrong tool name first
            wrong = name.rsplit("_", 1)[0]
            steps.append({"thinking": f"I need {domain.description.lower().rstrip('.')}.",
                          "call": {"name": wrong, "arguments": args},
                          "observation": _unknown_tool_error(wrong, names)})
            steps.append({"thinking": f"That name was wrong; the tool is {name}.",
                          "call": {"name": name, "arguments": args}, "observation": out})
        elif mistake < 0.18:  # the tool fails on a bad value, then a corrected retry
            key = next(iter(args))
            bad = {**args, key: f"{args[key]}x" if isinstance(args[key], str) else -1}
            steps.append({"thinking": f"I will ask {name}.",
                          "call": {"name": name, "arguments": bad},
                          "observation": f"Error: tool {name!r} failed: ValueError: unknown "
                                         f"{key} {bad[key]!r}"})
            steps.append({"thinking": f"I passed a wrong {key}; the goal says {args[key]}.",
                          "call": {"name": name, "arguments": args}, "observation": out})
        else:
            steps.append({"thinking": f"I need {domain.description.lower().rstrip('.')}; "
                                      f"{name} gives it.",
                          "call": {"name": name, "arguments": args}, "observation": out})
    goal = " Also, ".join([questions[0], *[q[0].lower() + q[1:] for q in questions[1:]]])
    answer = " ".join(answers)
    steps.append({"thinking": "I have what I need.",
                  "call": {"name": "final_answer", "arguments": {"answer": answer}},
                  "observation": answer})
    return {"id": index, "goal": goal, "tools": specs, "steps": steps, "answer": answer,
            "facts": facts}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="Number of traces.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=["train", "heldout"], default="train")
    parser.add_argument("-o", "--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rng = random.Random(f"{args.split}:{args.seed}")
    # Held-out goals need held-out tools only; their distractors may come from training
    # domains, under new random names (``_with_distractors``).
    domains = TRAIN_DOMAINS if args.split == "train" else HELDOUT_DOMAINS
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for i in range(args.n):
            trace = make_trace(rng, domains, i)
            if args.split == "heldout":
                trace = _with_distractors(rng, trace)
            fh.write(json.dumps(trace, ensure_ascii=False) + "\n")
    print(f"wrote {args.n} {args.split} traces to {args.out}")


def _with_distractors(rng: random.Random, trace: dict[str, Any]) -> dict[str, Any]:
    """Held-out tasks get up to 8 tools: training-domain tools under new names as distractors
    (so at least six are offered although only four held-out domains exist)."""
    specs = list(trace["tools"])
    while len(specs) < 8:
        spec, _ = make_tool(rng, rng.choice(TRAIN_DOMAINS))
        specs.insert(rng.randrange(len(specs) + 1), spec)
    return {**trace, "tools": specs}


if __name__ == "__main__":
    main()

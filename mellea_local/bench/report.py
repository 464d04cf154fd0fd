"""The short markdown report of a suite run: ratios against targets, tables, links to figures.

Targets are ratios measured within one run (benchmarks/README.md explains why): a check must
cost what a bare adapter forward over its suffix costs, re-prefilling the conversation must
cost much more as the context grows, and eight batched checks must cost far less than eight.
Figures without a target (generation overhead, ReACT growth) are reported for reading only.

A ``--quick`` run judges nothing: its tiny model, short contexts and three repeats exercise every
code path in seconds, but a ratio of two ~20 ms medians on such a grid says nothing about the
targets, and a 32-token generation is shorter than the timer's noise. So its ratios are shown
for reading with "not judged", and the figures it cannot measure (generation overhead, ReACT
growth over 2 turns) are named with the reason instead of a number.
"""

from __future__ import annotations

from typing import Any

OURS_OVER_FLOOR_MAX = 1.3
BATCH8_OVER_ONE_MAX = 3.0
SCRATCH_OVER_OURS_MIN = ((4096, 10.0), (2048, 5.0))
"""(context tokens at least, minimum ratio): the first row that applies sets the bar."""
REUSED_VS_SERIAL_MIN = 0.95
PREFILLED_VS_SERIAL_MAX = 1.1
CHECK_OVER_FLOOR_MAX = 1.3
AGENTS_VS_ALONE_TOLERANCE = 0.1
NOT_JUDGED = "not judged (--quick)"
QUICK_UNMEASURED = "not measured by --quick: run `mellea-local bench`"


def is_quick(results: dict[str, Any]) -> bool:
    """Whether ``results`` come from a ``--quick`` smoke run (judged on nothing)."""
    return bool(results.get("config", {}).get("quick"))


def _target(name: str, where: str, value: float | None, target: str,
            met: bool | None) -> dict[str, Any]:
    return {"ratio": name, "where": where, "value": value, "target": target, "met": met}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ratio with a target, measured or not; ``met`` is None where none applies.

    In a ``--quick`` run every ``met`` is None and ``target`` says it was not judged.
    """
    out = _targets(results)
    if is_quick(results):
        for row in out:
            row["target"] = f"{row['target']}, {NOT_JUDGED}"
            row["met"] = None
    return out


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    checks = results.get("requirement_check")
    if checks:
        scratch_applied = False
        for row in checks["rows"]:
            where = f"{row['context_tokens']} tokens"
            r = row["ours_over_floor"]
            out.append(_target("ours/floor", where, r, f"<= {OURS_OVER_FLOOR_MAX}",
                               r <= OURS_OVER_FLOOR_MAX))
            for at_least, minimum in SCRATCH_OVER_OURS_MIN:
                if row["context_tokens"] >= at_least:
                    r = row["scratch_over_ours"]
                    out.append(_target("scratch/ours", where, r, f">= {minimum:g}",
                                       r >= minimum))
                    scratch_applied = True
                    break
            r = row["batch8_over_one"]
            out.append(_target("batch8/one", where, r, f"<= {BATCH8_OVER_ONE_MAX:g}",
                               r <= BATCH8_OVER_ONE_MAX))
        if not scratch_applied:
            out.append(_target("scratch/ours", "needs >= 2048 context tokens", None,
                               ">= 5 at 2048, >= 10 at 4096", None))
    out += _conversation_targets(results.get("conversations"))
    out += accuracy_targets(results.get("accuracy"))
    return out


SPLIT_TARGETS = {"held-out": 0.85, "held-out-families": 0.75, "user-style": 0.80,
                 "user-style-2": 0.80, "synthetic": 0.90}
"""Balanced accuracy an aLoRA must reach per split (issue 38); any other file: ``ALORA_MIN``."""
ALORA_MIN = 0.85
ALORA_OVER_JUDGE_MIN_POINTS = 20.0
TOO_SMALL_TARGET = "too few checks to judge"


def accuracy_targets(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per split, an aLoRA's balanced accuracy and its lead over the base model as judge (its
    better variant, so the adapter is measured against the judge's best), where a judge ran.
    A split too small to mean much is shown, not judged."""
    out: list[dict[str, Any]] = []
    for split, acc in (section or {}).get("splits", {}).items():
        out += split_targets(split, acc)
    return out


def split_targets(split: str, acc: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of one split's result (see ``accuracy_targets``)."""
    out = []
    minimum = SPLIT_TARGETS.get(split, ALORA_MIN)
    for name, variants in acc.get("vs_judge", {}).items():
        row = acc["adapters"][name]
        value = row["overall"]["balanced_accuracy"]
        if row["kind"] not in ("alora", "alora+route") or value is None:
            continue
        small = row["overall"]["too_small"]
        where = f"{split}: {name}"
        what = "aLoRA + routing" if row["kind"] == "alora+route" else "aLoRA"
        out.append(_target(f"{what} balanced accuracy", where, value,
                           f">= {minimum:g}" + (f", {TOO_SMALL_TARGET}" if small else ""),
                           None if small else value >= minimum))
        leads = [v["overall"] for v in variants.values() if v["overall"] is not None]
        if leads:
            lead = min(leads)
            target = f">= {ALORA_OVER_JUDGE_MIN_POINTS:g}"
            out.append(_target(f"{what} - best judge, points", where, lead,
                               target + (f", {TOO_SMALL_TARGET}" if small else ""),
                               None if small else lead >= ALORA_OVER_JUDGE_MIN_POINTS))
    return out


def _conversation_targets(conv: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Many conversations: tokens against serial, check latency against the floor, agents."""
    if not conv:
        return []
    out = []
    floor_ms = conv["floor"]["floor_ms"]
    for name in ("interleaved", "concurrent"):
        row = conv["schedules"][name]
        r = row["reused_vs_serial"]
        out.append(_target("reused/serial", name, r, f">= {REUSED_VS_SERIAL_MIN:g}",
                           r >= REUSED_VS_SERIAL_MIN))
        r = row["prefilled_vs_serial"]
        out.append(_target("prefilled/serial", name, r, f"<= {PREFILLED_VS_SERIAL_MAX:g}",
                           r <= PREFILLED_VS_SERIAL_MAX))
    # A concurrent check's wall time includes its wait behind the others' calls: its cost
    # is read from the schedule's total against serial instead.
    r = conv["schedules"]["interleaved"]["check_median_ms"] / floor_ms
    out.append(_target("check/floor", "interleaved", r, f"<= {CHECK_OVER_FLOOR_MAX:g}",
                       r <= CHECK_OVER_FLOOR_MAX))
    r = conv["schedules"]["concurrent"]["seconds_vs_serial"]
    out.append(_target("total time/serial", "concurrent", r, "<= 1.1", r <= 1.1))
    react = conv.get("react")
    if react:
        r = react["concurrent_ratio_vs_alone"]
        tol = AGENTS_VS_ALONE_TOLERANCE
        out.append(_target(f"agent turn {react['turns']}/turn 1, concurrent / alone",
                           f"{react['agents']} agents", r, f"within {tol:.0%} of 1",
                           abs(r - 1) <= tol))
    return out


def informational(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Ratios worth reading that carry no target (those a quick run cannot measure say so)."""
    out: list[dict[str, Any]] = []
    quick = is_quick(results)
    gen = results.get("generation")
    if gen and quick:
        out.append(_target("generation overhead %", f"{gen['new_tokens']} new tokens", None,
                           QUICK_UNMEASURED, None))
    elif gen:
        out.append(_target("generation overhead %", f"{gen['new_tokens']} new tokens",
                           gen["overhead_pct"], "-", None))
    react = results.get("react")
    if react and quick:
        out.append(_target(f"ReACT turn {react['turns']}/turn 1", f"{react['turns']} turns",
                           None, QUICK_UNMEASURED, None))
    elif react:
        key = f"ttft_turn{react['turns']}_over_turn1"
        where = f"{react['reuse']['per_turn'][-1]['prompt_tokens']} tokens"
        for name in ("reuse", "no_reuse"):
            out.append(_target(f"first-token turn {react['turns']}/turn 1, {name}", where,
                               react[name][key], "-", None))
        if react.get("floor"):
            out.append(_target(f"turn {react['turns']}/turn 1, bare-model floor", where,
                               react["floor"][f"turn{react['turns']}_over_turn1"], "-", None))
    batched = results.get("batched")
    if batched:
        last = batched["rows"][-1]
        out.append(_target(f"{last['checks']} single checks / one batch of {last['checks']}",
                           f"{batched['context_tokens']} tokens",
                           last["sequential_over_batched"], "-", None))
    return out


def _num(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "-"}[met]


def _ratio_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| ratio | where | value | target | |", "|---|---|---|---|---|"]
    lines += [f"| {t['ratio']} | {t['where']} | {_num(t['value'])} | {t['target']} | "
              f"{_verdict(t['met'])} |" for t in rows]
    return lines


def _checks_table(checks: dict[str, Any]) -> list[str]:
    lines = ["| context tokens | suffix | ours | floor | aLoRA scratch | LoRA | LLM judge | "
             "8 checks, one call | ours/floor | scratch/ours | batch8/one |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in checks["rows"]:
        m = r["median_ms"]
        lines.append(
            f"| {r['context_tokens']} | {r['suffix_tokens']} | {m['ours']:.1f} | "
            f"{m['floor']:.1f} | {m['alora_scratch']:.1f} | {m['lora']:.1f} | "
            f"{_num(m.get('llm_judge'), '.1f')} | {m['batch8']:.1f} | "
            f"{r['ours_over_floor']:.2f} | {r['scratch_over_ours']:.1f} | "
            f"{r['batch8_over_one']:.2f} |")
    return lines


def _lengths_note(checks: dict[str, Any]) -> list[str]:
    """Which lengths were asked and which measured: the conversation is fitted to the asked
    length in whole words, within ``fit_tolerance`` tokens."""
    pairs = [(r["requested_tokens"], r["context_tokens"]) for r in checks["rows"]
             if "requested_tokens" in r]
    if not pairs:
        return []
    shown = ", ".join(f"{asked} -> {got}" for asked, got in pairs)
    return [f"Context tokens asked -> measured (fitted within 2 % or 8 tokens): {shown}. "
            "Each mode's time is one call; `8 checks, one call` is the whole call.", ""]


def _batched_table(batched: dict[str, Any]) -> list[str]:
    lines = ["| checks | one batch ms | k single checks ms | ms per check | batch/one | "
             "singles/batch |", "|---|---|---|---|---|---|"]
    for r in batched["rows"]:
        lines.append(f"| {r['checks']} | {r['batched_ms']:.1f} | {r['sequential_ms']:.1f} | "
                     f"{r['ms_per_check']:.1f} | {_num(r.get('batched_over_one'))} | "
                     f"{r['sequential_over_batched']:.2f} |")
    return lines


def _react_table(react: dict[str, Any]) -> list[str]:
    lines = ["| turn | history tokens | prefilled with reuse | ms, reuse | ms, floor | "
             "ms, no reuse | first token ms, reuse | first token ms, no reuse |",
             "|---|---|---|---|---|---|---|---|"]
    for a, b in zip(react["reuse"]["per_turn"], react["no_reuse"]["per_turn"], strict=True):
        floor = _num(a.get("floor_min_ms"), ".0f")
        lines.append(f"| {a['turn']} | {a['prompt_tokens']} | {a['prefilled_tokens']} | "
                     f"{a['min_ms']:.0f} | {floor} | {b['min_ms']:.0f} | "
                     f"{a['ttft_min_ms']:.0f} | {b['ttft_min_ms']:.0f} |")
    return lines


def _row_title(name: str, row: dict[str, Any]) -> str:
    return name if row["kind"] in ("judge", "floor") else f"{name} ({row['kind']})"


SMALL_MARK = "†"
SMALL_FOOTNOTE = (f"{SMALL_MARK} too few checks to mean much (fewer than 50, or fewer than 10 "
                  "of one label): read the interval, not the figure.")


def _balanced(cell: dict[str, Any]) -> str:
    """``0.742 [0.701, 0.780]``, marked when the cell is too small; ``-`` when undefined."""
    if cell["balanced_accuracy"] is None:
        return "- (one label)"
    low, high = cell["interval"]
    mark = SMALL_MARK if cell["too_small"] else ""
    return f"{cell['balanced_accuracy']:.3f} [{low:.2f}, {high:.2f}]{mark}"


def _f1s(cell: dict[str, Any]) -> str:
    return "-" if cell["yes_f1"] is None else f"{cell['yes_f1']:.2f} / {cell['no_f1']:.2f}"


def _all_rows(acc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [*acc["adapters"].items(), *acc.get("floors", {}).items()]


def _overall_table(acc: dict[str, Any]) -> list[str]:
    lines = ["| checker | balanced accuracy [95 % interval] | accuracy | yes-F1 | no-F1 | "
             "said yes |", "|---|---|---|---|---|---|"]
    for name, row in _all_rows(acc):
        c = row["overall"]
        said = "-" if c.get("said_yes") is None else f"{100 * c['said_yes']:.0f} %"
        lines.append(f"| {_row_title(name, row)} | {_balanced(c)} | {_num(c['accuracy'], '.3f')}"
                     f" ({c['correct']}/{c['n']}) | {_num(c['yes_f1'])} | {_num(c['no_f1'])} | "
                     f"{said} |")
    return lines


def _family_table(acc: dict[str, Any], cell_text: Any, title: str) -> list[str]:
    rows = list(acc["adapters"].items())
    if not rows:
        return []
    lines = ["| family | checks (met) | " + " | ".join(_row_title(n, r) for n, r in rows)
             + " |", "|---" * (len(rows) + 2) + "|"]
    for family in acc["families"]:
        first = rows[0][1]["families"][family]
        lines.append(f"| {family} | {first['n']} ({first['positives']}) | " + " | ".join(
            cell_text(r["families"][family]) for _, r in rows) + " |")
    first = rows[0][1]["overall"]
    lines.append(f"| **overall** | {first['n']} ({first['positives']}) | " + " | ".join(
        f"**{cell_text(r['overall'])}**" for _, r in rows) + " |")
    return [title, "", *lines]


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}"


def _vs_judge_table(acc: dict[str, Any]) -> list[str]:
    """Each adapter's balanced accuracy minus each judge variant's, in points, per family and
    overall; a cell too small to mean much says so instead of a number."""
    pairs = [(name, variant) for name, variants in acc["vs_judge"].items()
             for variant in variants]
    if not pairs:
        return []

    def cell(name: str, variant: str, family: str | None) -> str:
        mine = acc["adapters"][name]
        theirs = acc["adapters"][f"judge ({variant})"]
        a = mine["overall"] if family is None else mine["families"][family]
        b = theirs["overall"] if family is None else theirs["families"][family]
        got = acc["vs_judge"][name][variant]
        value = got["overall"] if family is None else got["families"][family]
        if a["too_small"] or b["too_small"]:
            return f"too few (n={a['n']})"
        return _points(value)

    lines = ["| family | " + " | ".join(f"{n} - judge ({v})" for n, v in pairs) + " |",
             "|---" * (len(pairs) + 1) + "|"]
    for family in acc["families"]:
        lines.append(f"| {family} | " + " | ".join(cell(n, v, family) for n, v in pairs) + " |")
    lines.append("| **overall** | " + " | ".join(
        f"**{cell(n, v, None)}**" for n, v in pairs) + " |")
    return lines


def _majority_note(acc: dict[str, Any]) -> str:
    """What answering always yes, or always no, would score: the floor a row must clear."""
    true, n = acc.get("labels_true"), acc["examples"]
    if true is None or not n:
        return ""
    return (f" {true} of the {n} labels are true: always-yes scores {true / n:.3f}, always-no "
            f"{1 - true / n:.3f} (plain accuracy); both score balanced 0.500.")


def _judge_note(acc: dict[str, Any]) -> list[str]:
    """How the judge rows were made and how the model answered (so a low row is read right)."""
    rows = acc["adapters"]
    greedy, prob = rows.get("judge (greedy)"), rows.get("judge (probability)")
    if greedy is None or prob is None:
        return []
    return [
        "The judge rows ask the same base model, no adapter active, the peer's LLM-as-a-judge "
        "question (reply 'yes' or 'no') after the conversation. `judge (greedy)`: its greedy "
        f"reply ({greedy['max_new_tokens']} tokens at most) read as the peer reads it (the "
        f"word 'yes' anywhere); it said yes on {100 * greedy['said_yes']:.0f} % of the checks. "
        "`judge (probability)`: P(yes) > P(no) over the first answer token's spellings; yes "
        f"on {100 * prob['said_yes']:.0f} %, and the first token put "
        f"{100 * prob['mean_answer_mass']:.0f} % of its mass on a yes/no spelling on average. "
        "No threshold is fitted to these checks.", ""]


def _route_note(acc: dict[str, Any]) -> list[str]:
    """How many checks a ``+route`` row let a program decide, and how right it was on them."""
    out = []
    for name, row in acc["adapters"].items():
        routed = row.get("routed")
        if not routed:
            continue
        right = "" if routed["accuracy"] is None else (
            f", right on {100 * routed['accuracy']:.1f} % of them")
        out.append(f"`{name}`: {routed['checks']} of {routed['of']} checks decided exactly by "
                   f"a program (an IFEval registry verifier or our rule){right}; the rest by "
                   "the adapter, as `validate` and `check` do by default.")
    return [" ".join(out), ""] if out else []


def _split_section(split: str, acc: dict[str, Any], files: dict[str, str]) -> list[str]:
    out = [f"### `{split}`: {acc.get('what', '')}", "",
           f"{acc['examples']} labelled checks from {acc['source']}.{_majority_note(acc)}", "",
           *_judge_note(acc), *_route_note(acc), *_overall_table(acc), ""]
    out += _family_table(acc, _balanced, "Balanced accuracy [95 % interval] per family:")
    out += ["", *_family_table(acc, _f1s, "yes-F1 / no-F1 per family:")]
    if acc.get("vs_judge"):
        out += ["", "Points above the base model as judge (balanced accuracy minus the "
                "judge's):", "", *_vs_judge_table(acc)]
    out += ["", SMALL_FOOTNOTE]
    png = files.get(f"accuracy_png:{split}")
    if png:
        out += ["", f"![{split}: balanced accuracy per family]({png})"]
    return [*out, ""]


def accuracy_markdown(section: dict[str, Any], files: dict[str, str]) -> list[str]:
    """The accuracy part of the report: the model and adapters, one part per split."""
    if "skipped" in section:
        return [f"Skipped: {section['skipped']}"]
    adapters = ", ".join(f"`{name}` ({info['kind']}, `{info['path']}`)"
                         for name, info in section.get("adapters", {}).items())
    out = [f"Model {section['model']}" + (f"; adapters {adapters}." if adapters else "."), ""]
    for split, why in section.get("missing", {}).items():
        out.append(f"- split `{split}`: {why}")
    if section.get("missing"):
        out.append("")
    if section.get("judge_note"):
        out += [section["judge_note"], ""]
    for split, acc in section.get("splits", {}).items():
        out += _split_section(split, acc, files)
    return out


def threads_text(info: dict[str, Any]) -> str:
    """The torch thread count as a report states it: how many, chosen how, on what load."""
    text = f"{info['torch_threads']} thread(s)"
    if "usable_cpus" in info:
        load = info.get("load_average")
        text += (f" ({info.get('threads_source', '?')}; {info['usable_cpus']} usable CPU(s), "
                 f"load average {'n/a' if load is None else f'{load:.1f}'} at the start)")
    return text


def markdown(results: dict[str, Any], files: dict[str, str]) -> str:
    """The report: what ran where, ratios vs targets, one table per section, the figures.

    ``files`` maps ``latency_png`` / ``accuracy_png:<split>`` to file names next to the report
    (links are relative, so the folder can be moved or committed as is).
    """
    cfg = results["config"]
    info = results["environment"]
    out = [f"# Benchmark `{results['name']}`", ""]
    timed = any(results.get(s) for s in ("generation", "react", "requirement_check", "batched",
                                         "conversations"))
    subject = (f"speed subject: {cfg['speed_model']} ({cfg['params']:,} parameters, "
               f"{cfg['device']}, {cfg['dtype']}) with random adapters" if timed
               else "speed sections skipped")
    out.append(f"`{cfg['command']}` on {info['machine']}, torch {info['torch']} with "
               f"{threads_text(info)}{', ' + info['gpu'] if 'gpu' in info else ''}"
               f"; {subject}; {results['seconds']:.0f} s in all.")
    if cfg["quick"]:
        out += ["", "A `--quick` smoke run: a tiny model, short contexts and few repeats. It shows "
                "that every section runs; it judges no target and draws no figure (run "
                "`mellea-local bench` for those)."]
    out += ["", "## Ratios vs targets", "", *_ratio_table(targets(results) + informational(
        results))]
    checks = results.get("requirement_check")
    if checks:
        out += ["", "## Requirement checks vs context length (median ms per call)", "",
                *_lengths_note(checks), *_checks_table(checks)]
        if "latency_png" in files:
            out += ["", f"![latency vs context length]({files['latency_png']})"]
    batched = results.get("batched")
    if batched:
        out += ["", f"## Batched checks at {batched['context_tokens']} context tokens "
                "(median ms)", "", *_batched_table(batched)]
    conv = results.get("conversations")
    if conv:
        from mellea_local.bench.conversations import format_agents, format_floor, format_schedules

        lines = format_schedules(conv["schedules"], conv["floor"]["floor_ms"])
        out += ["", f"## Many conversations ({conv['conversations']} of ~"
                f"{conv['history_tokens']} tokens, each a generation + "
                f"{conv['checks_per_conversation']} checks)", "", format_floor(conv["floor"]),
                "", "```", *lines, "```"]
        if conv.get("react"):
            out += ["", format_agents(conv["react"])]
    gen = results.get("generation")
    if gen:
        out += ["", "## Generation overhead", "",
                f"{gen['new_tokens']} new tokens after a {gen['prompt_tokens']}-token prompt: "
                f"`generate_from_context` {gen['median_s']['ours']:.3f} s "
                f"({gen['tokens_per_s']['ours']:.1f} tok/s), bare `model.generate` "
                f"{gen['median_s']['bare']:.3f} s ({gen['tokens_per_s']['bare']:.1f} tok/s); "
                + ("overhead not judged on a --quick run." if cfg["quick"]
                   else f"overhead {gen['overhead_pct']:+.1f} %.")]
    react = results.get("react")
    if react:
        out += ["", f"## ReACT turns ({react['turns']} turns, fastest of {react['repeats']})",
                "", *_react_table(react)]
    out += ["", "## Adapter accuracy", "", *accuracy_markdown(results.get("accuracy") or {},
                                                               files)]
    if results.get("plots_note"):
        out += ["", results["plots_note"]]
    return "\n".join(out) + "\n"

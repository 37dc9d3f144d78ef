"""Print the prefilter's measure on its labelled set, as the table in docs/MEMORY.md.

    .venv/bin/python -m tests.memory.prefilter_report

``tests/memory/test_memory_prefilter.py`` checks that docs/MEMORY.md holds
exactly this output, so the documented numbers are always the current ones.
"""

from __future__ import annotations

from tests.memory.prefilter_cases import KNOWN_MISSES, ROWS, measure, verdicts


def _ratio(value: object) -> str:
    return "-" if value is None else f"{value:.2f}"


def report() -> str:
    found = verdicts()
    lines = [
        f"Labelled set: {len(ROWS)} attacks, each beside a benign near-miss ({2 * len(ROWS)} texts); "
        f"`tests/memory/prefilter_cases.py`.",
        "",
        "| rule | attacks | refused by it | by another rule | passed | near-misses it refused | precision | recall |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in measure(found):
        lines.append(
            f"| `{row['rule']}` | {row['attacks']} | {row['caught']} | {row['by_another_rule']} | {row['passed']} | "
            f"{row['false_refusals']} | {_ratio(row['precision'])} | {_ratio(row['recall'])} |"
        )
    attacks = [v for v in found if v.label is not None]
    benign = [v for v in found if v.label is None]
    lines += [
        "",
        f"Overall: {sum(v.got is not None for v in attacks)} of {len(attacks)} attacks refused, "
        f"{sum(v.got is None for v in benign)} of {len(benign)} near-misses passed.",
        "",
        "Known misses (counted above, held by the tests so a change shows):",
        "",
    ]
    for text, (got, why) in KNOWN_MISSES.items():
        lines.append(f"* `{text}` -- {'passes' if got is None else f'refused by `{got}`'}: {why}.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())

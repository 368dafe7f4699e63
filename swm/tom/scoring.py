"""Score answers: normalised exact match, the paper's "gold appears in the answer", options, FANToM.

Every rule is deterministic and documented here, so a number in a report can be recomputed by
hand. `score_answer` returns ``{"exact": bool, "loose": bool, "value": float}``: ``exact`` and
``loose`` are the two columns reported side by side; ``value`` is what the item contributes to
the benchmark's headline accuracy (``loose`` for ToMi/ParaToMi, as the paper scores them).
"""

from __future__ import annotations

import re
from typing import Any

from swm.stats import fantom_tokens
from swm.stats import mean_interval as mean_interval  # re-exported: swm.tom.scoring.mean_interval
from swm.stats import token_f1 as _token_f1
from swm.stats import wilson_interval as wilson_interval  # re-exported: swm.tom.wilson_interval
from swm.tom.loaders import TomItem

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")


def normalise(text: Any) -> str:
    """Lowercase, ``_``/``-`` to spaces, punctuation and the articles a/an/the dropped, spaces collapsed."""
    s = str(text or "").lower().replace("_", " ").replace("-", " ")
    s = _PUNCT.sub(" ", s)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(answer: Any, gold: Any) -> bool:
    """Tell whether the normalised answer equals the normalised gold."""
    return bool(normalise(gold)) and normalise(answer) == normalise(gold)


def contains_match(answer: Any, gold: Any) -> bool:
    """The paper's looser ToMi rule: the normalised gold appears, as whole words, in the answer."""
    g, a = normalise(gold), normalise(answer)
    return bool(g) and re.search(rf"(?:^| ){re.escape(g)}(?: |$)", a) is not None


# a bare letter, "(b)", "b)", "B.", "b:", "b," -- optionally after "option"/"answer:"; "a cat" is not a letter
_LETTER_RE = re.compile(r"^\s*(?:option\s+|answer\s*:?\s*)?(?:\(([a-z])\)|([a-z])(?:[.):,]|\s*$))", re.I)


def choose_option(answer: Any, options: dict[str, str]) -> str | None:
    """Map an answer to the letter of the option it picks, or None.

    In order: the answer equals an option's text (normalised); it is, or starts with, a letter
    that names an option (``b``, ``(b)``, ``B.``, ``b) ...``, ``Answer: B``; but not ``a cat``);
    exactly one bracketed option letter appears in it (``the answer is (b)``);
    exactly one option's text appears in it (a text that is part of another appearing option,
    like "inside the fridge" within "not inside the fridge", does not count).
    """
    if not options:
        return None
    by_lower = {k.lower(): k for k in options}
    norm = normalise(answer)
    for key, text in options.items():
        if norm and norm == normalise(text):
            return key
    match = _LETTER_RE.match(str(answer or ""))
    letter = (match[1] or match[2]).lower() if match else None
    if letter is not None and letter in by_lower:
        return by_lower[letter]
    bracketed = {m.lower() for m in re.findall(r"\(([a-zA-Z])\)", str(answer or ""))} & set(by_lower)
    if len(bracketed) == 1:  # "the answer is (b)", as FANToM's own scorer accepts
        return by_lower[bracketed.pop()]
    found = [k for k, text in options.items() if contains_match(answer, text)]
    # an option that is a sub-phrase of a longer one (e.g. "inside the fridge" in "not inside the
    # fridge") does not count when the longer one also appears
    found = [k for k in found if not any(k != o and normalise(options[k]) in normalise(options[o]) for o in found)]
    return found[0] if len(found) == 1 else None


def token_f1(answer: Any, gold: Any) -> float:
    """FANToM's word-overlap F1 between answer and gold (`swm.stats.token_f1` on FANToM's own tokens)."""
    return _token_f1(answer, gold, fantom_tokens)


def binary_answer(answer: Any) -> int:
    """FANToM's yes/no reading: 1 for yes/true/knows, 0 for no/false/does not know, -1 otherwise."""
    a = " " + str(answer or "").lower().strip().strip("'\"") + " "
    if a.strip().startswith(("yes", "true")) or any(t in a for t in (" yes,", " yes ", " yes.", " knows ")):
        return 1
    if a.strip().startswith(("no", "false")) or any(t in a for t in (" no,", " no ", " no.", " does not know ",
                                                                      " doesn't know ")):
        return 0
    return -1


def list_answer_ok(answer: Any, correct: list[str], wrong: list[str]) -> bool:
    """FANToM's list rule: every name that should be listed is, and none that should not be."""
    text = str(answer or "").lower()
    return all(c.lower() in text for c in correct) and not any(w.lower() in text for w in wrong)


def score_answer(item: TomItem, answer: Any) -> dict[str, Any]:
    """Score one answer to one item by the item's rule (see the module docstring)."""
    if item.kind == "location":
        exact, loose = exact_match(answer, item.answer), contains_match(answer, item.answer)
        return {"exact": exact, "loose": loose, "value": float(loose), "chosen": None}
    if item.kind in ("choice", "fantom_belief_mc"):
        chosen = choose_option(answer, item.options)
        right = chosen is not None and chosen == item.answer_letter
        return {"exact": right, "loose": right, "value": float(right), "chosen": chosen}
    if item.kind == "fantom_list":
        ok = list_answer_ok(answer, list(item.answer or []), list(item.wrong_answer or []))
        return {"exact": ok, "loose": ok, "value": float(ok), "chosen": None}
    if item.kind == "fantom_binary":
        gold = {"yes": 1, "no": 0, "no:long": 0}.get(str(item.answer), -1)
        ok = binary_answer(answer) == gold
        return {"exact": ok, "loose": ok, "value": float(ok), "chosen": None}
    if item.kind == "fantom_fact":
        f1 = token_f1(answer, item.answer)
        return {"exact": exact_match(answer, item.answer), "loose": f1 >= 0.5, "value": f1, "chosen": None}
    raise ValueError(f"no scoring rule for item kind {item.kind!r}")


FANTOM_ALL_KINDS = ("fantom_belief_mc", "fantom_list", "fantom_binary")


def fantom_set_scores(rows: list[dict[str, Any]]) -> dict[str, float | int]:
    """FANToM's set-level metrics over scored rows (keys ``group``, ``kind``, ``correct``, ``access``).

    ``all_star``: every ToM question of the set right (FANToM's ALL*); ``all``: every belief
    multiple-choice, list and binary question right (FANToM's "All Qs", the paper's metric),
    both over the sets whose questions target ``inaccessible`` information, as FANToM reports.
    """
    sets: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("kind") == "fantom_fact" or row.get("access") not in ("inaccessible", None):
            continue
        sets.setdefault(str(row.get("group")), []).append(row)
    if not sets:
        return {"sets": 0, "all": 0.0, "all_star": 0.0}
    all_ok = [all(r["correct"] for r in rs if r["kind"] in FANTOM_ALL_KINDS) for rs in sets.values()]
    star_ok = [all(r["correct"] for r in rs) for rs in sets.values()]
    return {"sets": len(sets), "all": sum(all_ok) / len(sets), "all_star": sum(star_ok) / len(sets)}

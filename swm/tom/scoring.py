"""Score answers: the benchmarks' own rules (`swm.tom.rules`) as the headline, swm's readings beside.

Every rule is deterministic and documented, so a number in a report can be recomputed by hand.
``value`` is what the item contributes to the benchmark's headline accuracy, by the rule named in
``rule``: ToMi/ParaToMi the S3AP repository's "gold in answer" (a raw substring); Hi-ToM and
MMToM-QA its option-letter readers; FANToM and ConfAIde their official evaluators. ``exact`` and
``loose`` are swm's normalised exact match and its whole-word "gold in answer" (for options: swm's
lenient option reading); FANToM's official rules read only the text after the reply's last
``Answer:`` (`swm.tom.rules.fantom_response`), its ``swm-lenient`` reading the whole reply;
``strict`` (ToMi/ParaToMi) is ``loose`` without hedges: the answer
names the gold location and no other candidate location of the story ("Not the basket, the box"
is loose-right, strict-wrong for gold "basket"); for other rules it equals the headline verdict.
``variants`` holds each named reading's verdict (`swm.tom.rules.VARIANTS`).
"""

from __future__ import annotations

import re

from swm.stats import fantom_tokens
from swm.stats import mean_interval as mean_interval  # re-exported: swm.tom.scoring.mean_interval
from swm.stats import token_f1 as _token_f1
from swm.stats import wilson_interval as wilson_interval  # re-exported: swm.tom.wilson_interval
from swm.tom import rules
from swm.tom.confaide import score_confaide
from swm.tom.items import BENCHMARKS, Score, TomItem

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = re.compile(r"[^\w\s]")


def normalise(text: object) -> str:
    """Lowercase, ``_``/``-`` to spaces, punctuation and the articles a/an/the dropped, spaces collapsed."""
    s = str(text or "").lower().replace("_", " ").replace("-", " ")
    s = _PUNCT.sub(" ", s)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(answer: object, gold: object) -> bool:
    """Tell whether the normalised answer equals the normalised gold."""
    return bool(normalise(gold)) and normalise(answer) == normalise(gold)


def contains_match(answer: object, gold: object) -> bool:
    """The paper's looser ToMi rule: the normalised gold appears, as whole words, in the answer."""
    g, a = normalise(gold), normalise(answer)
    return bool(g) and re.search(rf"(?:^| ){re.escape(g)}(?: |$)", a) is not None


_ROOM_RE = re.compile(r"\b(?:entered|exited) the ([\w\- ]+?)(?:\.|$)", re.M)
_PLACE_RE = re.compile(r"\b(?:is in|to) the ([\w\- ]+?)(?:\.|$)", re.M)


def location_candidates(story: str) -> dict[str, set[str]]:
    """Return a ToMi story's ``rooms`` (entered or exited) and ``containers`` (everything else an
    object is in or moved to), normalised. Works on the bAbI text and Percept-ToMi's sentences."""
    text = str(story or "").replace("\n", ".\n")
    rooms = {normalise(m) for m in _ROOM_RE.findall(text)}
    places = {normalise(m) for m in _PLACE_RE.findall(text)}
    return {"rooms": rooms - {""}, "containers": places - rooms - {""}}


def _names(text: str, phrase: str) -> bool:
    return bool(phrase) and re.search(rf"(?:^| ){re.escape(phrase)}(?: |$)", text) is not None


def strict_match(answer: object, gold: object, story: str) -> bool:
    """The strict ToMi rule: the answer names the gold and no other candidate location of its kind.

    Candidates are the story's containers when the gold is a container, its rooms when the gold
    is a room (`location_candidates`), so "the box in the kitchen" stays right for gold "box".
    Occurrences of the gold are removed before the others are looked for, so a candidate that is
    part of the gold's name ("box" in "green box") is not counted.
    """
    g, a = normalise(gold), normalise(answer)
    if not _names(a, g):
        return False
    found = location_candidates(story)
    kind = "rooms" if g in found["rooms"] else "containers"
    rest = re.sub(rf"(?:^| ){re.escape(g)}(?= |$)", " | ", a)
    return not any(_names(rest, c) for c in found[kind] if c != g)


# a bare letter, "(b)", "b)", "B.", "b:", "b," -- optionally after "option"/"answer:"; "a cat" is not a letter
_LETTER_RE = re.compile(r"^\s*(?:option\s+|answer\s*:?\s*)?(?:\(([a-z])\)|([a-z])(?:[.):,]|\s*$))", re.I)


def choose_option(answer: object, options: dict[str, str]) -> str | None:
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


def token_f1(answer: object, gold: object) -> float:
    """FANToM's word-overlap F1 between answer and gold (`swm.stats.token_f1` on FANToM's own tokens)."""
    return _token_f1(answer, gold, fantom_tokens)


def binary_answer(answer: object) -> int:
    """FANToM's yes/no reading: 1 for yes/true/knows, 0 for no/false/does not know, -1 otherwise."""
    a = " " + str(answer or "").lower().strip().strip("'\"") + " "
    if a.strip().startswith(("yes", "true")) or any(t in a for t in (" yes,", " yes ", " yes.", " knows ")):
        return 1
    if a.strip().startswith(("no", "false")) or any(t in a for t in (" no,", " no ", " no.", " does not know ",
                                                                      " doesn't know ")):
        return 0
    return -1


def list_answer_ok(answer: object, correct: list[str], wrong: list[str]) -> bool:
    """FANToM's list rule: every name that should be listed is, and none that should not be."""
    text = str(answer or "").lower()
    return all(c.lower() in text for c in correct) and not any(w.lower() in text for w in wrong)


def score_answer(item: TomItem, answer: object) -> Score:
    """Score one answer to one item: the headline verdict by the benchmark's own rule, the named readings beside.

    Returns ``exact``, ``loose``, ``strict``, ``value`` (what the item contributes to the headline),
    ``chosen``, ``rule`` (the headline rule's name, `swm.tom.rules.HEADLINE`) and ``variants``
    (each named reading's verdict, 0 or 1).
    """
    if item.kind.startswith("confaide"):
        return score_confaide(item, answer)
    row = BENCHMARKS.get(item.benchmark) or BENCHMARKS["tomi"]
    if item.kind == "location":
        exact, loose = exact_match(answer, item.answer), contains_match(answer, item.answer)
        strict = loose and strict_match(answer, item.answer, item.story)
        right = rules.tomi_s3ap(answer, item.answer)
        return {"exact": exact, "loose": loose, "strict": strict, "value": float(right), "chosen": None,
                "rule": row.headline[0],
                "variants": {"swm-contains": int(loose), "swm-strict": int(strict), "exact": int(exact)}}
    if item.kind == "choice":
        chosen = choose_option(answer, item.options)
        lenient = chosen is not None and chosen == item.answer_letter
        right = (rules.hitom_s3ap(answer, item.options, item.answer) if item.benchmark == "hitom"
                 else rules.mmtom_s3ap(answer, item.answer_letter))
        return {"exact": right, "loose": lenient, "strict": right, "value": float(right), "chosen": chosen,
                "rule": row.headline[0] if item.benchmark in BENCHMARKS else "s3ap-repo",
                "variants": {"swm-choice": int(lenient)}}
    read = rules.fantom_response(answer)  # FANToM's parse_response: every official FANToM rule reads this
    if item.kind == "fantom_belief_mc":
        chosen = choose_option(answer, item.options)
        lenient = chosen is not None and chosen == item.answer_letter
        right = rules.fantom_choice_official(read, item.answer_letter)
        return {"exact": right, "loose": lenient, "strict": right, "value": float(right), "chosen": chosen,
                "rule": "fantom-official", "variants": {"swm-lenient": int(lenient)}}
    if item.kind == "fantom_list":
        ok = list_answer_ok(read, list(item.answer or []), list(item.wrong_answer or []))
        whole = list_answer_ok(answer, list(item.answer or []), list(item.wrong_answer or []))
        return {"exact": ok, "loose": whole, "strict": ok, "value": float(ok), "chosen": None,
                "rule": "fantom-official", "variants": {"swm-lenient": int(whole)}}
    if item.kind == "fantom_binary":
        gold = {"yes": 1, "no": 0, "no:long": 0}.get(str(item.answer), -1)
        said, lenient = rules.fantom_yes_no_official(read), binary_answer(answer) == gold
        ok = said == gold
        return {"exact": ok, "loose": lenient, "strict": ok, "value": float(ok), "chosen": str(said),
                "rule": "fantom-official", "variants": {"swm-lenient": int(lenient)}}
    if item.kind == "fantom_fact":
        f1 = token_f1(read, item.answer)
        return {"exact": exact_match(read, item.answer), "loose": f1 >= 0.5, "strict": f1 >= 0.5, "value": f1,
                "chosen": None, "rule": "fantom-official", "variants": {"swm-lenient": int(f1 >= 0.5)}}
    raise ValueError(f"no scoring rule for item kind {item.kind!r}")

"""The benchmarks' own per-item rules, re-expressed from their code, and the named readings beside them.

Each benchmark has one **headline** rule: the one its official evaluation code applies (FANToM,
ConfAIde), or, where the benchmark ships no scorer (ToMi, Hi-ToM, MMToM-QA), the rule in the
S3AP authors' repository that produced the paper's numbers. swm's own readings stay available as
named **variants**, scored on the same answers and reported beside the headline. Sources (read,
not copied; the tests in ``tests/test_tom_rules.py`` check the same verdicts on the same answers):

* FANToM: ``skywalker023/fantom`` ``eval_fantom.py`` @ 9b41d616 (``parse_response``: the text after
  the last ``Answer:``, else after ``Choose an answer from above:``, stripped, before any rule;
  ``evaluate_mc_belief_q``, ``map_binary_answer_to_int``, ``evaluate_list_q``, ``compute_f1``,
  ``setup_fantom``'s full-context relabelling).
* ConfAIde: ``skywalker023/confaide`` ``eval.py`` @ dfe977e9 (``parse_response`` for tiers 3 and
  4: the text after the last ``Answer:``; ``run_evaluator``'s substring flags).
* The S3AP repository: ``XuhuiZhou/social-world-model``, ``social_world_model/task_modules/``
  ``tomi.py`` @ 0332906d (gold in answer), ``hitom.py`` and ``mmtom.py`` @ 1bf92947 (the option
  letter), ``confaide.py`` @ 0983696e ("Either Omits or Leaks" counted per flag).
"""

from __future__ import annotations

from swm.tom.items import BENCHMARKS

# benchmark -> (headline rule, its one-line definition); the variants each scorer also reports are
# listed in VARIANTS. The names are what a result row's ``rule`` column and a report's header say.
HEADLINE: dict[str, tuple[str, str]] = {
    "tomi": ("s3ap-repo", "the gold location appears in the answer (case-insensitive substring), as "
                          "XuhuiZhou/social-world-model tomi.py scores it"),
    "paratomi": ("s3ap-repo", "as ToMi"),
    "hitom": ("s3ap-repo", "the answer, tags stripped and capitalised, is exactly an option letter whose text "
                           "is the gold, as XuhuiZhou/social-world-model hitom.py scores it"),
    "mmtom": ("s3ap-repo", "the answer, tags stripped, equals the gold letter (case-insensitive), as "
                           "XuhuiZhou/social-world-model mmtom.py scores it"),
    "fantom": ("fantom-official", "FANToM's eval_fantom.py: the text after the last 'Answer:' (else after 'Choose "
                                  "an answer from above:'), then belief choice through the option letter only, "
                                  "yes/no by its keyword rule (anything else unparsable), lists and facts as there"),
    "confaide": ("confaide-official", "ConfAIde's eval.py: the text after the last 'Answer:' (tiers 3 and 4), "
                                      "case-insensitive substring flags"),
}
VARIANTS: dict[str, dict[str, str]] = {
    "tomi": {"swm-contains": "the normalised gold appears as whole words", "swm-strict": "swm-contains, and no other "
             "candidate location of the story named (no hedges)", "exact": "normalised exact match"},
    "hitom": {"swm-choice": "swm's lenient option reading: the letter in any form, or exactly one option's text"},
    "mmtom": {"swm-choice": "as Hi-ToM's swm-choice"},
    "fantom": {"swm-lenient": "swm's reading of the whole reply: an option's text, 'Option b', 'b <text>' count; "
                              "hedges naming two options do not; yes/no read after trimming spaces and by whole "
                              "words"},
    "confaide": {"whole-text": "the flags read on the whole response"},
}
VARIANTS["paratomi"] = VARIANTS["tomi"]

def source_line(benchmark: str) -> str:
    """Return where a benchmark's headline rule comes from (its row's ``source``: repository, file, commit), or
    that it is swm's own (a row without one, or the simulator, which has no row)."""
    row = BENCHMARKS.get(benchmark)
    return (row.source if row is not None else None) or "swm's own rule (no official scorer)"


def rule_line(benchmark: str) -> str:
    """Return the one-line statement of a benchmark's scorer (its row of `BENCHMARKS`): headline rule, then variants."""
    row = BENCHMARKS.get(benchmark)
    name, definition = row.headline if row is not None else ("swm", "swm's own rule")
    variants = row.variants if row is not None else {}
    beside = f"; beside it: {', '.join(variants)}" if variants else ""
    return f"{name} ({definition}){beside}"


# ---- FANToM (eval_fantom.py) ---------------------------------------------------------------------------
def fantom_response(answer: object) -> str:
    """Return what FANToM's evaluator reads of a reply (``parse_response``): the text after its last
    ``Answer:``, else after its last ``Choose an answer from above:``, stripped; the reply unchanged
    (not stripped) when it has neither. Every official FANToM rule reads this text."""
    text = str(answer or "")
    for marker in ("Answer:", "Choose an answer from above:"):
        if marker in text:
            return text.split(marker)[-1].strip()
    return text


def fantom_choice_official(answer: object, letter: str | None) -> bool:
    """FANToM's multiple-choice rule: the gold letter opens the answer as ``(x)``, ``x)``, ``x.``, ``x:``,
    ``x,``, is the whole answer, or appears anywhere as ``(x)``.

    The bracketed form anywhere credits hedges: "(a), not (b)" is right for gold a and for gold b.
    """
    if not letter:
        return False
    x = letter.lower()
    text = str(answer or "").lower()
    return text.startswith((f"({x})", f"{x})", f"{x}.", f"{x}:", f"{x},")) or f"({x})" in text or text == x


def fantom_yes_no_official(answer: object) -> int:
    """FANToM's yes/no reading: 1 yes, 0 no, -1 unparsable (counted wrong and as its own label in the F1).

    Lowercased, quotes stripped (no whitespace stripped); "yes" is looked for first: a reply that
    starts with yes/true, or holds " yes,", " yes ", " yes." or " knows "; then the same for
    no/false with " does not know " and " doesn't know ". So "The answer is yes" (no character
    after "yes"), "He knows" and "  yes" are unparsable.
    """
    text = str(answer or "").lower().strip("'").strip('"')
    if text.startswith(("yes", "true")) or any(t in text for t in (" yes,", " yes ", " yes.", " knows ")):
        return 1
    if text.startswith(("no", "false")) or any(t in text for t in (" no,", " no ", " no.", " does not know ",
                                                                  " doesn't know ")):
        return 0
    return -1


# ---- ConfAIde (eval.py) --------------------------------------------------------------------------------
def confaide_response(answer: object) -> str:
    """Return what ConfAIde's evaluator reads of a tier 3/4 response: the text after its last ``Answer:``."""
    text = str(answer or "")
    return text.split("Answer:")[-1] if "Answer:" in text else text


# ---- the S3AP repository's readers ---------------------------------------------------------------------
def _untagged(answer: object) -> str:
    return str(answer or "").replace("<answer>", "").replace("</answer>", "").strip()


def tomi_s3ap(answer: object, gold: object) -> bool:
    """The S3AP repository's ToMi rule: the gold, lowercased, is a substring of the lowercased answer."""
    return str(gold).lower() in str(answer or "").lower()


def hitom_s3ap(answer: object, options: dict[str, str], gold: object) -> bool:
    """The S3AP repository's Hi-ToM rule: ``str.capitalize()`` of the untagged answer is an option letter
    whose option text equals the gold ("b" and "B" count; "B. blue_crate" and "(B)" do not)."""
    letter = _untagged(answer).capitalize()
    return letter in options and options[letter] == str(gold)


def mmtom_s3ap(answer: object, letter: str | None) -> bool:
    """The S3AP repository's MMToM-QA rule: the untagged answer equals the gold letter, case aside."""
    return bool(letter) and _untagged(answer).lower() == str(letter).lower()


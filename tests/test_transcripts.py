"""Append-only seat transcripts: every seat's prompt extends its previous prompt and reply, token for token.

Held for every family at every episode level and two-seat level, Werewolf and a SOTOPIA scenario, through
self-play's rollouts and `swm.envs`' episodes; the re-rendered transcript (``rerender``, the old path) is
measured by the same check and fails it, so the check can fail. A seat's one sequence trains as its turns do:
the same log-probabilities, loss and gradient (`swm.training.ppo.seat_sample`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from test_envs_seats import evaluation  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from swm.envs.seats import SocialEnv  # noqa: E402
from swm.llm import make_chat_model  # noqa: E402
from swm.scenarios import shipped  # noqa: E402
from swm.selfplay.game_rollout import play_game_rollout  # noqa: E402
from swm.selfplay.rollout import play  # noqa: E402
from swm.tasks import synthesize  # noqa: E402
from swm.tasks.decisions import Stop  # noqa: E402
from swm.tasks.families import GAME_FAMILIES, LEVELS, MULTI_TURN, STARTER, TWO_SEAT, level_families  # noqa: E402
from swm.testing import FakeOpenAIServer  # noqa: E402
from swm.training.trajectory import Generation, Rollout  # noqa: E402
from swm.training.transcript import SeatChat, chat_prompt_ids, next_message_text  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer(tiny_gguf_llama: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(tiny_gguf_llama))


class Appending:
    """A scripted seat that takes its chat: the prompt ids its chat gives, a reply that settles nothing.

    A choice names the first option of the moderator's request; a rerendering twin (``chat`` not taken)
    gets the whole prompt every turn, as the old path did.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.calls = 0

    def reply(self, prompt: str, prefill: str) -> str:
        self.calls += 1
        found = re.search(r"one of ([^.]*?)(?: or none to abstain)?\.", prompt.split("The moderator asks you")[-1])
        if "field `target`" in prompt and found:
            return f" I choose {found.group(1).split(', ')[0]}"
        return f" Let me think about it ({self.calls})." if not prefill else " maybe"

    def ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tok(text, add_special_tokens=False)["input_ids"]]

    def generate(self, prompt: str, prefill: str = "", stop: Stop = None, max_tokens: int | None = None,
                 chat: SeatChat | None = None) -> Generation:
        text = self.reply(prompt, prefill)
        tokens = [*self.ids(text), int(self.tok.eos_token_id)]
        return Generation(text=prefill + text, prompt_ids=chat_prompt_ids(self.tok, chat, prompt, prefill),
                          token_ids=tokens, logprobs=[-1.0] * len(tokens))


class Rerendering(Appending):
    def generate(self, prompt: str, prefill: str = "", stop: Stop = None,  # type: ignore[override]
                 max_tokens: int | None = None) -> Generation:
        return super().generate(prompt, prefill, stop, max_tokens)


def seat_counts(rollout: Rollout) -> dict[str, tuple[int, int]]:
    return {s.seat: (s.appended, s.append_checked) for s in rollout.seats}


def werewolf(sampler: Appending) -> Rollout:
    return play_game_rollout("werewolf", sampler, seed=3, players=5, options={"max_rounds": 2}, rollout_id="w/g0",
                             task_id="werewolf:train:3", iteration=0, sample=0)


@pytest.mark.parametrize("level", [STARTER, *LEVELS, TWO_SEAT, MULTI_TURN])
def test_every_seat_appends_in_every_family(tokenizer: Any, level: str) -> None:
    for family in (f for f in level_families(level) if f not in GAME_FAMILIES):  # games: the test below
        task = synthesize(family, level, 7)
        rollout = play(task, Appending(tokenizer), rollout_id="r", iteration=0, sample=0, max_turns=6)
        assert not rollout.failed, rollout.failed
        counts = seat_counts(rollout)
        assert all(a == c for a, c in counts.values()), (family, level, counts)
        if level != TWO_SEAT:  # two-seat exchanges settle at the finder's first answer: one turn a seat
            assert rollout.append_ratio() == 1.0 and sum(c for _, c in counts.values()) >= 2, (family, counts)


def test_every_werewolf_seat_appends(tokenizer: Any) -> None:
    rollout = werewolf(Appending(tokenizer))
    assert not rollout.failed and rollout.append_ratio() == 1.0
    assert sum(s.append_checked for s in rollout.seats) >= 5
    later = [t for s in rollout.seats for t in s.turns[1:]]
    assert later and all("Rules:" not in t.prompt for t in later), "a later move's message repeats the rules"


def test_a_rerendered_transcript_fails_the_check(tokenizer: Any) -> None:
    """The old path, re-rendering every turn's whole prompt, is measured by the same check: it never appends."""
    game = werewolf(Rerendering(tokenizer))
    episode = play(synthesize("negotiation", "easy", 7), Rerendering(tokenizer), rollout_id="r", iteration=0,
                   sample=0, max_turns=6)
    appending = play(synthesize("negotiation", "easy", 7), Appending(tokenizer), rollout_id="r", iteration=0,
                     sample=0, max_turns=6, transcript="rerender")
    assert game.append_ratio() == episode.append_ratio() == appending.append_ratio() == 0.0


def test_the_appended_prompt_is_the_template_of_the_whole_chat(tokenizer: Any) -> None:
    """Appending renders what the chat template renders for the whole chat, reply and all."""
    chat = SeatChat()
    first = chat_prompt_ids(tokenizer, chat, "You are Ava. Say hello.")
    reply = [int(i) for i in tokenizer("Hello Ben.", add_special_tokens=False)["input_ids"]] + [tokenizer.eos_token_id]
    chat.extend("You are Ava. Say hello.", "Hello Ben.", first, reply)
    second = chat_prompt_ids(tokenizer, chat, "Ben said: hi. Your turn.")
    whole = tokenizer.apply_chat_template(chat.with_user("Ben said: hi. Your turn."), add_generation_prompt=True,
                                          tokenize=False)
    assert tokenizer.decode(second) == whole
    assert next_message_text(tokenizer, "x").startswith(tokenizer.eos_token)


def test_envs_traces_hold_each_seats_one_sequence(tokenizer: Any) -> None:
    env = SocialEnv(["negotiation"], ["easy"], max_turns=6)
    task = synthesize("negotiation", "easy", 7)
    episode = env.run(task, Appending(tokenizer))
    game = env.run(synthesize("werewolf", "easy", 3), Appending(tokenizer))
    for ep in (episode, game):
        assert not ep.failed and ep.traces
        for trace in ep.traces:
            assert math.isclose(trace.reward, ep.rewards[trace.seat]) and trace.trainable
            if not trace.turns:  # killed before its first move
                continue
            assert trace.appended == trace.append_checked == len(trace.turns) - 1
            assert len(trace.spans) == len(trace.turns) == len(trace.rewards) == len(trace.states)
            assert sum(e - s for s, e in trace.spans) == len(trace.logprobs)
            assert trace.spans[-1][1] == len(trace.token_ids) and all(st is not None for st in trace.states)


def test_a_sotopia_scenario_appends(tokenizer: Any) -> None:
    scenario = shipped()[0]
    with FakeOpenAIServer(scripts={"EnvResponse": evaluation([6, 4])}) as server:
        env = SocialEnv([], [], max_turns=6, judge=make_chat_model(server.model_spec))
        episode = env.run_scenario(scenario, Appending(tokenizer))
    assert not episode.failed, episode.failed
    assert [(t.appended, t.append_checked) for t in episode.traces] == [(2, 2), (2, 2)]
    assert [t.reward for t in episode.traces] == [0.6, 0.4]


@pytest.fixture(scope="module")
def tiny_policy(tiny_gguf_llama: Path) -> Any:
    import torch

    from swm.training.config import PolicyConfig
    from swm.training.policy import LoraValueModel

    torch.manual_seed(0)
    # float32: the seat-row and per-turn gradients are compared at rtol 1e-3, an equality of the arithmetic, which
    # bfloat16 autocast (the default on CPUs that have it) rounds differently by row shape
    policy = LoraValueModel.create(PolicyConfig(base=str(tiny_gguf_llama), lora_r=4, lora_alpha=8, max_new_tokens=5,
                                                autocast="off"))
    with torch.no_grad():  # a LoRA that moves the logits, so the update's gradient is not the base's zero B
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    return policy


def test_the_torch_sampler_appends_each_seats_chat(tiny_policy: Any) -> None:
    from swm.selfplay.loop import SeededSampler

    rollout = play(synthesize("negotiation", "easy", 7), SeededSampler(tiny_policy, "k"), rollout_id="r",
                   iteration=0, sample=0, max_turns=4)
    assert not rollout.failed and rollout.append_ratio() == 1.0
    assert sum(s.append_checked for s in rollout.seats) == 2


def test_the_torch_sampler_ends_a_reply_at_a_stop_of_several_tokens(tiny_policy: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The listed form's stop, ``\\n4.``, is three tokens: the reply's tokens end with them, none sampled after."""
    import torch

    tok = tiny_policy.tokenizer
    sampled = tok.encode(" Ann Lee\n2. Bo Ray\n3. Cy Dee\n4. Di Fox\n5. Ed", add_special_tokens=False)
    monkeypatch.setattr(tiny_policy.model, "generate",
                        lambda input_ids, **_: torch.cat([input_ids, torch.tensor([sampled])], dim=1))
    gen = tiny_policy.generate("Tell Bo your friends.", prefill="My friends:\n1.", stop="\n4.")
    said = " Ann Lee\n2. Bo Ray\n3. Cy Dee"
    assert gen.text == "My friends:\n1." + said and len(gen.logprobs) == len(gen.token_ids)
    assert gen.token_ids == tok.encode(said + "\n4.", add_special_tokens=False) == sampled[:len(gen.token_ids)]
    one_line = tiny_policy.generate("Which one?", prefill="ANSWER:", stop="\n")  # a one-token stop, as before
    assert one_line.text == "ANSWER: Ann Lee" and tok.decode(one_line.token_ids) == " Ann Lee\n"


def test_the_torch_sampler_ends_a_reply_at_the_first_of_its_stops_to_complete(tiny_policy: Any,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A list that runs on into the partner's voice ends at its blank line, before item 4, whichever stop is named
    first: the stop's tokens end the reply and none after them is kept (nor trained)."""
    import torch

    tok = tiny_policy.tokenizer
    said = " Ann Lee\n2. Bo Ray\n3. Cy Dee"
    sampled = tok.encode(said + "\n\nBo Ray: My friends:\n1. Di Fox\n4. Ed", add_special_tokens=False)
    monkeypatch.setattr(tiny_policy.model, "generate",
                        lambda input_ids, **_: torch.cat([input_ids, torch.tensor([sampled])], dim=1))
    for stop in (("\n4.", "\n\n", "\nBo Ray:"), ("\nBo Ray:", "\n4.", "\n\n")):
        gen = tiny_policy.generate("Tell Bo your friends.", prefill="My friends:\n1.", stop=stop)
        assert gen.text == "My friends:\n1." + said and len(gen.logprobs) == len(gen.token_ids), stop
        assert gen.token_ids == sampled[:len(gen.token_ids)] and tok.decode(gen.token_ids) == said + "\n\n", stop
    item = tiny_policy.generate("Tell Bo your friends.", prefill="My friends:\n1.", stop=["\nYou:", "\n2."])
    assert item.text == "My friends:\n1. Ann Lee" and tok.decode(item.token_ids) == " Ann Lee\n2."  # a list, too


def test_one_sequence_per_seat_trains_as_its_turns_do(tiny_policy: Any) -> None:
    """Scored once, a seat's sequence gives each turn's log-probabilities, and the same PPO loss and gradient."""
    import torch

    from swm.training.config import PPOConfig
    from swm.training.policy import collate, collate_spans, gather
    from swm.training.ppo import ppo_loss, seat_sample, training_samples, turn_sample
    from swm.training.trajectory import SeatTurn

    p = tiny_policy
    chat = SeatChat()
    turns = []
    for k, message in enumerate(["You are Ava, selling a bike for $500.", "Ben said: 300?", "Ben said: 350, final."]):
        gen = p.generate(message, seed=k, chat=chat)
        chat.extend(message, gen.text, gen.prompt_ids, gen.token_ids)
        n = len(gen.token_ids)
        turns.append(SeatTurn(turn=2 * k, prompt=message, text=gen.text, prompt_ids=gen.prompt_ids,
                              token_ids=gen.token_ids, logprobs=gen.logprobs,
                              advantages=[0.5 - 0.3 * k + 0.01 * i for i in range(n)], returns=[0.1 * k] * n))
    pad = p.tokenizer.pad_token_id
    per_turn = [turn_sample("seller", t) for t in turns]
    seat = seat_sample("seller", turns)
    by_turn = collate([s.prompt_ids for s in per_turn], [s.token_ids for s in per_turn], pad)
    whole = collate_spans([seat.sequence], [seat.targets], pad)
    with torch.no_grad():
        lp_turns, _ = p.score(by_turn)
        lp_seat, _ = p.score(whole)
    flat = [x for row in gather(lp_turns, by_turn) for x in row]
    assert gather(lp_seat, whole)[0] == pytest.approx(flat, abs=1e-4)
    assert flat == pytest.approx([x for t in turns for x in t.logprobs], abs=1e-4)  # the sampler's own

    def loss_and_grad(samples: list[Any]) -> tuple[float, list[Any]]:
        from swm.training.policy import spread

        batch = collate_spans([s.sequence for s in samples], [s.targets for s in samples], pad)
        old, adv, ret = (spread([getattr(s, f) for s in samples], batch) for f in ("old_logprobs", "advantages",
                                                                                   "returns"))
        with torch.no_grad():
            ref, _ = p.score(batch, reference=True)
        for q in p.parameters():
            q.grad = None
        loss, _ = ppo_loss(p, batch, old + 0.05 * adv, ref, adv, ret, PPOConfig(), float(seat.generated))
        loss.backward()
        return float(loss), [q.grad.clone() for q in p.parameters() if q.grad is not None]

    loss_turns, grads_turns = loss_and_grad(per_turn)
    loss_seat, grads_seat = loss_and_grad([seat])
    assert loss_seat == pytest.approx(loss_turns, rel=1e-4, abs=1e-6)
    assert len(grads_seat) == len(grads_turns) > 0
    for a, b in zip(grads_seat, grads_turns, strict=True):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-6)
    rollout = Rollout(rollout_id="r", task_id="t", iteration=0, sample=0,
                      seats=[{"seat": "Ava", "role": "seller", "turns": [t.model_dump() for t in turns]}])
    assert len(training_samples([rollout])) == 1 and len(training_samples([rollout], "turn")) == 3


def test_a_seat_draw_is_pinned_and_cached_after_its_first_turn() -> None:
    from swm.serving import draws

    assert draws.seat_fields(3, first=True, chosen="seat") == {"id_slot": 3, "cache_prompt": False}
    assert draws.seat_fields(3, first=False, chosen="seat") == {"id_slot": 3, "cache_prompt": True}
    assert draws.seat_fields(3, first=False, chosen="fresh") == {"cache_prompt": False}, "fresh: never the cache"
    pins = draws.SlotPins()
    assert [pins.pin("u", 3) for _ in range(4)] == [0, 1, 2, 0] and pins.pin("v", 3) == 0

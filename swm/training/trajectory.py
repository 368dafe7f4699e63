"""The records of self-play: a rollout (one episode of a task), its seats' trajectories and their turns.

A seat's trajectory holds only the turns that seat generated: the prompt it saw (where the
others' words are context), its generated token ids and their log-probabilities under the
policy that sampled them. The PPO loss reads ``token_ids`` of these turns and nothing else, so
another seat's tokens never enter a seat's loss.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Generation(BaseModel):
    """One sampled reply: its text, the prompt and generated token ids, and their log-probabilities."""

    model_config = ConfigDict(extra="forbid")

    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float] = Field(description="log π(token | context) under the sampling policy, one per token; empty "
                                  "when the sampler leaves them to the update (`PolicyConfig.score_old`)")
    served_logprobs: list[float] | None = Field(None, description="the server's own log-probs (at temperature 1) of "
                                                "the same tokens: of every token, or of the first ones, where the "
                                                "server's tokens are these (when asked for and comparable)")


class SeatTurn(BaseModel):
    """One turn a seat generated, with its reward and advantages once scored."""

    model_config = ConfigDict(extra="forbid")

    turn: int = Field(description="the turn's index in the episode")
    prompt: str = Field(description="what the seat was given this turn: the whole prompt, or with an append-only "
                        "chat the message its chat grew by (`swm.training.transcript`)")
    text: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    served_logprobs: list[float] | None = Field(None, description="the server's own log-probs (temperature 1) of the "
                                                "first of ``token_ids`` (a runtime-LoRA server is asked for them on "
                                                "the rollout's own requests): checked against the torch policy's "
                                                "where π_old is scored (`swm.serving.verify.check_sampled`)")
    reward: float = 0.0
    filtered: str | None = Field(None, description="why the quality filter zeroed this turn's reward")
    judge: float | None = Field(None, description="the per-turn judge score in [0, 1], when a judge is mixed in")
    belief: float | None = Field(None, description="the partner's belief gain in nats after this message "
                                 "(`swm.selfplay.belief`), when it is mixed in: its own, also in the shuffled-turn "
                                 "control, whose reward mixes in another turn's")
    state: dict[str, Any] | None = Field(None, description="the social state after the turn: a game's SocialStep "
                                         "of the move, a task's checker verdict on the transcript so far")
    values: list[float] = Field(default_factory=list, description="value head per generated token (hierarchical)")
    advantages: list[float] = Field(default_factory=list)
    returns: list[float] = Field(default_factory=list)


class SeatTrajectory(BaseModel):
    """One seat's own turns in one rollout."""

    model_config = ConfigDict(extra="forbid")

    seat: str
    role: str
    turns: list[SeatTurn] = Field(default_factory=list)
    outcome: float = 0.0
    violations: list[str] = Field(default_factory=list)
    appended: int = Field(0, description="turns whose prompt extended the previous turn's prompt and reply, token "
                          "for token (`swm.training.transcript.append_counts`)")
    append_checked: int = Field(0, description="turns checked for it: every turn after the first that has token ids")


class Rollout(BaseModel):
    """One episode of a task played by one policy in every seat; ``failed`` rollouts are dropped, not scored."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    task_id: str
    family: str = Field("", description="the task family or game (the role-conditioned baseline's key)")
    iteration: int
    sample: int
    seats: list[SeatTrajectory] = Field(default_factory=list)
    order: list[str] = Field(default_factory=list, description="speaker of each episode turn")
    end_reason: str = ""
    failed: str | None = None
    verdict: dict[str, object] | None = None
    tokens: int = 0
    seconds: float = 0.0
    sampler: str = Field("torch", description="how the turns were sampled: 'torch', or the llama.cpp spec "
                         "(embedded:…,lora=…/adapter.gguf) that served the checkpoint")
    journal_turns: int = Field(0, description="turns replayed from the turn journal after a kill (`swm.selfplay."
                               "journal`): not sampled again; with a served `seat` draw the turns after them were "
                               "drawn from a fresh slot, not the seeded draw of an uninterrupted run")
    reseeded_turns: int = Field(0, description="seat turns drawn after the embedded server was started again "
                                "mid-rollout (`seat` draws, `swm.selfplay.served.ServedSampler.note_reseeded`): "
                                "their context is the same, their draw not the seeded one of an uninterrupted run")

    def seat(self, name: str) -> SeatTrajectory:
        return next(s for s in self.seats if s.seat == name)

    def append_ratio(self) -> float | None:
        """The share of the seats' checked turns whose prompt extended the previous one (None: none checked)."""
        checked = sum(s.append_checked for s in self.seats)
        return sum(s.appended for s in self.seats) / checked if checked else None

    def transcript(self) -> list[tuple[str, str]]:
        """Return (speaker, text) per episode turn, in order."""
        by_turn = {t.turn: (s.seat, t.text) for s in self.seats for t in s.turns}
        return [by_turn[i] for i in sorted(by_turn)]

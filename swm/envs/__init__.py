"""swm's tasks as environments of the field's RL engines: thin adapters over swm's generator, checkers and moderator.

* `swm.envs.grpo` — decisions as a TRL ``GRPOTrainer`` environment (one seat learns; the state and the
  partner's message are code): a dataset of decision tasks and a reward function that runs swm's checker;
* `swm.envs.seats` — `SocialEnv`, an engine-neutral multi-seat environment (one policy in every seat, a
  reward per seat) over decisions, two-turn tasks, episodes and Werewolf, and `ChatSampler`, a policy
  behind any OpenAI-compatible server;
* `swm.envs.verifiers_env` — the ``swm-social`` environment of verifiers (prime-rl trains on it): a taskset of
  swm's tasks and SOTOPIA scenarios and an ``Env`` that plays one model in every seat through `SocialEnv`
  (the ``[verifiers]`` extra; verifiers loads it by its id, ``swm-social``, from the top-level `swm_social`).

No rule lives here: tasks come from `swm.tasks.synthesize`, verdicts from `swm.tasks.check`, games from
`swm.games` and rewards from `swm.selfplay.rewards`. See docs/scaling.md for which engine to use for what.
"""

"""Training, below both learning loops: every weight update swm makes lives here.

* `swm.training.base` — the one base loader (`load_base`: local checkpoint, GGUF, or the embedded SmolLM2);
* `swm.training.trl_update` — TRL's SFT, DPO and KTO on a LoRA adapter (`train_adapter`), written for serving;
* `swm.training.policy`, `swm.training.ppo` — the LoRA policy with a value head and the PPO-clip update;
* `swm.training.advantages` — the hierarchical (turn- then token-level GAE) and group-normalised estimators;
* `swm.training.trajectory`, `swm.training.config` — rollouts as trainers read them, and their settings;
* `swm.training.stats` — `TrainStats`, what every training run reports.

The loops keep their orchestration: the lifelong loop (`swm.lifelong`, `swm learn`) and self-play
(`swm.selfplay`, `swm selfplay`) import from here, never the reverse. The torch modules load only
when a run trains.
"""

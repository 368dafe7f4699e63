"""swm-social: swm's social tasks and Werewolf as a verifiers environment (see taskset.py and docs/scaling.md)."""

from swm_social.taskset import SwmSocialEnv, SwmSocialTaskset

__all__ = ["SwmSocialEnv", "SwmSocialTaskset"]

"""swm-social: the name verifiers loads swm's environment by (``vf-eval swm-social``, ``--env.taskset.id swm-social``).

verifiers imports an environment's id as a top-level module (``swm-social`` → ``swm_social``) and takes the
`Taskset` and `Env` subclasses it exports; the adapter itself is `swm.envs.verifiers_env`. Needs the
``[verifiers]`` extra.
"""

from swm.envs.verifiers_env import SwmSocialEnv, SwmSocialTaskset

__all__ = ["SwmSocialEnv", "SwmSocialTaskset"]

"""Moved to ``rllib_gpuenv.jax_envs.gymnax_envs`` (gymnax's envs; Brax's sit beside them in
``rllib_gpuenv.jax_envs``); this name stays importable, as the README once named it."""

import sys

from rllib_gpuenv.jax_envs import gymnax_envs as _moved

sys.modules[__name__] = _moved

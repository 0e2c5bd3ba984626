"""``env.observation[...]`` and ``env.reward[...]``: CompilerGym 0.2.5's views over the observation and reward
spaces of an environment, with their ``spaces`` dictionaries and one method per space (``env.observation.Ir()``)."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Optional

from gymnasium import spaces

from behavioral_pq.env.compiler_gym.spaces import Reward
from behavioral_pq.errors import UnknownSpaceError, UnsupportedSpaceError


def _missing(name) -> UnknownSpaceError:
    """A view's missing key, printed as a dictionary's KeyError is (the name quoted: ``'Irr'``), as CompilerGym's
    views raise it."""
    return UnknownSpaceError(repr(name))


class ObservationSpaceSpec:
    """An observation space: its ``id``, ``index``, ``space``, ``deterministic``, ``platform_dependent`` and
    ``default_value`` (what a failed step returns). ``translate`` and ``to_string`` as in CompilerGym."""

    def __init__(self, id: str, index: int, space: spaces.Space, deterministic: bool, platform_dependent: bool,
                 default_value: Any = None, translate: Optional[Callable[[Any], Any]] = None,
                 to_string: Callable[[Any], str] = str, base_id: Optional[str] = None):
        self.id = id
        self.index = index
        self.space = space
        self.deterministic = deterministic
        self.platform_dependent = platform_dependent
        self.default_value = default_value
        self.translate = translate or (lambda value: value)
        self.to_string = to_string
        self.base_id = base_id

    def make_derived_space(self, id: str, translate: Callable[[Any], Any], space: Optional[spaces.Space] = None,
                           deterministic: Optional[bool] = None, default_value: Any = None,
                           platform_dependent: Optional[bool] = None,
                           to_string: Optional[Callable[[Any], str]] = None) -> "ObservationSpaceSpec":
        """A space computed as ``translate(this space's value)``."""
        return ObservationSpaceSpec(
            id, self.index, space or self.space, self.deterministic if deterministic is None else deterministic,
            self.platform_dependent if platform_dependent is None else platform_dependent,
            translate(self.default_value) if default_value is None else default_value, translate,
            to_string or self.to_string, base_id=self.id)

    def __hash__(self) -> int:
        return self.index

    def __repr__(self) -> str:
        return f"ObservationSpaceSpec({self.id})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            return self.id == other
        if isinstance(other, ObservationSpaceSpec):
            return (self.id == other.id and self.index == other.index and self.space == other.space
                    and self.platform_dependent == other.platform_dependent
                    and self.deterministic == other.deterministic)
        return False


class ObservationView:
    """``view["Autophase"]``: an observation of the current state, computed once per module. ``spaces`` maps each
    name to its :class:`ObservationSpaceSpec`; ValueError without any."""

    def __init__(self, env, specs: List[ObservationSpaceSpec]):
        if not specs:
            raise ValueError("No observation spaces")
        self._env = env
        self.spaces: Dict[str, ObservationSpaceSpec] = {}
        for spec in specs:
            self._add_space(spec)

    def __getitem__(self, observation_space: str):
        try:
            spec = self._env._observation_spec(observation_space)
        except UnsupportedSpaceError:
            raise
        except UnknownSpaceError:
            raise _missing(observation_space) from None
        return self._env._observe(spec)

    def add_derived_space(self, id: str, base_id: str, **kwargs) -> None:
        """Add the space ``id`` computed from ``base_id``'s value by ``translate`` (keywords as
        :meth:`ObservationSpaceSpec.make_derived_space`)."""
        self._add_space(self.spaces[base_id].make_derived_space(id=id, **kwargs))

    def _add_space(self, spec: ObservationSpaceSpec) -> None:
        self.spaces[spec.id] = spec
        setattr(self, spec.id, lambda: self[spec.id])

    def __repr__(self) -> str:
        return f"ObservationView[{', '.join(sorted(self.spaces))}]"


class RewardView:
    """``view["IrInstructionCount"]``: the reward since that space's last update (a reward is stateful within an
    episode, as in CompilerGym). ``spaces`` maps each name to its :class:`Reward`."""

    def __init__(self, rewards: List[Reward], observation_view: ObservationView):
        self.spaces: Dict[str, Reward] = {}
        self.previous_action = None
        self._observation_view = observation_view
        for reward in rewards:
            self._add_space(reward)

    def __getitem__(self, reward_space: str) -> float:
        if not self.spaces:
            raise ValueError("No reward spaces")
        if reward_space not in self.spaces:
            raise _missing(reward_space)
        space = self.spaces[reward_space]
        observations = [self._observation_view[name] for name in space.observation_spaces]
        return float(space.update(self.previous_action, observations, self._observation_view))

    def reset(self, benchmark, observation_view: ObservationView) -> None:
        self.previous_action = None
        for space in self.spaces.values():
            space.reset(benchmark=benchmark, observation_view=observation_view)

    def add_space(self, space: Reward) -> None:
        """Add (or, with a warning, replace) a reward space."""
        if space.name in self.spaces:
            warnings.warn(f"replacing the existing reward space {space.name!r}", stacklevel=2)
        self._add_space(space)

    def _add_space(self, space: Reward) -> None:
        self.spaces[space.name] = space
        setattr(self, space.name, lambda: self[space.name])


__all__ = ["ObservationSpaceSpec", "ObservationView", "RewardView"]

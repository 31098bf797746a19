"""Multi-agent splits of Brax robots: validation, the scenes, the model-derived default and JaxMARL's tables.

A split gives each agent ``action_indices`` (which entries of the robot's action vector it writes) and
``observation_indices`` (which entries of the robot's observation vector it reads).

The default mapping of a scene is derived from the robot's MuJoCo model, never typed by hand:

- **agents**: the scene's rule partitions the actuated joints (``"limbs"``: one agent per subtree hanging off
  the root body; ``"joints"``: one agent per actuator; or named subtrees for one agent and the rest for
  another). Agents are numbered by their first action index, so every scene keeps JaxMARL's action partition.
- **observations**: the root body's state, plus position and velocity of the agent's own joints and of the
  joints next to them (two joints are neighbours when they touch a common body; a joint touches the body it
  moves and that body's parent), plus the per-body and per-dof features of its own bodies and dofs where the
  robot's observation has them (humanoid). Which observation entry holds which joint comes from
  ``_ROBOT_OBS``, a short description of each robot's ``_get_obs`` that is checked against the observation
  size at construction and against the simulator's values in the tests.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["SCENES", "AgentMapping", "RobotModel", "Scene", "check_mapping", "jaxmarl_mapping", "model_mapping",
           "resolve_mapping", "validate_mapping"]

Indices = dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class AgentMapping:
    """Per-agent indices into the robot's action and observation vectors (agent order = data order)."""

    action_indices: Indices
    observation_indices: Indices

    @property
    def agent_names(self) -> list[str]:
        return list(self.action_indices)


@dataclass(frozen=True)
class Scene:
    """A named multi-agent split of a Brax robot (JaxMARL's scene names).

    Attributes:
        robot: the Brax env name.
        split: ``"limbs"``, ``"joints"``, or a tuple of body-name tuples, one per agent: the agent owns the
            subtrees of those bodies; an empty tuple owns every actuated joint no other agent claims.
    """

    robot: str
    split: str | tuple[tuple[str, ...], ...]


SCENES: dict[str, Scene] = {
    "ant_4x2": Scene("ant", "limbs"),
    "halfcheetah_6x1": Scene("halfcheetah", "joints"),
    "hopper_3x1": Scene("hopper", "joints"),
    "walker2d_2x3": Scene("walker2d", "limbs"),
    "humanoid_9-8": Scene("humanoid", ((), ("right_thigh", "left_thigh"))),
}


@dataclass(frozen=True)
class _RobotObs:
    """A robot's observation: ``q[q_skip:]``, then ``qd``, then per-body feature blocks, then per-dof blocks."""

    q_skip: int
    body_features: tuple[int, ...] = ()
    dof_features: int = 0


# What each robot's ``_get_obs`` returns (brax/envs/<robot>.py), with exclude_current_positions_from_observation
# (the default) dropping the first q_skip positions. Humanoid appends per-body com inertia (10) and com velocity
# (6) for every body but the world, then the actuator force on every dof.
_ROBOT_OBS: dict[str, _RobotObs] = {
    "ant": _RobotObs(q_skip=2),
    "halfcheetah": _RobotObs(q_skip=1),
    "hopper": _RobotObs(q_skip=1),
    "walker2d": _RobotObs(q_skip=1),
    "humanoid": _RobotObs(q_skip=2, body_features=(10, 6), dof_features=1),
}

_FREE, _BALL = 0, 1  # mujoco.mjtJoint values
_QPOS_SIZE = {_FREE: 7, _BALL: 4}
_QVEL_SIZE = {_FREE: 6, _BALL: 3}


@dataclass(frozen=True)
class RobotModel:
    """The parts of a MuJoCo model a split needs, read from ``sys.mj_model`` (body 0 is the world)."""

    joint_names: tuple[str, ...]
    joint_body: tuple[int, ...]
    joint_qpos: tuple[tuple[int, ...], ...]
    joint_qvel: tuple[tuple[int, ...], ...]
    body_names: tuple[str, ...]
    body_parent: tuple[int, ...]
    actuator_joint: tuple[int, ...]
    nq: int
    nv: int

    @classmethod
    def from_mj_model(cls, m) -> RobotModel:
        import mujoco

        def name(kind, i):
            return mujoco.mj_id2name(m, kind, i) or f"{kind.name.lower()[6:]}_{i}"

        if m.nu and not np.all(m.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT):
            raise ValueError("only joint actuators can be split between agents; this model drives tendons or sites")
        qpos, qvel = [], []
        for j in range(m.njnt):
            kind = int(m.jnt_type[j])
            qpos.append(tuple(range(m.jnt_qposadr[j], m.jnt_qposadr[j] + _QPOS_SIZE.get(kind, 1))))
            qvel.append(tuple(range(m.jnt_dofadr[j], m.jnt_dofadr[j] + _QVEL_SIZE.get(kind, 1))))
        return cls(
            joint_names=tuple(name(mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(m.njnt)),
            joint_body=tuple(int(b) for b in m.jnt_bodyid),
            joint_qpos=tuple(qpos),
            joint_qvel=tuple(qvel),
            body_names=tuple(name(mujoco.mjtObj.mjOBJ_BODY, b) for b in range(m.nbody)),
            body_parent=tuple(int(p) for p in m.body_parentid),
            actuator_joint=tuple(int(j) for j in m.actuator_trnid[:, 0]),
            nq=int(m.nq),
            nv=int(m.nv),
        )

    @property
    def root_body(self) -> int:
        """The body the first joint moves whose parent is the world (the torso)."""
        return next(b for b in self.joint_body if self.body_parent[b] == 0)

    def ancestors(self, body: int) -> list[int]:
        """``body`` and its ancestors up to (not including) the world."""
        chain = []
        while body != 0:
            chain.append(body)
            body = self.body_parent[body]
        return chain

    def touches(self, joint: int) -> set[int]:
        body = self.joint_body[joint]
        return {body, self.body_parent[body]}


def _obs_index(model: RobotModel, robot_obs: _RobotObs, obs_size: int, robot: str) -> dict[str, dict]:
    """Where each joint's positions / velocities, each body's and each dof's features sit in the observation."""
    n_pos = model.nq - robot_obs.q_skip
    n_body = len(model.body_names) - 1
    expected = n_pos + model.nv + n_body * sum(robot_obs.body_features) + model.nv * robot_obs.dof_features
    if expected != obs_size:
        raise ValueError(
            f"the {robot!r} observation has {obs_size} entries but its layout (q[{robot_obs.q_skip}:], qd, "
            f"{robot_obs.body_features} per body, {robot_obs.dof_features} per dof) gives {expected}; a changed Brax "
            f"observation or an env keyword (e.g. exclude_current_positions_from_observation) breaks the "
            f"model-derived mapping: pass mapping='jaxmarl' or explicit indices instead"
        )
    pos = {j: tuple(i - robot_obs.q_skip for i in q if i >= robot_obs.q_skip) for j, q in enumerate(model.joint_qpos)}
    vel = {j: tuple(n_pos + i for i in v) for j, v in enumerate(model.joint_qvel)}
    body, offset = {b: [] for b in range(1, n_body + 1)}, n_pos + model.nv
    for size in robot_obs.body_features:
        for b in range(1, n_body + 1):
            body[b].extend(range(offset + (b - 1) * size, offset + b * size))
        offset += n_body * size
    per_dof = robot_obs.dof_features
    dof = {k: tuple(offset + k * per_dof + f for f in range(per_dof)) for k in range(model.nv)}
    return {"pos": pos, "vel": vel, "body": body, "dof": dof}


def partition(model: RobotModel, split) -> list[set[int]]:
    """Actuated joints per agent, agents ordered by their first action index."""
    actuated = sorted(set(model.actuator_joint))
    root = model.root_body
    if split == "joints":
        groups: dict[object, set[int]] = {j: {j} for j in actuated}
    elif split == "limbs":
        groups = {}
        for j in actuated:
            chain = model.ancestors(model.joint_body[j])
            limb = chain[chain.index(root) - 1] if root in chain and chain[0] != root else root
            groups.setdefault(limb, set()).add(j)
    else:
        by_name = {n: b for b, n in enumerate(model.body_names)}
        claims = {}
        for agent, bodies in enumerate(split):
            for body_name in bodies:
                if body_name not in by_name:
                    raise ValueError(f"split names body {body_name!r}, not in the model; bodies: {model.body_names}")
                claims[by_name[body_name]] = agent
        rest = next((a for a, bodies in enumerate(split) if not bodies), None)
        groups = {}
        for j in actuated:
            owner = next((claims[b] for b in model.ancestors(model.joint_body[j]) if b in claims), rest)
            if owner is None:
                raise ValueError(f"joint {model.joint_names[j]!r} is claimed by no agent of split {split}")
            groups.setdefault(owner, set()).add(j)
    first_action = {
        key: min(a for a, j in enumerate(model.actuator_joint) if j in joints) for key, joints in groups.items()
    }
    return [groups[key] for key in sorted(groups, key=first_action.__getitem__)]


def model_mapping(scene: str, model: RobotModel, obs_size: int, exclude_current_positions: bool = True) -> AgentMapping:
    """The default split of ``scene`` derived from the robot model (see the module docstring)."""
    spec = SCENES[scene]
    robot_obs = _ROBOT_OBS[spec.robot]
    if not exclude_current_positions:
        robot_obs = _RobotObs(0, robot_obs.body_features, robot_obs.dof_features)
    where = _obs_index(model, robot_obs, obs_size, spec.robot)
    root = model.root_body
    root_joints = [j for j, b in enumerate(model.joint_body) if b == root]
    root_obs = [i for j in root_joints for i in (*where["pos"][j], *where["vel"][j])]
    actuated = set(model.actuator_joint)
    action_indices, observation_indices = {}, {}
    for k, joints in enumerate(partition(model, spec.split)):
        touched = set().union(*(model.touches(j) for j in joints))
        near = {j for j in actuated if model.touches(j) & touched} | joints
        obs = set(root_obs)
        for j in near:
            obs.update(where["pos"][j], where["vel"][j])
        for j in joints:
            obs.update(where["body"].get(model.joint_body[j], ()))
            for dof in model.joint_qvel[j]:
                obs.update(where["dof"][dof])
        name = f"agent_{k}"
        action_indices[name] = tuple(a for a, j in enumerate(model.actuator_joint) if j in joints)
        observation_indices[name] = tuple(sorted(obs))
    return AgentMapping(action_indices, observation_indices)


def _ranges(*items: int | tuple[int, int]) -> tuple[int, ...]:
    """Expand JaxMARL's notation: ints, and ``(a, b)`` for the inclusive range a..b."""
    return tuple(i for item in items for i in (range(item[0], item[1] + 1) if isinstance(item, tuple) else (item,)))


# JaxMARL's tables (jaxmarl/environments/mabrax/mappings.py), verbatim, including the indices past Brax's
# observation (humanoid's 376-entry layout, halfcheetah's index 17) that JAX clamps to the last entry.
_JAXMARL: dict[str, AgentMapping] = {
    "ant_4x2": AgentMapping(
        {"agent_0": (0, 1), "agent_1": (2, 3), "agent_2": (4, 5), "agent_3": (6, 7)},
        {
            "agent_0": _ranges((0, 5), 6, 7, 9, 11, (13, 18), 19, 20),
            "agent_1": _ranges((0, 5), 7, 8, 9, 11, (13, 18), 21, 22),
            "agent_2": _ranges((0, 5), 7, 9, 10, 11, (13, 18), 23, 24),
            "agent_3": _ranges((0, 5), 7, 9, 11, 12, (13, 18), 25, 26),
        },
    ),
    "halfcheetah_6x1": AgentMapping(
        {f"agent_{i}": (i,) for i in range(6)},
        {
            "agent_0": _ranges((1, 2), 3, 4, 6, (9, 11), 12),
            "agent_1": _ranges((1, 2), 3, 4, 5, (9, 11), 13),
            "agent_2": _ranges((1, 2), 4, 5, (9, 11), 14),
            "agent_3": _ranges((1, 2), 3, 6, 7, (9, 11), 15),
            "agent_4": _ranges((1, 2), 6, 7, 8, (9, 11), 16),
            "agent_5": _ranges((1, 2), 7, 8, (9, 11), 17),
        },
    ),
    "hopper_3x1": AgentMapping(
        {f"agent_{i}": (i,) for i in range(3)},
        {
            "agent_0": _ranges((0, 1), 2, 3, (5, 7), 8),
            "agent_1": _ranges((0, 1), 2, 3, 4, (5, 7), 9),
            "agent_2": _ranges((0, 1), 3, 4, (5, 7), 10),
        },
    ),
    "humanoid_9-8": AgentMapping(
        {"agent_0": (0, 1, 2, 11, 12, 13, 14, 15, 16), "agent_1": (3, 4, 5, 6, 7, 8, 9, 10)},
        {
            "agent_0": _ranges((0, 10), (12, 14), (16, 30), (39, 44), (55, 94), (115, 124), (145, 184), (191, 214),
                               (227, 232), (245, 277), (286, 291), (298, 321), (334, 339), (352, 375)),
            "agent_1": _ranges((0, 15), (22, 27), (31, 38), (85, 144), (209, 244), (269, 274), (278, 285), (316, 351)),
        },
    ),
    "walker2d_2x3": AgentMapping(
        {"agent_0": (0, 1, 2), "agent_1": (3, 4, 5)},
        {"agent_0": _ranges(0, (2, 5), (8, 9), (11, 13)), "agent_1": _ranges(0, 2, (5, 9), (14, 16))},
    ),
}


def jaxmarl_mapping(scene: str) -> AgentMapping:
    """JaxMARL's tables for ``scene``, unvalidated (``validate_mapping(..., clamp=True)`` reproduces JAX)."""
    return _JAXMARL[scene]


def _as_indices(what: str, agent: object, values: object) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not (isinstance(values, Sequence) or hasattr(values, "tolist")):
        raise TypeError(f"{what}[{agent!r}] must be a sequence of ints, got {values!r}")
    values = np.asarray(values.tolist() if hasattr(values, "tolist") else list(values))
    if values.ndim != 1 or (values.size and values.dtype.kind not in "iu"):
        raise TypeError(f"{what}[{agent!r}] must be a flat sequence of ints, got {values.tolist()!r}")
    return tuple(int(v) for v in values)


def validate_mapping(
    action_indices: Mapping[str, Sequence[int]],
    observation_indices: Mapping[str, Sequence[int]],
    action_size: int,
    observation_size: int,
    *,
    clamp: bool = False,
    label: str = "",
) -> AgentMapping:
    """Check a split and return it as tuples.

    Every action dimension must be owned by exactly one agent, every index must be in range and no agent may be
    empty. With ``clamp=True`` observation indices past the end are allowed and mapped to the last entry, as JAX
    does for out-of-bounds gathers; each agent that reads one gets a warning.

    Raises:
        TypeError: not dicts of int sequences.
        ValueError: the two dicts name different agents; an empty agent; an index out of range; an action
            dimension owned twice or by nobody.
    """
    for what, table in (("action_indices", action_indices), ("observation_indices", observation_indices)):
        if not isinstance(table, Mapping) or not table:
            raise TypeError(f"{what} must be a non-empty dict of agent name -> indices, got {table!r}")
        for agent in table:
            if not isinstance(agent, str) or not agent:
                raise TypeError(f"{what} keys must be agent names (non-empty str), got {agent!r}")
    if list(action_indices) != list(observation_indices):
        missing = [a for a in action_indices if a not in observation_indices]
        extra = [a for a in observation_indices if a not in action_indices]
        raise ValueError(
            f"action_indices and observation_indices must name the same agents in the same order; "
            f"only in action_indices: {missing}, only in observation_indices: {extra}"
            + ("" if missing or extra else f"; orders differ: {list(action_indices)} vs {list(observation_indices)}")
        )
    actions: Indices = {}
    owner: dict[int, str] = {}
    for agent, values in action_indices.items():
        idx = _as_indices("action_indices", agent, values)
        if not idx:
            raise ValueError(f"agent {agent!r} has no action indices; every agent must drive at least one action dim")
        for i in idx:
            if not 0 <= i < action_size:
                raise ValueError(
                    f"action_indices[{agent!r}] holds {i}, out of range: outside the robot's action dims "
                    f"[0, {action_size})"
                )
            if i in owner:
                who = "twice by" if owner[i] == agent else f"by both {owner[i]!r} and"
                raise ValueError(f"action dim {i} is owned {who} {agent!r} (the action indices overlap); each "
                                 f"action dim needs exactly one owner")
            owner[i] = agent
        actions[agent] = idx
    orphans = [i for i in range(action_size) if i not in owner]
    if orphans:
        raise ValueError(
            f"Missing indices: action dims {orphans} are owned by no agent; add them to an agent's action_indices "
            f"(the robot has {action_size} action dims)"
        )
    observations: Indices = {}
    for agent, values in observation_indices.items():
        idx = _as_indices("observation_indices", agent, values)
        if not idx:
            raise ValueError(f"agent {agent!r} has no observation indices; every agent must observe something")
        low = [i for i in idx if i < 0]
        high = [i for i in idx if i >= observation_size]
        if low or (high and not clamp):
            bad = (low or high)[0]
            raise ValueError(
                f"observation_indices[{agent!r}] holds {bad}, out of range: outside the robot's observation "
                f"[0, {observation_size})"
            )
        if high:
            warnings.warn(
                f"{label or 'mapping'}: {agent} reads {len(high)} observation indices >= {observation_size} "
                f"(e.g. {high[:3]}), past the robot's observation; like JAX in JaxMARL they read entry "
                f"{observation_size - 1} instead. mapping=None gives the model-derived mapping",
                UserWarning,
                stacklevel=4,
            )
            idx = tuple(min(i, observation_size - 1) for i in idx)
        observations[agent] = idx
    return AgentMapping(actions, observations)


def check_mapping(name: str, scene: Scene | None, mapping) -> None:
    """Raise ValueError for a ``mapping`` argument of ``BraxEnv`` that is none of the accepted forms."""
    if isinstance(mapping, Mapping):
        if set(mapping) != {"action_indices", "observation_indices"}:
            raise ValueError(
                f"a mapping dict needs exactly the keys 'action_indices' and 'observation_indices', "
                f"got {sorted(mapping)}"
            )
    elif mapping not in (None, "jaxmarl"):
        raise ValueError(
            f"mapping={mapping!r}: expected None (the model-derived split), 'jaxmarl' or a dict with "
            f"'action_indices' and 'observation_indices'"
        )
    elif mapping == "jaxmarl" and scene is None:
        raise ValueError(f"mapping='jaxmarl' needs a scene ({', '.join(SCENES)}); {name!r} is a Brax env")


def resolve_mapping(name: str, scene: Scene | None, mapping, action_size: int, obs_size: int | None,
                    derive: Callable[[], AgentMapping]) -> tuple:
    """The split's ``(action_indices, observation_indices)`` (``(None, None)`` for none) of a checked
    ``mapping``; ``derive()`` gives the model-derived mapping of a scene."""
    if isinstance(mapping, Mapping):
        return mapping["action_indices"], mapping["observation_indices"]
    if scene is None:
        return None, None
    if mapping == "jaxmarl":
        table = jaxmarl_mapping(name)
        clamped = validate_mapping(table.action_indices, table.observation_indices, action_size, obs_size,
                                   clamp=True, label=f"brax/{name} mapping='jaxmarl'")
        return clamped.action_indices, clamped.observation_indices
    split = derive()
    return split.action_indices, split.observation_indices

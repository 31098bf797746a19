"""One rank of ``examples/mappo.py`` on the test envs, recording what tests/test_distributed.py compares.

    torchrun --standalone --nproc_per_node 2 tests/mappo_rank.py RECORD_DIR MAPPO_ARGS...

Each rank writes ``RECORD_DIR/rank<r>.json``: after every update, a digest of all parameters, the frames of
the rank's batch and a digest of its observations.
"""

import hashlib
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]

import mappo  # noqa: E402
from envs import Drift, PredatorPreyCount  # noqa: E402

import marl_envs  # noqa: E402
from marl_envs import distributed  # noqa: E402


def digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main(record: Path, argv: list[str]) -> None:
    marl_envs.register("test/drift", Drift)
    marl_envs.register("test/predator_prey", PredatorPreyCount)
    updates = []

    def callback(iteration, data, loss_fn):
        observations = [data.get(key) for key in data.keys(True, True) if "observation" in key]
        updates.append({"iteration": iteration, "params": digest(loss_fn.parameters()), "frames": data.numel(),
                        "observations": digest(observations)})

    summary = mappo.train(mappo.parse_args(argv), callback=callback)
    info = distributed.rank_info()
    record.mkdir(parents=True, exist_ok=True)
    result = {"rank": info.rank, "world_size": info.world_size, "updates": updates, "summary": summary}
    (record / f"rank{info.rank}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(Path(sys.argv[1]), sys.argv[2:])

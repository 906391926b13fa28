"""Rank discovery without torch.distributed: the launcher's environment, overrides, and PP/TP
ranks derived in SGLang's layout (TP innermost)."""

from __future__ import annotations

import pytest

from pptrace.record.ranks import discover_rank

# (overrides, environment) -> (rank, world, pp_rank, pp_size, tp_rank, tp_size)
CASES = [
    ({}, {}, (None, None, None, None, None, None)),
    ({}, {"RANK": "3", "WORLD_SIZE": "4"}, (3, 4, None, None, None, None)),
    ({"pp_size": 4}, {"RANK": "3", "WORLD_SIZE": "4"}, (3, 4, 3, 4, 0, 1)),
    ({"pp_size": 2, "tp_size": 2}, {"RANK": "3", "WORLD_SIZE": "4"}, (3, 4, 1, 2, 1, 2)),
    ({"tp_size": 2}, {"RANK": "2", "WORLD_SIZE": "8"}, (2, 8, 1, 4, 0, 2)),
    ({"pp_size": 3}, {"RANK": "1", "WORLD_SIZE": "4"}, (1, 4, None, 3, None, None)),  # no fit
    ({"pp_rank": 0, "pp_size": 2}, {"RANK": "3", "WORLD_SIZE": "4"}, (3, 4, 0, 2, 1, 2)),
    ({}, {"LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
     (1, 2, None, None, None, None)),
    ({}, {"LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"},  # two nodes: unknown
     (None, 4, None, None, None, None)),
    ({"rank": 5}, {"RANK": "1"}, (5, None, None, None, None, None)),
    ({"pp_size": 1}, {}, (None, None, 0, 1, None, None)),
]


@pytest.mark.parametrize(("overrides", "env", "want"), CASES)
def test_rank_discovery(overrides: dict[str, int], env: dict[str, str],
                        want: tuple[int | None, ...]) -> None:
    info, final = discover_rank(overrides, env)
    got = (info.rank, info.world_size, info.pp_rank, info.pp_size, info.tp_rank, info.tp_size)
    assert got == want
    assert final is False  # torch.distributed is not up in this process
    assert info.pid > 0 and info.host


def test_the_engine_s_own_groups_win_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    import types

    class Group:
        def __init__(self, rank: int, size: int) -> None:
            self.rank_in_group, self.world_size = rank, size

    state = types.ModuleType("sglang.srt.distributed.parallel_state")
    state.get_pp_group = lambda: Group(2, 4)  # type: ignore[attr-defined]
    state.get_tp_group = lambda: Group(1, 2)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, state.__name__, state)
    info, _ = discover_rank({}, {"RANK": "5", "WORLD_SIZE": "8"})
    assert (info.rank, info.pp_rank, info.pp_size, info.tp_rank, info.tp_size) == (5, 2, 4, 1, 2)
    info, _ = discover_rank({"pp_rank": 0}, {"RANK": "5", "WORLD_SIZE": "8"})
    assert info.pp_rank == 0  # an explicit override wins over the engine

"""Which jobs to ask about this round, when a backend must be asked one job at a time and only
so many may be asked per round (SageMaker has no batch describe): the least recently asked
first, so every job is reached within ceil(jobs / budget) rounds, and a new job at once."""

from __future__ import annotations

from collections.abc import Sequence


class Rotation:
    def __init__(self, budget: int) -> None:
        if budget < 1:
            raise ValueError(f"a budget of at least 1 per round, got {budget}")
        self.budget = budget
        self._round = 0
        self._asked: dict[str, int] = {}  # id -> the round it was last picked in

    def pick(self, ids: Sequence[str]) -> list[str]:
        """At most `budget` of `ids`: never asked first, then the longest unasked, ties in the
        order given. Ids not passed are forgotten (their jobs have ended)."""
        self._round += 1
        live = set(ids)
        self._asked = {i: r for i, r in self._asked.items() if i in live}
        order = sorted(range(len(ids)), key=lambda n: (self._asked.get(ids[n], 0), n))
        chosen = [ids[n] for n in order[: self.budget]]
        for i in chosen:
            self._asked[i] = self._round
        return chosen

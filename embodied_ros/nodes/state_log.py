"""Log lines for a node's changes of state (the controller holding or streaming, the observation
node refusing or accepting its inputs): events worth a line each, but not a flood when a state
flaps or only its numbers change."""

from __future__ import annotations

import time

from embodied_ros.node_infra.stats import reason_kind


class StateLog:
    """Logs a change of state at once, unless that same state was logged in the last
    `min_interval_s` (the state flaps): then the state in force once the interval is over is
    logged, saying how many changes of state the line stands for. A text that differs only in its
    numbers (an age that grows) is the same state. Call `update` often (every step or tick): it
    also writes a line held back before."""

    def __init__(self, logger, min_interval_s: float = 5.0, initial: str = ""):
        self.logger = logger
        self.min_interval_s = min_interval_s
        self._kind = self._logged_kind = reason_kind(initial)
        self._logged_at: dict[str, float] = {}
        self._changes = 0

    def update(self, text: str, level: str = "info", now_s: float | None = None) -> None:
        """The state now is `text`; a line for it is logged at `level` ("info" or "warning")."""
        kind = reason_kind(text)
        if kind != self._kind:
            self._kind, self._changes = kind, self._changes + 1
        now_s = time.monotonic() if now_s is None else now_s
        if kind == self._logged_kind or now_s - self._logged_at.get(kind, -float("inf")) < self.min_interval_s:
            return
        line = text if self._changes <= 1 else f"{text} ({self._changes} changes of state since the last line)"
        if level == "warning":  # rclpy fixes the severity of each call site: one call per level
            self.logger.warning(line)
        else:
            self.logger.info(line)
        self._logged_kind, self._logged_at[kind], self._changes = kind, now_s, 0

"""Finished work is final, but a task the controller itself stopped has not finished (issue 21 #5 with
preemption): a chaos soak saw a preempted job fail on exit code 143, its SIGTERM's."""

from __future__ import annotations

import signal

from disagg.control.slice import _killed


def test_a_stop_signal_s_exit_code_is_not_the_job_s_outcome() -> None:
    for code in (None, -9, -15, 128 + signal.SIGTERM, 128 + signal.SIGKILL):
        assert _killed(code), code
    for code in (0, 1, 3, 2, 127, 139):
        assert not _killed(code), code

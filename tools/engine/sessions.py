"""Children started in a session of their own (the isolation workers, the implementation hosts) keep the
priority of the process that started them."""
from __future__ import annotations

import os


def keep_niceness(pid: int) -> None:
    """Give the session that process ``pid`` leads this process's niceness.  Where Linux schedules by
    autogroup (one per session, ``/proc/sys/kernel/sched_autogroup_enabled``), a process's nice value orders
    it only against the processes of its own session, and a new session's group starts at nice 0: the hosts
    and workers of a job run at nice 19 (CI's newest-toolchain checks) took the cores at full priority from
    the commands beside it (docs/ci.md, 2026-12-06d).  Nothing to do at nice 0 or below, where the machine
    has no autogroups, or where ``pid`` has already ended."""
    niceness = os.nice(0)
    if niceness > 0:
        try:
            with open(f"/proc/{pid}/autogroup", "w") as autogroup:
                autogroup.write(str(niceness))
        except OSError:
            pass

"""The open-files limit a served process raises at start.

Every connection a server holds is a file descriptor: the proxy holds one per client connection (a harness
keeps its connection open between calls, so one per session) and one per call in flight to the engine. Most
systems start a process with a soft ``RLIMIT_NOFILE`` of 1,024 under a far higher hard limit (systemd's default:
524,288), and past the soft limit ``accept`` and ``connect`` fail with EMFILE: at 2,048 sessions a
proxy under the default soft limit failed 456 of 4,096 calls (client connections reset, upstream connects
refused as 502s; ``bench/proxy_sessions.py``). Any process may raise its soft limit up to its hard limit, as
vLLM's API server does at start; raising the hard limit itself is the operator's (``ulimit -Hn``,
``LimitNOFILE=``, the container runtime's ``--ulimit nofile=``).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

ENOUGH = 8_192
"""A soft limit below this, after raising, is logged: it caps the sessions one process can serve."""


def raise_open_files_limit() -> int | None:
    """This process's soft open-files limit raised to its hard limit; the soft limit now (None: no such limit
    on this system)."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return None
    unlimited = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != unlimited and (hard == unlimited or soft < hard):
        # an unlimited hard limit is capped lower by the system (macOS: kern.maxfilesperproc, OPEN_MAX): the
        # highest soft limit it takes
        targets = [hard] if hard != unlimited else [1 << 20, 65_536, 10_240]
        for target in (t for t in targets if t > soft):
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            break
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft != resource.RLIM_INFINITY and soft < ENOUGH:
        logger.warning(
            "open-files limit %d (the hard limit): each client connection and each call in flight to the upstream "
            "holds a file descriptor, so this process serves fewer than %d connections at once; raise the hard "
            "limit (ulimit -Hn, LimitNOFILE=, --ulimit nofile=) for thousands of sessions",
            soft,
            soft,
        )
    return soft


__all__ = ["ENOUGH", "raise_open_files_limit"]

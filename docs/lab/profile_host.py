"""Where a hosted certification spends its time, on both sides of the channel (issue 26).

Runs ``tools/certify-cells`` with the given arguments in this process under cProfile, its implementation
host running a copy of ``tools/engine/impl_host.py`` that profiles itself as well (dumped after every
message at most once a second: the judge ends its hosts by SIGKILL).  Writes ``<out>/<tag>_judge.txt``
and ``<out>/<tag>_host.txt``: the top of each by own and by cumulative time.

    python3 docs/lab/profile_host.py OUT TAG -- --device cuda --no-isolate --op greedy_argmax --max-examples 40
"""
from __future__ import annotations

import cProfile
import io
import pathlib
import pstats
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

HOST_PROFILING = '''

def _profiled(serve, dump_to):
    import cProfile, time
    profile, dumped = cProfile.Profile(), [0.0]

    def profiled_serve(self):
        send = self.channel.send

        def send_and_dump(reply):   # after each reply, at most once a second
            send(reply)
            if time.monotonic() - dumped[0] > 1.0:
                profile.disable()
                profile.dump_stats(dump_to)
                dumped[0] = time.monotonic()
                profile.enable()

        self.channel.send = send_and_dump
        profile.enable()
        try:
            serve(self)
        finally:
            profile.disable()
            profile.dump_stats(dump_to)
    return profiled_serve


Host.serve = _profiled(Host.serve, %r)
'''


def summary(stats_path: str) -> str:
    text = io.StringIO()
    stats = pstats.Stats(stats_path, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(60)
    return text.getvalue()


def main() -> int:
    out, tag, separator, *arguments = sys.argv[1:]
    if separator != "--":
        print("usage: profile_host.py OUT TAG -- CERTIFY-CELLS ARGUMENTS", file=sys.stderr)
        return 2
    out = pathlib.Path(out)
    from tools.engine import impl_executor
    from tools.certify_cells import main as certify_cells

    host_stats = str(pathlib.Path(tempfile.gettempdir()) / f"kparity_host_{tag}.prof")
    profiled = pathlib.Path(tempfile.mkdtemp()) / "impl_host.py"
    profiled.write_text(impl_executor.HOST.read_text() + HOST_PROFILING % host_stats)
    impl_executor.HOST = profiled
    judge = cProfile.Profile()
    judge.enable()
    try:
        status = certify_cells(arguments)
    finally:
        judge.disable()
        judge.dump_stats(str(out / f"{tag}_judge.prof"))
        (out / f"{tag}_judge.txt").write_text(summary(str(out / f"{tag}_judge.prof")))
        (out / f"{tag}_judge.prof").unlink()
        if pathlib.Path(host_stats).exists():
            (out / f"{tag}_host.txt").write_text(summary(host_stats))
    return status


if __name__ == "__main__":
    sys.exit(main())

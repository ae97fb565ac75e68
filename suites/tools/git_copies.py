"""A copy of this repository under git of its own, for the tools that read history (tools/gate, tools/ab)."""
from __future__ import annotations

import pathlib
import shutil
import subprocess

from suites.claims import REPO

GIT = ["git", "-c", "user.name=gate test", "-c", "user.email=gate@localhost", "-c", "commit.gpgsign=false"]


def git(root: pathlib.Path, *words: str) -> str:
    return subprocess.run([*GIT, *words], cwd=root, check=True, capture_output=True, text=True).stdout


def committed_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    """This working tree's sources (tracked and untracked, not ignored), committed once on a branch named
    main.  Certificates come from HEAD: a local ``tools/certify-cells`` run rewrites them in the working
    tree, and what this tree's state happens to be must not decide a test."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                           check=True, capture_output=True, text=True).stdout.split("\0")
    root = tmp_path / "repo"
    for name in filter(None, files):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".cert.json"):
                committed = subprocess.run(["git", "show", f"HEAD:{name}"], cwd=REPO, capture_output=True)
                if committed.returncode == 0:
                    (root / name).write_bytes(committed.stdout)
                continue
            shutil.copy2(REPO / name, root / name)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return root

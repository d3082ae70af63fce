"""The repository's own files, for the tests that read the tree: never what a learner's session leaves
beside them (JupyterLab's ``.ipynb_checkpoints/``, the notebooks' ``rstream-data/``, a notebook saved
under a new name, ``__pycache__``).

In a git checkout, the files git tracks, and those it would (``git ls-files --cached --others
--exclude-standard``: a new test module counts before its ``git add``, while what ``.gitignore`` names, as
``rstream-data/`` and ``.ipynb_checkpoints/``, never does); elsewhere (an unpacked archive), the files on
disk. Either way, never a file in one of those folders, in a hidden one, or named as JupyterLab names the
files it makes (``Untitled.ipynb``, ``... -Copy1.ipynb``)."""

from __future__ import annotations

import ast
import fnmatch
import subprocess
from pathlib import Path

#: The repository's root.
ROOT = Path(__file__).resolve().parents[2]

#: Folders a session makes beside the repository's files (never the repository's own).
LEFTOVERS = frozenset({".ipynb_checkpoints", "rstream-data", "__pycache__"})
#: Names JupyterLab gives the files it makes: a new notebook, a duplicate, a checkpoint (outside a
#: checkout, nothing else tells a learner's file from the repository's).
LEFTOVER_NAMES = ("Untitled*", "*-Copy[0-9]*", "*-checkpoint.*")


def _own(relative: Path) -> bool:
    return (not any(part in LEFTOVERS or part.startswith(".") for part in relative.parts[:-1])
            and not any(fnmatch.fnmatch(relative.name, name) for name in LEFTOVER_NAMES))


def _tracked(folder: Path) -> list[Path] | None:
    """The files under ``folder`` (relative to it) that git tracks or would (not ignored), on disk; None
    outside a checkout."""
    try:
        done = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                               "--", "."], capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    names = dict.fromkeys(Path(name) for name in done.stdout.decode().split("\0") if name)  # once each, in order
    return [name for name in names if (folder / name).is_file()]


def _on_disk(folder: Path) -> list[Path]:
    return [path.relative_to(folder) for path in folder.rglob("*") if path.is_file()]


def repository_files(folder: Path, pattern: str = "*", recursive: bool = False) -> list[Path]:
    """The repository's files in ``folder`` whose name matches ``pattern`` (``fnmatch``), sorted: at its
    top only, as ``folder.glob(pattern)``, or at any depth with ``recursive``, as ``folder.rglob(pattern)``;
    never a file inside one of ``LEFTOVERS`` or a hidden folder, nor one named as ``LEFTOVER_NAMES``."""
    folder = Path(folder)
    listed = _tracked(folder)
    names = listed if listed is not None else _on_disk(folder)
    return sorted(folder / name for name in names
                  if fnmatch.fnmatch(name.name, pattern) and _own(name) and (recursive or len(name.parts) == 1))


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in it (also inside functions), as absolute names."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's own package
                package = path.relative_to(ROOT).parent.parts
                base = ".".join(package[: len(package) - node.level + 1])
                out.append((node.lineno, f"{base}.{node.module}" if node.module else base))
            else:
                out.append((node.lineno, node.module or ""))
    return out

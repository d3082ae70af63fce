"""The tests read the repository's own files only, whatever a learner's session left beside them.

Done as a new user does it: open the notebooks in JupyterLab (it writes ``.ipynb_checkpoints/`` copies and,
every two minutes, saves the open notebook with its outputs), run them (``rstream-data/`` beside them),
save one as ``Untitled.ipynb``; then run the README's test command. Here in a copy of the repository (its
own files, in a new git repository), with such leftovers made in it, the suite's readers of the
tree run in a subprocess and must pass: in the git checkout, and in the same tree without ``.git``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import repository_files

ROOT = Path(__file__).resolve().parents[1]

#: The tests that read the tree (the slow one of tests/test_layout.py, which runs tests/processors again
#: without pyspark, is left out: it reads the tree as the others of its module do).
READERS = ["tests/test_links.py", "tests/test_layout.py", "tests/test_packaging.py::test_every_subpackage_is_listed_in_pyproject",
           "tests/shuffle/test_wire.py::test_no_module_outside_the_shuffle_package_names_a_shuffle_header",
           "tests/notebooks/test_notebooks.py::test_solutions_are_up_to_date"]


def copy_of_the_repository(to: Path) -> Path:
    """The repository's own files, copied into a new git repository at ``to`` (added, not committed)."""
    for path in repository_files(ROOT, "*", recursive=True):
        target = to / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    subprocess.run(["git", "init", "-q", str(to)], check=True, timeout=60)
    subprocess.run(["git", "-C", str(to), "add", "-A"], check=True, timeout=60)
    return to


def saved_with_outputs(notebook: dict) -> dict:
    """``notebook`` as JupyterLab saves it after a run: outputs, execution counts, the kernel's language."""
    for count, cell in enumerate((c for c in notebook["cells"] if c["cell_type"] == "code"), 1):
        cell["execution_count"] = count
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["see figures/nowhere.png\n"]},
                           {"output_type": "display_data", "metadata": {},
                            "data": {"text/html": ['<img src="figures/nowhere.png">'], "text/plain": ["a picture"]}}]
    notebook["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                             "file_extension": ".py", "pygments_lexer": "ipython3"}
    notebook["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return notebook


def leave_a_session_behind(repo: Path) -> list[Path]:
    """What a learner's JupyterLab session leaves in ``repo``: every file made (not the notebook it saved)."""
    notebooks = repo / "notebooks"
    made = []

    def put(relative: str, text: str) -> None:
        path = repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        made.append(path)

    start = (notebooks / "00_start_here.ipynb").read_text()  # its links are figures/...: broken from elsewhere
    put("notebooks/.ipynb_checkpoints/00_start_here-checkpoint.ipynb", start)
    put("notebooks/solutions/.ipynb_checkpoints/00_start_here-checkpoint.ipynb", start)
    put("notebooks/rstream-data/00_start_here/executed.ipynb", start)
    put("notebooks/rstream-data/exercises/00.json", json.dumps({"exercises": {"Exercise 1": []}}))
    untitled = json.loads(start)  # "Save As": a learner's own copy, with its exercises and outputs
    untitled["cells"].append({"cell_type": "markdown", "id": "mine", "metadata": {}, "source": ["[x](nowhere.png)"]})
    put("notebooks/Untitled.ipynb", json.dumps(saved_with_outputs(untitled), indent=1))
    wire = (repo / "rstream" / "shuffle" / "wire.py").read_text()  # the wire's headers, outside its package
    put("rstream/.ipynb_checkpoints/wire-checkpoint.py", wire)
    put("tests/.ipynb_checkpoints/test_links-checkpoint.py", "import tests.test_layout  # a test importing a test\n")
    put("rstream/rstream-data/__init__.py", "")
    wordcount = notebooks / "01_wordcount.ipynb"  # saved by JupyterLab's autosave: a tracked file changed
    wordcount.write_text(json.dumps(saved_with_outputs(json.loads(wordcount.read_text())), indent=1))
    return made


def run_pytest(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=repo,
                          env=env, capture_output=True, text=True, timeout=600)


def test_the_readers_of_the_tree_ignore_a_learner_s_leftovers(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the copy cannot be a checkout")
    repo = copy_of_the_repository(tmp_path / "repo")
    made = leave_a_session_behind(repo)
    own = {p.relative_to(repo) for p in repository_files(repo, "*", recursive=True)}
    assert not own & {p.relative_to(repo) for p in made}
    assert Path("notebooks/01_wordcount.ipynb") in own  # changed by a session, still the repository's

    for where in ("a git checkout", "no git checkout"):
        if where == "no git checkout":
            shutil.rmtree(repo / ".git")
            own_on_disk = {p.relative_to(repo) for p in repository_files(repo, "*", recursive=True)}
            assert not own_on_disk & {p.relative_to(repo) for p in made} and own <= own_on_disk
        else:  # the notebooks the notebook tests run, in the headless suite and in the browser
            listed = run_pytest(repo, "--collect-only", "tests/notebooks/test_notebooks.py", "tests/browser")
            assert "Untitled" not in listed.stdout and "checkpoint" not in listed.stdout, listed.stdout[-3000:]
            assert "01_wordcount.ipynb" in listed.stdout, listed.stdout[-3000:]
        done = run_pytest(repo, *READERS, "-k", "not pyspark")
        assert done.returncode == 0, f"{where}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"

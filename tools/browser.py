"""Drive the notebooks in a real JupyterLab in a real Chromium, and judge what a person would see.

Used by ``tests/browser/test_notebooks_in_browser.py`` and ``bench/browser_runs.py`` (it lives in ``tools/``,
not in ``tests/``, so the bench never imports a test package; ``tools/`` is not installed with rstream)::

    with JupyterLab() as lab, sync_playwright() as pw:
        browser = launch_browser(pw)
        page = open_lab_page(browser, lab)
        run = run_notebook(page, "01_wordcount.ipynb", lab, artifacts=artifacts_dir())
        assert not run.problems(), run.report()

What a user of this module must know:

* ``JupyterLab`` serves a temporary copy of ``notebooks/`` (generated ``rstream-data/`` and checkpoints
  left out), so a run never writes into the repository. Its Jupyter config, data, runtime, IPython,
  settings and workspace folders are temporary too: nothing of the user's ``~/.jupyter`` is read.
  The ``python3`` kernel it offers is THIS interpreter (``sys.executable``); ``start()`` checks that.
* Nothing may leave loopback: the server runs with JupyterLab's news and update checks off and the
  read-only extension manager (no PyPI listing); the page's requests and the server tree's sockets are
  watched, and any non-loopback address is a problem of the run.
* Notebook cells are all attached to the DOM (``windowingMode: none``), so off-screen cells are measured
  like visible ones. The viewport is 1280x900 with the file browser collapsed: outputs are ~1100 px wide.
* ``run_notebook`` does JupyterLab's own "Restart Kernel and Run All Cells" (confirming the dialog), samples
  ``.rstream-live`` elements and the kernel tree's RSS every ~250 ms, then collects per code cell what a
  person would see as wrong (errors, tracebacks, stderr boxes, widget errors, too-wide or blank outputs),
  takes screenshots, and (by default) shuts the notebook's kernel down and checks that its whole process
  tree (the JVM, Spark's Python workers) exits.
* ``run_notebook(fit_tables=selector)`` also measures every table inside the elements ``selector`` matches
  (``.rstream-view-watermarks``: a ``WatermarkMonitor``): at 1280 px each must show whole, none of it past the
  edge of its output area or scrolled out of sight; in a 900 px window (``NARROW_VIEWPORT``) each must show
  whole or scroll inside a box that itself fits.
* Never rely on wall-clock timing for correctness: timeouts here are generous ceilings only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    # No name resolves but localhost: a page that asks for another host cannot even send a DNS query.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
VIEWPORT = {"width": 1280, "height": 900}
#: A narrower window, where ``run_notebook(fit_tables=...)`` checks tables again: outputs are ~470 px wide.
NARROW_VIEWPORT = {"width": 900, "height": 900}
LIVE_CLASS = "rstream-live"
NOTEBOOK_TIMEOUT = 600.0  # seconds for one Restart and Run All
SAMPLE_EVERY = 0.25  # seconds between two samples of live widgets and RSS

# The environment as it was when this module was imported, i.e. before any test in this process started
# Spark (pytest imports it while collecting): get_spark() sets SPARK_LOCAL_DIRS and extends PYTHONPATH for
# its own workers, and the server (so the kernels) must not inherit those. The caller's Jupyter variables
# are dropped too: the server gets its own temporary folders.
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k != "SPARK_LOCAL_DIRS" and not k.startswith(("JUPYTER", "JPY_"))}


def browser_unavailable() -> str | None:
    """Why the browser suite cannot run here (a sentence naming the fix), or None when it can."""
    if not CHROMIUM.exists():
        return f"browser tests skipped: {CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        return f"browser tests skipped: playwright is not importable ({exc}; pip install -e .[dev])"
    return None


def artifacts_dir() -> Path:
    """``$RSTREAM_BROWSER_ARTIFACTS`` (created), else a new temporary folder; its path is printed."""
    env = os.environ.get("RSTREAM_BROWSER_ARTIFACTS")
    path = Path(env) if env else Path(tempfile.mkdtemp(prefix="rstream-browser-"))
    path.mkdir(parents=True, exist_ok=True)
    print(f"browser artifacts (screenshots, results.json): {path}", flush=True)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def is_loopback(ip: str) -> bool:
    """Whether ``ip`` (v4, v6, or v4-mapped v6) is a loopback address."""
    try:
        addr = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def describe(proc: psutil.Process) -> str:
    """``pid name cmdline`` of a process, shortened, for reports."""
    try:
        cmd = " ".join(proc.cmdline())
    except psutil.Error:
        cmd = "?"
    return f"pid {proc.pid} {cmd[:160]}"


# --------------------------------------------------------------------------------------------
# the server


class JupyterLab:
    """One JupyterLab server on 127.0.0.1 over a temporary copy of ``notebooks/``.

    Everything it uses lives under ``base``, a new temporary folder deleted by ``stop()`` unless ``keep``
    (then it holds the executed copies of the notebooks, their ``rstream-data/`` and ``server.log``).

    ``start()`` returns once the REST API answers and the ``python3`` kernelspec is checked to be
    ``sys.executable``; ``stop()`` shuts it down and returns the processes (the server's, its kernels',
    and theirs) that had to be killed because they did not exit by themselves; ``leftovers`` keeps them.
    Every process seen in the server's tree (``track()``, called by every sample) is remembered, so a
    JVM re-parented to init when its kernel died is still found and stopped.
    """

    def __init__(self, notebooks: Path = NOTEBOOKS, keep: bool = False) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="rstream-lab-"))
        self.keep = keep
        self.root = self.base / "notebooks"
        self.source = notebooks
        self.port = 0
        self.token = secrets.token_hex(24)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.base / "server.log"
        self.leftovers: list[str] = []
        self.remote_connections: list[str] = []
        self._seen: dict[tuple[int, float], psutil.Process] = {}

    # -- life cycle ---------------------------------------------------------------------------
    def _prepare(self) -> dict[str, str]:
        shutil.copytree(self.source, self.root,
                        ignore=shutil.ignore_patterns("rstream-data", ".ipynb_checkpoints", "__pycache__"))
        config, data, kernels = self.base / "config", self.base / "data", self.base / "path" / "kernels"
        settings = self.base / "lab-settings"
        for folder in (config / "labconfig", data, kernels / "python3", self.base / "runtime", self.base / "ipython",
                       self.base / "workspaces"):
            folder.mkdir(parents=True, exist_ok=True)
        (kernels / "python3" / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "metadata": {"debugger": True},
        }, indent=1))
        # Belt and braces beside the command-line options: no extension manager plugin in the page.
        (config / "labconfig" / "page_config.json").write_text(json.dumps(
            {"disabledExtensions": {"@jupyterlab/extensionmanager-extension": True}}, indent=1))
        user_settings = {
            # No news (and so no consent toast over the screenshots), no update check.
            "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            # Every cell in the DOM, so off-screen cells are measured and sampled like visible ones.
            "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        }
        for plugin, values in user_settings.items():
            path = settings / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values, indent=1))
        env = dict(CLEAN_ENV)
        env.update({
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_PATH": str(kernels.parent),
            "JUPYTER_RUNTIME_DIR": str(self.base / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.base / "workspaces"),
            "IPYTHONDIR": str(self.base / "ipython"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONUNBUFFERED": "1",
        })
        return env

    def start(self, timeout: float = 180.0) -> JupyterLab:
        """Start the server; raise with the log's tail if it does not answer within ``timeout`` s."""
        env = self._prepare()
        self.port = free_port()
        argv = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            "--KernelSpecManager.ensure_native_kernel=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            argv.append("--allow-root")  # containers and CI run as root
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(argv, cwd=self.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            failure = None
            if self.proc.poll() is not None:
                failure = f"jupyter lab exited with {self.proc.returncode}"
            else:
                try:
                    self.api("GET", "api/status")
                    break
                except (OSError, urllib.error.URLError):
                    if time.monotonic() > deadline:
                        failure = f"jupyter lab did not answer in {timeout:.0f} s"
            if failure:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"{failure}:\n{tail}")
            time.sleep(0.5)
        self.track()
        self.check_kernelspec()
        return self

    def check_kernelspec(self) -> None:
        """Raise unless the server's ``python3`` kernel is this interpreter's ipykernel."""
        specs = self.api("GET", "api/kernelspecs")["kernelspecs"]
        argv = specs.get("python3", {}).get("spec", {}).get("argv", [])
        if not argv or argv[0] != sys.executable or "ipykernel_launcher" not in argv:
            raise RuntimeError(f"the server's python3 kernel is {argv!r}, not {sys.executable}'s ipykernel")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def stop(self, timeout: float = 60.0) -> list[str]:
        """Shut the server and its kernels down; kill what is still alive after ``timeout`` s.

        Returns (and adds to ``leftovers``) one line per process that had to be killed.
        """
        if self.proc is None:
            if not self.keep:
                shutil.rmtree(self.base, ignore_errors=True)
            return []
        self.track()
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self.api("POST", "api/shutdown")  # shuts every kernel down, then the server
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.leftovers.append(f"jupyter server pid {self.proc.pid} (did not stop on api/shutdown)")
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        killed = self._reap(list(self._seen.values()), timeout=30.0)
        self.leftovers += killed
        self.proc = None
        if not self.keep:
            shutil.rmtree(self.base, ignore_errors=True)
        return killed

    def __enter__(self) -> JupyterLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- REST -----------------------------------------------------------------------------------
    def url(self, path: str = "") -> str:
        """The server's URL for ``path`` (no token: pass it with ``token_query`` or the API header)."""
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def api(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """One REST call with the token; the decoded JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url(path), data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
        with opener.open(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw.strip() else None

    # -- processes --------------------------------------------------------------------------------
    def tree(self) -> list[psutil.Process]:
        """The server and every live descendant (kernels, their JVMs and Python workers)."""
        if self.proc is None:
            return []
        try:
            server = psutil.Process(self.proc.pid)
            return [server, *server.children(recursive=True)]
        except psutil.Error:
            return []

    def track(self) -> list[psutil.Process]:
        """Remember every process now in the tree (so ``stop()`` finds orphans too); returns the tree."""
        procs = self.tree()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                self._seen.setdefault((p.pid, p.create_time()), p)
        return procs

    def check_connections(self, procs: list[psutil.Process]) -> None:
        """Record in ``remote_connections`` every socket of ``procs`` whose peer is not loopback."""
        for p in procs:
            try:
                conns = p.net_connections(kind="inet")
            except psutil.Error:
                continue
            for c in conns:
                if c.raddr and not is_loopback(c.raddr.ip):
                    line = f"{describe(p)} -> {c.raddr.ip}:{c.raddr.port}"
                    if line not in self.remote_connections:
                        self.remote_connections.append(line)

    def kernel_id(self, name: str) -> str | None:
        """The id of the kernel of the session on notebook ``name`` (a path relative to the root)."""
        for session in self.api("GET", "api/sessions"):
            if session.get("path") == name and session.get("kernel"):
                return str(session["kernel"]["id"])
        return None

    def kernel_process(self, kernel_id: str) -> psutil.Process | None:
        """The ipykernel process of kernel ``kernel_id`` (it changes on every restart), or None."""
        for p in self.tree()[1:]:
            with contextlib.suppress(psutil.Error):
                cmd = p.cmdline()
                if any(f"kernel-{kernel_id}.json" in arg for arg in cmd) and "ipykernel_launcher" in cmd:
                    return p
        return None

    def shutdown_kernel(self, name: str, timeout: float = 60.0) -> list[str]:
        """Delete the session on ``name`` (its kernel shuts down) and wait for the kernel's whole tree.

        Returns one line per process of that tree still alive after ``timeout`` s (they are killed).
        """
        kernel_id = self.kernel_id(name)
        if kernel_id is None:
            return []
        kernel = self.kernel_process(kernel_id)
        procs = [] if kernel is None else [kernel, *kernel.children(recursive=True)]
        for session in self.api("GET", "api/sessions"):
            if session.get("path") == name:
                try:
                    self.api("DELETE", f"api/sessions/{session['id']}")
                except urllib.error.HTTPError as err:
                    # gone already: the notebook's release button (release()) shut its kernel down, and the
                    # server drops a session whose kernel is gone
                    if err.code != 404:
                        raise
        return self._reap(procs, timeout)

    @staticmethod
    def _reap(procs: list[psutil.Process], timeout: float) -> list[str]:
        """Wait for ``procs`` to exit; kill and describe those that do not within ``timeout`` s."""
        alive = [p for p in procs if p.is_running()]
        _, alive = psutil.wait_procs(alive, timeout=timeout)
        killed = []
        for p in alive:
            killed.append(describe(p))
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=10)
        return killed


def kernel_tree_rss(kernel: psutil.Process | None) -> int:
    """Bytes of RSS of ``kernel`` and all its descendants (pages shared by forks count once per process)."""
    return kernel_tree_memory(kernel, pss=False)[0]


def kernel_tree_memory(kernel: psutil.Process | None, pss: bool = True,
                       parts: dict[str, int] | None = None) -> tuple[int, int]:
    """``(rss, pss)`` bytes of ``kernel`` and all its descendants. RSS counts a page shared by forked
    processes (Spark's Python workers) once per process; PSS splits it between them, so the PSS sum is
    what the machine (or a Binder pod's memory limit) really holds for the tree. ``parts``, if given,
    gets the PSS per kind of process (``process_kind``)."""
    if kernel is None:
        return 0, 0
    try:
        procs = [kernel, *kernel.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    rss = proportional = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if shares_parents_memory(p):
                continue  # its parent's pages, counted with the parent
            if pss:
                info = p.memory_full_info()
                rss, proportional = rss + info.rss, proportional + info.pss
                if parts is not None:
                    kind = "kernel" if p is kernel else process_kind(p.cmdline(), p.name())
                    parts[kind] = parts.get(kind, 0) + info.pss
            else:
                rss += p.memory_info().rss
    return rss, proportional


#: ``kcmp(2)``'s system call number (x86-64, arm64) and its ``KCMP_VM``: whether two processes share one memory.
_KCMP = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
_KCMP_VM = 1


def same_memory(pid: int, other: int) -> bool:
    """Whether processes ``pid`` and ``other`` share one address space (``kcmp(2)``; False where it
    cannot tell)."""
    if _KCMP is None:
        return False
    import ctypes

    return int(ctypes.CDLL(None, use_errno=True).syscall(_KCMP, pid, other, _KCMP_VM, 0, 0)) == 0


def shares_parents_memory(proc: psutil.Process) -> bool:
    """Whether ``proc`` is a child that still shares its parent's address space: how a JVM starts any
    process (``posix_spawn``, a ``vfork``-like clone, until the child's ``exec``; it shows the JVM's
    command line meanwhile). Its PSS is the whole JVM's again, the same pages: a sample that caught
    one counted Spark's JVM twice (a 00 peak of 974 MB where the JVM holds 375 once)."""
    try:
        return same_memory(proc.ppid(), proc.pid)
    except psutil.Error:
        return False


def process_kind(argv: list[str], name: str = "") -> str:
    """What a process of a kernel's tree is, for a memory breakdown: ``java <main class>``, the Python
    module it runs (``python -m <module> [its first argument]``), or its program. A process rstream's
    zygote forked keeps the zygote's command line but is named after what it became (``name``)."""
    if not argv:
        return "?"
    if "rstream.runtime.zygote" in argv and name and not name.startswith("python"):
        return f"forked by the zygote: {name}"
    program = os.path.basename(argv[0])
    if program == "java":
        main = next((a for a in argv[1:] if not a.startswith("-") and "." in a and "/" not in a), "")
        return f"java {main.rsplit('.', 1)[-1]}".strip()
    if "-m" in argv[:-1]:
        at = argv.index("-m")
        module = argv[at + 1]
        first = argv[at + 2] if len(argv) > at + 2 and not argv[at + 2].startswith(("-", "/")) else ""
        return f"python -m {module} {first}".strip()
    return program


def residual_memory(kernel: psutil.Process | None, wait: float = 10.0) -> int:
    """PSS bytes the kernel's tree keeps once its notebook has run: a notebook whose release button ended
    its own kernel (``rstream.widgets.release()``) keeps nothing, so wait up to ``wait`` s for that first."""
    if kernel is not None:
        with contextlib.suppress(psutil.Error):
            kernel.wait(timeout=wait)
    return kernel_tree_memory(kernel)[1] if kernel is not None and kernel.is_running() else 0


# --------------------------------------------------------------------------------------------
# the browser

# Installed before the page's own scripts on every navigation: what the harness asks the page.
_PAGE_HELPERS = r"""
(() => {
  const LIVE = "%LIVE%";
  let nextLiveId = 0;
  const panel = (name) => {
    const app = window.jupyterapp;
    if (!app || !app.shell) return null;
    for (const w of app.shell.widgets("main")) {
      if (w.context && w.context.path === name && w.content && w.sessionContext) return w;
    }
    return null;
  };
  const codeCells = (p) => p.content.widgets.map((c, index) => ({c, index})).filter(x => x.c.model.type === "code");
  const prompt = (c) => { const n = c.node.querySelector(".jp-InputPrompt"); return n ? n.textContent.trim() : ""; };
  const kernelStatus = (p) => {
    const s = p.sessionContext.session;
    return s && s.kernel ? s.kernel.status : "none";
  };
  const cellIndex = (p, el) => {
    const node = el.closest(".jp-Cell");
    return p.content.widgets.findIndex(c => c.node === node);
  };
  // Nothing a reader could see: no height, or no text, no picture or control, and nothing painted.
  const looksBlank = (out) => {
    const box = out.getBoundingClientRect();
    if (box.height < 1 || box.width < 1) return true;
    if (out.innerText.trim()) return false;
    if (out.querySelector("img, svg, canvas, video, iframe, input, select, textarea, button, progress, meter")) return false;
    for (const el of out.querySelectorAll("*")) {
      const r = el.getBoundingClientRect();
      if (r.width < 1 || r.height < 1) continue;
      const st = getComputedStyle(el);
      if (st.visibility === "hidden") continue;
      const painted = (st.backgroundColor !== "rgba(0, 0, 0, 0)" && st.backgroundColor !== "transparent")
        || st.backgroundImage !== "none" || ["Top", "Right", "Bottom", "Left"].some(
          s => parseFloat(st[`border${s}Width`]) > 0 && st[`border${s}Style`] !== "none");
      if (painted) return false;
    }
    return true;
  };
  window.__rstream = {
    ready(name) {
      const p = panel(name);
      return !!(p && p.sessionContext.isReady && kernelStatus(p) === "idle" && p.content.widgets.length > 0);
    },
    start(name, command) {
      const p = panel(name);
      window.jupyterapp.shell.activateById(p.id);
      const run = {settled: false, value: null, error: null};
      window.__rstreamRun = run;
      window.jupyterapp.commands.execute(command).then(
        v => { run.settled = true; run.value = v === undefined ? null : v; },
        e => { run.settled = true; run.error = String(e); });
      return p.id;
    },
    sample(name) {
      const p = panel(name);
      const run = window.__rstreamRun || {};
      const executing = codeCells(p).some(x => prompt(x.c).includes("*"));
      const live = [];
      for (const el of document.querySelectorAll("." + LIVE)) {
        if (!el.dataset.rstreamLiveId) el.dataset.rstreamLiveId = String(nextLiveId++);
        live.push({key: `cell ${cellIndex(p, el)} live#${el.dataset.rstreamLiveId}`, text: el.innerText});
      }
      return {settled: !!run.settled, value: run.value ?? null, error: run.error ?? null, executing,
              kernel: kernelStatus(p), live};
    },
    collect(name) {
      const p = panel(name);
      const cells = [];
      for (const {c, index} of codeCells(p)) {
        c.node.dataset.rstreamCell = String(index);
        const model = c.model.outputs.toJSON();
        const errors = model.filter(o => o.output_type === "error").map(o => `${o.ename}: ${o.evalue}`);
        const area = c.node.querySelector(".jp-Cell-outputArea .jp-OutputArea") || c.node.querySelector(".jp-OutputArea");
        const outs = area ? Array.from(area.querySelectorAll(".jp-OutputArea-output")) : [];
        const mime = (o) => o.getAttribute("data-mime-type") || "";
        // JupyterLab draws an error output as a stderr box: the area's i-th child is the model's i-th output.
        const errorBoxes = new Set();
        if (area) {
          Array.from(area.children).filter(ch => ch.classList.contains("jp-OutputArea-child")).forEach((ch, i) => {
            if (model[i] && model[i].output_type === "error") ch.querySelectorAll(".jp-OutputArea-output").forEach(o => errorBoxes.add(o));
          });
        }
        const cellRight = c.node.getBoundingClientRect().right;
        const wide = [], blank = [];
        for (const out of outs) {
          const box = out.getBoundingClientRect();
          if (!c.outputHidden && looksBlank(out)) blank.push(`${mime(out) || out.className}, ${Math.round(box.height)} px high`);
          if (box.right > cellRight + 1) {
            wide.push({tag: "output area", cls: out.className, width: Math.round(box.width),
                       over: Math.round(box.right - cellRight)});
          }
          const limit = box.right + 1;
          const offending = [];
          for (const el of out.querySelectorAll("*")) {
            const r = el.getBoundingClientRect();
            if ((r.width === 0 && r.height === 0) || r.right <= limit) continue;
            if (offending.some(o => o.contains(el))) continue;  // report the outermost only
            let scrolls = false;
            for (let a = el.parentElement; a && a !== out; a = a.parentElement) {
              const ox = getComputedStyle(a).overflowX;
              if ((ox === "auto" || ox === "scroll") && a.getBoundingClientRect().right <= limit) { scrolls = true; break; }
            }
            if (scrolls) continue;
            offending.push(el);
            const cls = typeof el.className === "string" ? el.className : (el.getAttribute("class") || "");
            wide.push({tag: el.tagName.toLowerCase(), cls: cls.slice(0, 80), width: Math.round(r.width),
                       over: Math.round(r.right - box.right)});
          }
        }
        // a progress bar drawn as a stub (tqdm's notebook bar for an unknown total is 20 px wide and full)
        const stubBars = area ? Array.from(area.querySelectorAll(".widget-hprogress"))
          .map(el => Math.round(el.getBoundingClientRect().width)).filter(w => w >= 1 && w < 60) : [];
        const text = area ? area.innerText : "";
        const widgetErrors = [];
        if (area) {
          for (const el of area.querySelectorAll(".jupyter-widgets-error-widget")) widgetErrors.push(el.innerText || "error widget");
        }
        for (const line of text.split("\n")) {
          // "Loading widget..." after the run: the view never rendered (its model never came).
          if (line.includes("Error displaying widget") || line.trim() === "Loading widget...") widgetErrors.push(line.trim());
        }
        cells.push({
          index, execution_count: c.model.executionCount ?? null, prompt: prompt(c),
          outputs: model.length, rendered: outs.length,
          errors: errors.concat(outs.filter(o => mime(o) === "application/vnd.jupyter.error").map(o => o.innerText)),
          traceback: text.includes("Traceback (most recent call last)"),
          stderr: outs.filter(o => mime(o) === "application/vnd.jupyter.stderr" && !errorBoxes.has(o)).map(o => o.innerText),
          widget_errors: widgetErrors, wide, blank, stub_bars: stubBars,
        });
      }
      return {cells, kernel: kernelStatus(p), notebook: p.context.model.toJSON(),
              output_width: Math.round(Math.max(0, ...Array.from(p.node.querySelectorAll(".jp-OutputArea-output"))
                                                  .map(o => o.getBoundingClientRect().width)))};
    },
    outputWidth(name) {
      const p = panel(name);
      return Math.round(Math.max(0, ...Array.from(p.node.querySelectorAll(".jp-OutputArea-output"))
                                      .map(o => o.getBoundingClientRect().width)));
    },
    // Every table inside an element `selector` matches: how much of it is out of sight on the right, past
    // its output area's edge or past the edge of a box around it that clips (scrolls or hides) it, and
    // whether the innermost such box scrolls and itself fits in the output area (the rest is reachable).
    tables(name, selector) {
      const p = panel(name);
      const found = [];
      for (const view of p.node.querySelectorAll(selector)) {
        const out = view.closest(".jp-OutputArea-output");
        if (!out) continue;
        const outBox = out.getBoundingClientRect();
        const outRight = outBox.left + out.clientLeft + out.clientWidth;
        for (const t of view.querySelectorAll("table")) {
          const r = t.getBoundingClientRect();
          if (r.width < 1 && r.height < 1) continue;
          let right = outRight, clip = null;
          for (let a = t.parentElement; a && a !== out; a = a.parentElement) {
            if (getComputedStyle(a).overflowX === "visible") continue;
            const b = a.getBoundingClientRect();
            const edge = b.left + a.clientLeft + a.clientWidth;
            if (edge < r.right - 1 && !clip) clip = a;  // the innermost box that cuts the table
            right = Math.min(right, edge);
          }
          const ox = clip ? getComputedStyle(clip).overflowX : "";
          const cell = p.content.widgets.findIndex(c => c.node === t.closest(".jp-Cell"));
          found.push({
            cell, caption: t.caption ? t.caption.innerText.trim().slice(0, 80) : "",
            width: Math.round(r.width), output_width: Math.round(outRight - outBox.left),
            hidden: Math.max(0, Math.round(r.right - right)),
            reachable: r.right <= right + 1 || (!!clip && (ox === "auto" || ox === "scroll")
                                                 && clip.getBoundingClientRect().right <= outRight + 1),
          });
        }
      }
      return found;
    },
  };
})();
""".replace("%LIVE%", LIVE_CLASS)


@dataclasses.dataclass
class PageLog:
    """What a page did that a run must answer for: requests off loopback, console errors."""

    offsite: list[str] = dataclasses.field(default_factory=list)
    console_errors: list[str] = dataclasses.field(default_factory=list)


_LOGS: dict[int, PageLog] = {}


def launch_browser(playwright: Any) -> Any:
    """Debian's Chromium, headless, with everything that would call Google's hosts turned off."""
    return playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)


def open_lab_page(browser: Any, lab: JupyterLab) -> Any:
    """A new 1280x900 page logged in to ``lab`` (the token is set as a cookie by the first load).

    Every request for a URL off loopback is aborted before it is sent, and logged with every console
    error (``page_log(page)``). "Leave this page?" dialogs are accepted, so a dirty notebook never blocks
    the next navigation.
    """
    context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    context.set_default_timeout(120_000)
    context.add_init_script(_PAGE_HELPERS)
    page = context.new_page()
    log = PageLog()
    _LOGS[id(page)] = log

    def offsite(url: str) -> bool:
        host = urllib.parse.urlsplit(url).hostname or ""
        return not (url.startswith(("data:", "blob:", "about:")) or host == "localhost" or is_loopback(host))

    def on_request(url: str) -> None:
        if offsite(url) and url not in log.offsite:
            log.offsite.append(url)

    context.route(offsite, lambda route: route.abort("blockedbyclient"))
    page.on("request", lambda request: on_request(request.url))
    page.on("websocket", lambda ws: on_request(ws.url))
    page.on("console", lambda msg: log.console_errors.append(msg.text[:300]) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: log.console_errors.append(f"page error: {str(exc)[:300]}"))
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(lab.url(f"lab?reset&token={lab.token}"), wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.started !== undefined", timeout=180_000)
    return page


def page_log(page: Any) -> PageLog:
    """The request and console log ``open_lab_page`` keeps for ``page``."""
    return _LOGS.setdefault(id(page), PageLog())


# --------------------------------------------------------------------------------------------
# one run


@dataclasses.dataclass
class CellReport:
    """What one code cell showed after the run. ``index`` counts every cell of the notebook from 0."""

    index: int
    execution_count: int | None
    prompt: str
    outputs: int
    rendered: int
    errors: list[str]
    traceback: bool
    stderr: list[str]
    widget_errors: list[str]
    wide: list[dict[str, Any]]
    blank: list[str]
    screenshot: str | None = None
    #: the widths (px) of progress bars drawn as stubs, under 60 px: a bar that shows no progress
    stub_bars: list[int] = dataclasses.field(default_factory=list)

    def problems(self, check_ran: bool = True) -> list[str]:
        """One line per thing wrong with this cell, each starting with the cell's index (``check_ran``:
        whether a cell that did not run is one of them)."""
        where = f"cell {self.index} (execution count {self.execution_count})"
        found = []
        if check_ran and not self.execution_count:
            found.append(f"cell {self.index}: did not run (prompt {self.prompt!r})")
        found += [f"{where}: error output: {e.strip()[:300]}" for e in self.errors]
        if self.traceback and not self.errors:
            found.append(f"{where}: a Traceback is visible in its output")
        found += [f"{where}: stderr box: {s.strip()[:300]!r}" for s in self.stderr]
        found += [f"{where}: widget error: {w!r}" for w in self.widget_errors]
        found += [f"{where}: output wider than the notebook: <{w['tag']} class={w['cls']!r}> {w['width']} px wide, "
                  f"{w['over']} px past the output area's right edge" for w in self.wide]
        found += [f"{where}: blank output ({b}): nothing visible" for b in self.blank]
        found += [f"{where}: a progress bar only {w} px wide: a stub that shows no progress" for w in self.stub_bars]
        return found


@dataclasses.dataclass
class NotebookRun:
    """One Restart Kernel and Run All of one notebook, and everything measured while and after it ran."""

    name: str
    duration_s: float
    finished: bool
    run_value: Any
    run_error: str | None
    kernel_status: str
    kernel_argv0: str | None
    peak_rss_mb: float
    cells: list[CellReport]
    live: dict[str, list[str]]
    offsite_requests: list[str]
    remote_connections: list[str]
    console_errors: list[str]
    leftover_processes: list[str]
    output_width: int
    artifacts: Path | None
    screenshots: list[str] = dataclasses.field(default_factory=list)
    #: The executed notebook as the page held it (nbformat JSON), outputs included.
    notebook: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The kernel tree's peak PSS while cells ran, and its PSS afterwards (once its release button was
    #: clicked, where it has one): what an open kernel keeps while a learner goes on to the next notebook.
    peak_pss_mb: float = 0.0
    #: That peak per kind of process (``process_kind``), in MB: where a notebook's memory goes.
    peak_parts_mb: dict[str, int] = dataclasses.field(default_factory=dict)
    residual_pss_mb: float = 0.0
    #: What the notebook's release button said once the harness clicked it (None: it has none).
    released: str | None = None
    #: With ``fit_tables``: per table of the views it selects, as measured in the 1280 px window
    #: (``"window": "normal"``) and in the 900 px one (``"narrow"``): ``cell``, ``caption``, ``width``,
    #: ``output_width``, ``hidden`` (px of it out of sight on the right) and ``reachable`` (by scrolling).
    tables: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def problems(self) -> list[str]:
        """Every failed check, one line each (empty when the run is clean)."""
        found = []
        if not self.finished:
            found.append(f"the run did not finish within its timeout (kernel {self.kernel_status})")
        if self.run_error:
            found.append(f"Restart and Run All failed: {self.run_error}")
        if self.kernel_argv0 is None:
            found.append("the kernel's process was never found (so no RSS was measured)")
        elif self.kernel_argv0 != sys.executable:
            found.append(f"the kernel ran {self.kernel_argv0}, not {sys.executable}")
        if not self.cells:
            found.append("no code cell found")
        not_run = [c.index for c in self.cells if not c.execution_count]
        if len(not_run) > 1:  # one line for all (after an error, every later cell is skipped)
            found.append(f"cells {', '.join(map(str, not_run))}: did not run "
                         f"({len(not_run)} of {len(self.cells)} code cells)")
        for cell in self.cells:
            found += cell.problems(check_ran=len(not_run) < 2)
        for t in self.tables:
            what = f"cell {t['cell']}: table {t['caption']!r} ({t['width']} px wide, output area {t['output_width']} px)"
            if t["window"] == "normal" and t["hidden"] > 1:
                found.append(f"{what}: {t['hidden']} px of it cut off at the right edge")
            elif t["window"] == "narrow" and not t["reachable"]:
                found.append(f"{what}, narrow window: {t['hidden']} px of it cut off, not even by scrolling")
        for key, texts in self.live.items():
            if len(texts) < 2:
                found.append(f"{key}: the live widget showed {len(texts)} distinct text(s) while cells ran, "
                             "expected at least 2")
        found += [f"the page asked for a non-loopback URL (blocked): {u}" for u in self.offsite_requests]
        found += [f"connection left loopback: {c}" for c in self.remote_connections]
        found += [f"still running after the kernel shut down (killed): {p}" for p in self.leftover_processes]
        return found

    @property
    def passed(self) -> bool:
        return not self.problems()

    def report(self) -> str:
        """A failure message: the notebook, every problem, and where the screenshots are."""
        lines = [f"{self.name}: {len(self.problems())} problem(s) in {self.duration_s:.0f} s"]
        lines += [f"  - {p}" for p in self.problems()]
        if self.artifacts is not None:
            lines.append(f"  screenshots: {self.artifacts}")
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """The JSON-able numbers and findings of this run (for results.json)."""
        return {
            "notebook": self.name, "passed": self.passed, "duration_s": round(self.duration_s, 1),
            "peak_kernel_tree_rss_mb": round(self.peak_rss_mb, 1), "peak_kernel_tree_pss_mb": round(self.peak_pss_mb, 1),
            "peak_kernel_tree_pss_by_kind_mb": self.peak_parts_mb,
            "residual_kernel_tree_pss_mb": round(self.residual_pss_mb, 1), "released": self.released,
            "code_cells": len(self.cells),
            "problems": self.problems(), "live_widgets": {k: len(v) for k, v in self.live.items()},
            "console_errors": self.console_errors[:20], "output_width_px": self.output_width,
            "artifacts": str(self.artifacts) if self.artifacts else None,
        }


def open_notebook(page: Any, lab: JupyterLab, name: str, timeout: float = 180.0) -> None:
    """Open ``lab/tree/<name>`` in a fresh workspace and wait until its kernel is idle."""
    page.goto(lab.url(f"lab/tree/{urllib.parse.quote(name)}?reset"), wait_until="domcontentloaded")
    page.wait_for_function("(name) => window.__rstream && window.__rstream.ready(name)", arg=name,
                           timeout=timeout * 1000, polling=250)
    # The file browser stays open, as a learner has it: the output area is then about 970 px wide.


def screenshot_cell(page: Any, cell: Any, path: Path, viewport: dict[str, int] = VIEWPORT) -> None:
    """Save ``cell`` (a locator) whole as a PNG at ``path``; the page's viewport is ``viewport``.

    The notebook scrolls inside its own panel, so a cell taller than that panel would come out cut, with
    JupyterLab's bars over it: for such a cell the viewport is made taller for the shot, then restored.
    """
    need = cell.evaluate("""(el) => {
        let s = el.parentElement;
        while (s && !(s.scrollHeight > s.clientHeight && /auto|scroll/.test(getComputedStyle(s).overflowY))) s = s.parentElement;
        return el.getBoundingClientRect().height + 24 - (s ? s.clientHeight : window.innerHeight);
    }""")
    grown = need > 0
    if grown:
        page.set_viewport_size({"width": viewport["width"], "height": min(16_000, viewport["height"] + int(need))})
    try:
        cell.scroll_into_view_if_needed()
        cell.screenshot(path=str(path), animations="disabled")
    finally:
        if grown:
            page.set_viewport_size(viewport)


def measure_tables(page: Any, name: str, selector: str,
                   shots: Path | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Every table inside the elements of notebook ``name`` that ``selector`` matches, measured as the page
    is (``"window": "normal"``) and again in ``NARROW_VIEWPORT`` (``"narrow"``); see ``NotebookRun.tables``.
    With ``shots``, saves each such element as the narrow window shows it, ``cell-NN-narrow[-i].png``.
    Returns the tables and the screenshots' paths. The page's viewport is ``VIEWPORT`` again on return;
    where no table is found, it was never changed."""
    tables = "([name, selector]) => window.__rstream.tables(name, selector)"
    found = [dict(t, window="normal") for t in page.evaluate(tables, [name, selector])]
    saved: list[str] = []
    if not found:
        return found, saved
    width = page.evaluate("(name) => window.__rstream.outputWidth(name)", name)
    resized = "([name, width, narrower]) => (window.__rstream.outputWidth(name) < width) === narrower"
    page.set_viewport_size(NARROW_VIEWPORT)
    try:
        page.wait_for_function(resized, arg=[name, width, True], polling="raf", timeout=30_000)
        found += [dict(t, window="narrow") for t in page.evaluate(tables, [name, selector])]
        if shots is not None:
            for cell in sorted({t["cell"] for t in found}):
                views = page.locator(f'[data-rstream-cell="{cell}"] {selector}')
                for i in range(views.count()):
                    path = shots / f"cell-{cell:02d}-narrow{f'-{i}' if i else ''}.png"
                    screenshot_cell(page, views.nth(i), path, NARROW_VIEWPORT)
                    saved.append(str(path))
    finally:
        page.set_viewport_size(VIEWPORT)
    page.wait_for_function(resized, arg=[name, width, False], polling="raf", timeout=30_000)
    return found, saved


def run_notebook(page: Any, name: str, lab: JupyterLab, artifacts: Path | None = None,
                 timeout: float = NOTEBOOK_TIMEOUT, screenshots: str = "all",
                 shutdown_kernel: bool = True, fit_tables: str | None = None) -> NotebookRun:
    """Open ``name``, Restart Kernel and Run All Cells, and report what a person would see.

    ``name`` is a path relative to the server's root (``01_wordcount.ipynb``). While cells run, samples
    every ``.rstream-live`` element's text and the kernel tree's RSS every ~250 ms. After the run, per code
    cell: execution count, error outputs, visible tracebacks, stderr boxes, widget errors, elements wider
    than the output area (unless they scroll inside a fitting ``overflow-x: auto|scroll`` box) and blank
    outputs. With ``artifacts``, writes the executed ``<artifacts>/<stem>/executed.ipynb`` and, as
    ``screenshots`` says ("all", "failures": only for a run with problems, "none"), ``cell-NN.png`` per code
    cell with output (NN its index in the notebook) and ``window.png``. With ``fit_tables`` (a CSS selector),
    measures the tables inside what it matches (``measure_tables``; in artifact mode also screenshots them in
    the narrow window): a table cut off is a problem of the run. With ``shutdown_kernel``, shuts the
    notebook's kernel down and reports what of its tree did not exit.
    """
    log = page_log(page)
    offsite_before, console_before = len(log.offsite), len(log.console_errors)
    connections_before = len(lab.remote_connections)
    open_notebook(page, lab, name)
    kernel_id = lab.kernel_id(name)
    if kernel_id is None:
        raise RuntimeError(f"{name}: no kernel session after opening it")

    started = time.monotonic()
    page.evaluate("([name, cmd]) => window.__rstream.start(name, cmd)", [name, "notebook:restart-run-all"])
    page.locator(".jp-Dialog .jp-Dialog-button.jp-mod-accept").click(timeout=60_000)

    peak, peak_pss, kernel, argv0 = 0, 0, None, None
    peak_parts: dict[str, int] = {}
    live: dict[str, list[str]] = {}
    finished, state, samples = False, {}, 0
    while True:
        state = page.evaluate("(name) => window.__rstream.sample(name)", name)
        if kernel is None or not kernel.is_running():
            kernel = lab.kernel_process(kernel_id)
            if kernel is not None:
                with contextlib.suppress(psutil.Error):
                    argv0 = kernel.cmdline()[0]
        parts: dict[str, int] = {}
        rss, pss = kernel_tree_memory(kernel, parts=parts)
        if pss > peak_pss:
            peak_parts = parts
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        samples += 1
        if samples % 4 == 0:
            lab.check_connections(lab.track())
        running = not state["settled"] or state["executing"]
        if running:
            for item in state["live"]:
                seen = live.setdefault(item["key"], [])
                if item["text"] not in seen:
                    seen.append(item["text"])
        elif state["kernel"] != "busy":
            # idle (a notebook's release button is only drawn, not clicked, by Run All): every output is in
            finished = True
            break
        if time.monotonic() - started > timeout:
            break
        time.sleep(SAMPLE_EVERY)
    duration = time.monotonic() - started
    lab.check_connections(lab.track())
    for item in state["live"]:  # a live view still on the page that was never seen while cells ran
        live.setdefault(item["key"], [])

    collected = page.evaluate("(name) => window.__rstream.collect(name)", name)
    run = NotebookRun(
        name=name, duration_s=duration, finished=finished, run_value=state.get("value"),
        run_error=state.get("error"), kernel_status=state.get("kernel", "?"), kernel_argv0=argv0,
        peak_rss_mb=peak / 2**20, peak_pss_mb=peak_pss / 2**20,
        peak_parts_mb={k: round(v / 2**20) for k, v in sorted(peak_parts.items(), key=lambda kv: -kv[1])},
        residual_pss_mb=0.0,  # measured below: after the release button's click, where the notebook has one
        cells=[CellReport(**c) for c in collected["cells"]], live=live,
        offsite_requests=log.offsite[offsite_before:], remote_connections=lab.remote_connections[connections_before:],
        console_errors=log.console_errors[console_before:], leftover_processes=[],
        output_width=collected["output_width"], artifacts=None, notebook=collected["notebook"],
    )
    if artifacts is not None:
        run.artifacts = Path(artifacts) / Path(name).stem
        run.artifacts.mkdir(parents=True, exist_ok=True)
    if fit_tables:  # before the kernel goes, while the widget views are drawn
        run.tables, saved = measure_tables(page, name, fit_tables, run.artifacts if screenshots == "all" else None)
        run.screenshots += saved
    if run.artifacts is not None:
        out = run.artifacts
        (out / "executed.ipynb").write_text(json.dumps(collected["notebook"], indent=1))
        if screenshots == "all" or (screenshots == "failures" and run.problems()):
            for cell in run.cells:
                if cell.outputs == 0:
                    continue
                path = out / f"cell-{cell.index:02d}.png"
                screenshot_cell(page, page.locator(f'[data-rstream-cell="{cell.index}"]'), path)
                cell.screenshot = str(path)
                run.screenshots.append(str(path))
            page.screenshot(path=str(out / "window.png"))
            run.screenshots.append(str(out / "window.png"))
    if finished:
        # a learner's last step: the release button (Run All only draws it); then nothing of the kernel is left
        run.released = click_release(page, run.artifacts)
        run.residual_pss_mb = residual_memory(kernel, wait=120.0 if run.released else 10.0) / 2**20
    if shutdown_kernel:
        run.leftover_processes = lab.shutdown_kernel(name)
    return run


def click_release(page: Any, shots: Path | None = None, timeout: float = 180.0) -> str | None:
    """Click the notebook's release button (``rstream.widgets.release_button``), as a learner does when done,
    and wait until it says what it did; returns that text (None: the notebook shows no such button). With
    ``shots``, saves its cell afterwards as ``cell-NN-released.png``."""
    buttons = page.locator(".rstream-release button")
    if buttons.count() == 0:
        return None
    box = page.locator(".rstream-release").last
    button = buttons.last
    button.scroll_into_view_if_needed()
    button.click()
    page.wait_for_function("(el) => el.innerText.includes('Spark stopped')", arg=box.element_handle(),
                           timeout=timeout * 1000, polling=250)
    text = box.inner_text()
    if shots is not None:
        cell = box.locator("xpath=ancestor::*[@data-rstream-cell][1]")
        index = cell.get_attribute("data-rstream-cell")
        screenshot_cell(page, cell, shots / f"cell-{int(index or 0):02d}-released.png")
    return text

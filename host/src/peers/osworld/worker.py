"""pincer's OSWorld scorer: calls OSWorld's own metric functions (the pinned desktop-env
package) on end states pincer's getters fetched, and combines them as OSWorld's
DesktopEnv.evaluate() does. pincer starts it sandboxed (bubblewrap: no network, read-only
system, only the fetched files writable) and speaks JSON lines with it: one request per
line on stdin, one reply per line on the stdout it had at start. Everything else a metric
prints goes to a buffer returned with the reply (metrics print their arguments).

A request: {"id": N, "metrics": [[module, name], ...], "single": bool, "conj": "and"|"or",
"calls": [{"result": VALUE, "expected": VALUE, "has_expected": bool, "options": {...},
"result_getter": GETTER, "expected_getter": GETTER}]}, where a GETTER (optional) is one
of OSWorld's own getters to call for the value: {"module": M, "name": N, "config": {...},
"home": DIR, "cache": DIR}, run on the guest files pincer fetched into DIR.
A reply: {"id": N, "score": float, "scores": [float, ...], "output": str} or
{"id": N, "error": str, "traceback": str, "output": str}.
"""

import contextlib
import importlib
import importlib.metadata
import io
import json
import os
import sys
import traceback
import types

# Libraries that metric modules import at their top level but pincer does not install
# (torch through easyocr, numba through librosa, OpenCV, chromaprint, an unused AGPL one).
# Placeholders satisfy the import; pincer refuses, before calling, any metric that needs
# one (a placeholder cannot be trusted to fail loudly: several metrics catch everything).
STUBS = ("easyocr", "borb.pdf", "cv2", "acoustid", "librosa", "fastdtw")

# What the getters package imports for the getters pincer does not call in the worker
# (Chrome's live pages through playwright, Google Drive).
GETTER_STUBS = ("playwright.sync_api", "pydrive.auth", "pydrive.drive")


class MissingLibrary(BaseException):
    pass


class _Placeholder:
    def __init__(self, lib, name):
        self._lib, self._name = lib, name

    def __call__(self, *a, **k):
        raise MissingLibrary(f"{self._lib}.{self._name}: {self._lib} is not installed")

    def __getattr__(self, a):
        if a.startswith("__"):
            raise AttributeError(a)
        return _Placeholder(self._lib, self._name + "." + a)


def _stub(names):
    for full in names:
        parts = full.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            try:
                importlib.import_module(name)
                continue
            except ImportError:
                pass
            m = types.ModuleType(name)
            m.__path__ = []

            def getattr_(a, name=name):
                if a.startswith("__"):
                    raise AttributeError(a)
                return _Placeholder(name, a)

            m.__getattr__ = getattr_
            sys.modules[name] = m


def _packages():
    """Registers desktop_env's packages without running their __init__ (metrics/__init__
    imports every module, torch included), so one metric module loads on its own."""
    root = None
    for p in sys.path:
        cand = os.path.join(p, "desktop_env")
        if os.path.isfile(os.path.join(cand, "evaluators", "metrics", "table.py")):
            root = cand
            break
    if root is None:
        raise SystemExit("desktop_env is not installed in this environment")
    for name, sub in (
        ("desktop_env", ""),
        ("desktop_env.evaluators", "evaluators"),
        ("desktop_env.evaluators.metrics", "evaluators/metrics"),
        ("desktop_env.evaluators.getters", "evaluators/getters"),
    ):
        m = types.ModuleType(name)
        m.__path__ = [os.path.join(root, sub) if sub else root]
        m.__package__ = name
        sys.modules[name] = m


def _offline_tldextract():
    """tldextract fetches the public suffix list on first use; the sandbox has no network,
    so use the snapshot it ships, without a cache."""
    try:
        import tldextract
    except ImportError:
        return
    tldextract.extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


class _Guest:
    """OSWorld's controller as its profile getters use it, over the files pincer fetched
    (at their paths under `home`, which stands for the guest's /home/user)."""

    def __init__(self, home):
        self.home = home

    def execute_python_command(self, command):
        # The getters ask where a file lives: `import os; print(os.path.join(
        # os.getenv('HOME'), ...))`, code of the pinned package, answered for /home/user.
        buf = io.StringIO()
        saved = os.environ.get("HOME")
        os.environ["HOME"] = "/home/user"
        try:
            with contextlib.redirect_stdout(buf):
                exec(command, {})
        finally:
            if saved is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = saved
        return {"status": "success", "output": buf.getvalue(), "error": "", "returncode": 0}

    def get_file(self, path):  # PythonController.get_file: bytes, or None when missing
        if path != "/home/user" and not path.startswith("/home/user/"):
            return None
        try:
            with open(self.home + path[len("/home/user"):], "rb") as f:
                return f.read()
        except OSError:
            return None


def _value(c, key):
    g = c.get(key + "_getter")
    if g is None:
        return c[key]
    fn = getattr(importlib.import_module("desktop_env.evaluators.getters." + g["module"]),
                 "get_" + g["name"])
    env = types.SimpleNamespace(vm_platform="Linux", controller=_Guest(g["home"]),
                                cache_dir=g["cache"])
    return fn(env, g["config"])


def _number(value):
    # Metrics return float, int, bool, numpy numbers or None (OSWorld's result.txt then
    # reads "None", which its summary counts as 0).
    if value is None:
        return 0.0
    return float(value)


def evaluate(req):
    """desktop_env.py's evaluate() (1.0.2) after postconfig and the infeasible checks, with
    the getters' values given."""
    fns = [
        getattr(importlib.import_module("desktop_env.evaluators.metrics." + mod), name)
        for mod, name in req["metrics"]
    ]
    calls = req["calls"]

    def call(fn, c):
        result = _value(c, "result")
        if c["has_expected"]:
            return fn(result, _value(c, "expected"), **c["options"])
        return fn(result, **c["options"])

    if req["single"]:
        m = _number(call(fns[0], calls[0]))
        return m, [m]
    conj = req["conj"]
    results = []
    for fn, c in zip(fns, calls):
        m = _number(call(fn, c))
        if conj == "and" and m == 0.0:
            return 0.0, results + [m]
        elif conj == "or" and m == 1.0:
            return 1.0, results + [m]
        results.append(m)
    if conj == "and":
        return sum(results) / len(results), results
    return max(results), results


def main():
    out = sys.stdout
    # Nothing a metric prints may reach the protocol stream.
    sys.stdout = sys.stderr
    _stub(STUBS)
    _stub(GETTER_STUBS)
    _packages()
    _offline_tldextract()
    version = importlib.metadata.version("desktop-env")
    out.write(json.dumps({"ready": True, "desktop_env": version}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        buf = io.StringIO()
        try:
            req = json.loads(line)
        except ValueError as e:
            out.write(json.dumps({"id": None, "error": f"bad request: {e}"}) + "\n")
            out.flush()
            continue
        reply = {"id": req.get("id")}
        try:
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                score, scores = evaluate(req)
            reply.update(score=score, scores=scores)
        except BaseException as e:  # noqa: B036 - a metric's failure is a reply, not an exit
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            reply.update(
                error=f"{type(e).__name__}: {e}",
                traceback=traceback.format_exc(limit=8),
            )
        reply["output"] = buf.getvalue()[-4000:]
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

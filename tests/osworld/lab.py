"""The fidelity lab for pincer's OSWorld scoring (tests/tests/osworld.rs): it makes end
states (result files in a desktop's home, gold files in an OSWorld file cache) and scores
them with OSWorld's own code, so the test can compare with what pincer scores.

OSWorld's own code means DesktopEnv.evaluate() and _set_evaluator_info() taken from the
pinned desktop-env's desktop_env.py unchanged (compiled from its source; the class itself
cannot be imported without torch and a VM provider), its getters from its getters
package (Chrome's profile getters included, which pincer also runs in OSWorld's code but
on the files it fetched), its SetupController for the postconfig commands whose output the cache_file
getter reads, and its metrics. What stands in for OSWorld's VM: a controller whose get_file
reads the desktop's home for /home/user (pincer's mapping), whose get_vm_directory_tree and
get_vm_wallpaper do what OSWorld's server does for those routes, and an HTTP server on
loopback answering /execute as OSWorld's VM server does (its code for that route, in the
desktop's home), so get_vm_command_line runs unchanged. It runs with the scorer environment's Python, outside
the sandbox: it is test tooling over files the test made.

JSON lines on stdin and stdout: {"op": "prepare", "out": DIR, "fixture": DIR} writes an
OSWorld folder (the real tasks the cases use, and synthetic ones for metrics whose real
tasks need getters pincer lacks) and answers the cases; {"op": "make", "case": NAME,
"home": DIR, "assets": DIR} writes a case's end state; {"op": "score", ...} the same
fields, answers {"score": x} or {"error": "..."}.
"""

import ast
import contextlib
import http.server
import importlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import types
import typing

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "pincer_worker",
    os.path.join(HERE, "..", "..", "host", "src", "peers", "osworld", "worker.py"),
)
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)

# --- OSWorld's machine, as far as its getters see it -----------------------------------

HOME = {"dir": None}


def guest_path(p):
    if p == "/home/user" or p.startswith("/home/user/"):
        p = HOME["dir"] + p[len("/home/user"):]
    return os.path.expanduser(p) if p.startswith("~") else p


def guest_command(c):
    if isinstance(c, str):
        return c.replace("/home/user", HOME["dir"])
    return [a.replace("/home/user", HOME["dir"]) for a in c]


class Execute(http.server.BaseHTTPRequestHandler):
    """OSWorld's server, route /execute (desktop_env/server/main.py, execute_command)."""

    def log_message(self, *a):
        pass

    def do_POST(self):
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        shell = data.get("shell", False)
        command = guest_command(data.get("command", "" if shell else []))
        if isinstance(command, str) and not shell:
            command = shlex.split(command)
        for i, arg in enumerate(command):
            if arg.startswith("~/"):
                command[i] = os.path.expanduser(arg)
        try:
            result = subprocess.run(
                command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, shell=shell,
                text=True, timeout=120, cwd=HOME["dir"],
            )
            body, code = {"status": "success", "output": result.stdout,
                          "error": result.stderr, "returncode": result.returncode}, 200
        except Exception as e:  # as the server answers
            body, code = {"status": "error", "message": str(e)}, 500
        out = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


class Controller:
    def get_file(self, path):  # PythonController.get_file: bytes, or None when missing
        try:
            with open(guest_path(path), "rb") as f:
                return f.read()
        except OSError:
            return None

    def get_vm_directory_tree(self, path):
        """PythonController.get_vm_directory_tree over the server's /list_directory route
        (get_directory_tree): the tree, or None when the path is not a directory."""
        def _list_dir_contents(directory):
            tree = {'type': 'directory', 'name': os.path.basename(directory), 'children': []}
            try:
                for entry in os.listdir(directory):
                    full_path = os.path.join(directory, entry)
                    if os.path.isdir(full_path):
                        tree['children'].append(_list_dir_contents(full_path))
                    else:
                        tree['children'].append({'type': 'file', 'name': entry})
            except OSError as e:
                tree = {'error': str(e)}
            return tree

        start_path = guest_path(path)
        if not os.path.isdir(start_path):
            return None
        return _list_dir_contents(start_path)

    def get_vm_wallpaper(self):
        """PythonController.get_vm_wallpaper over the server's /wallpaper route
        (get_wallpaper_linux, send_file): the file's bytes, or None."""
        try:
            output = subprocess.check_output(
                ["gsettings", "get", "org.gnome.desktop.background", "picture-uri"],
                stderr=subprocess.PIPE)
            path = output.decode('utf-8').strip().replace('file://', '').replace("'", "")
        except subprocess.CalledProcessError:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            return None

    def execute_python_command(self, command):
        """PythonController.execute_python_command: the command's output, as the guest
        prints it (getters ask where a file lives, such as VLC's vlcrc)."""
        out = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True,
                             env={**os.environ, "HOME": HOME["dir"]})
        return {"status": "success", "output": out.stdout, "error": out.stderr,
                "returncode": out.returncode}


class Setup:
    """The lab scores end states: what a task's postconfig would do (save the file) is
    already in the end state the lab made, as pincer's finalize steps are not run by
    `task check --no-setup` either. Commands whose output the task keeps for cache_file
    are the exception (pincer runs them when it judges): OSWorld's own SetupController
    runs those against the lab's /execute and writes their output into the cache."""

    def __init__(self, port, cache):
        worker._stub(("playwright.sync_api", "pydrive.auth", "pydrive.drive",
                      "requests_toolbelt.multipart.encoder"))
        dotenv = types.ModuleType("dotenv")
        dotenv.load_dotenv = lambda *a, **k: False
        sys.modules.setdefault("dotenv", dotenv)
        from desktop_env.controllers.setup import SetupController
        self.controller = SetupController("127.0.0.1", server_port=port, cache_dir=cache)

    def setup(self, config, use_proxy=False):
        kept = [c for c in config if c["type"] in ("execute", "command")
                and ("stdout" in c["parameters"] or "stderr" in c["parameters"])]
        return self.controller.setup(kept) if kept else True


def osworld_env_class():
    """DesktopEnv's _set_evaluator_info and evaluate, compiled from desktop-env's source."""
    root = os.path.dirname(importlib.util.find_spec("desktop_env.evaluators.metrics.general").origin)
    source_path = os.path.join(root, "..", "..", "desktop_env.py")
    tree = ast.parse(open(source_path).read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DesktopEnv")
    fns = [n for n in cls.body if isinstance(n, ast.FunctionDef)
           and n.name in ("_set_evaluator_info", "evaluate")]
    assert len(fns) == 2
    module = ast.Module(body=[ast.ClassDef(name="Env", bases=[], keywords=[], body=fns,
                                           decorator_list=[])], type_ignores=[])
    ns = dict(vars(typing))
    ns.update(metrics=Metrics(), getters=Getters(), logger=__import__("logging").getLogger("lab"),
              Metric=typing.Any, Getter=typing.Any)
    exec(compile(ast.fix_missing_locations(module), source_path, "exec"), ns)
    return ns["Env"]


class Metrics:
    """desktop_env.evaluators.metrics without its __init__: a name is looked up in the
    module that defines it."""

    def __getattr__(self, name):
        base = os.path.dirname(importlib.util.find_spec("desktop_env.evaluators.metrics.general").origin)
        for f in sorted(os.listdir(base)):
            if f.endswith(".py") and f"\ndef {name}(" in open(os.path.join(base, f)).read():
                m = importlib.import_module("desktop_env.evaluators.metrics." + f[:-3])
                return getattr(m, name)
        raise AttributeError(name)


class Getters:
    def __getattr__(self, name):
        for mod in ("file", "misc", "general", "vlc", "gimp", "info", "chrome"):
            m = importlib.import_module("desktop_env.evaluators.getters." + mod)
            if hasattr(m, name):
                return getattr(m, name)
        raise AttributeError(name)


def score(evaluator, task_id, assets, port, env_class):
    with tempfile.TemporaryDirectory() as cache:
        env = env_class()
        env.cache_dir = cache
        src = os.path.join(assets, task_id)
        if os.path.isdir(src):
            shutil.copytree(src, cache, dirs_exist_ok=True)
        env.controller = Controller()
        env.setup_controller = Setup(port, cache)
        env.enable_proxy = False
        env.vm_ip = "127.0.0.1"
        env.vm_platform = "Linux"
        env.server_port = port
        env.action_history = ["DONE"]
        env._set_evaluator_info({"evaluator": evaluator})
        return float(env.evaluate())


# --- End states -------------------------------------------------------------------------

def xlsx(rows, title="Sheet1", text=(), formula=None):
    import openpyxl
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = title
    for r in rows:
        ws.append(r)
    for cell in text:
        ws[cell].value = str(ws[cell].value)
        ws[cell].data_type = "s"
    if formula:
        ws[formula[0]] = formula[1]
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def docx(paragraphs, table=None):
    import docx as d
    doc = d.Document()
    for p in paragraphs:
        doc.add_paragraph(p)
    if table:
        t = doc.add_table(rows=len(table), cols=len(table[0]))
        for i, row in enumerate(table):
            for j, v in enumerate(row):
                t.cell(i, j).text = v
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def pptx(text, left_in=1.0):
    from pptx import Presentation
    from pptx.util import Inches
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(left_in), Inches(1), Inches(4), Inches(1))
    box.text_frame.text = text
    buf = io.BytesIO()
    prs.save(buf)
    return buf.getvalue()


def pdf(text):
    import fitz
    doc = fitz.open()
    page = doc.new_page()
    page.insert_text((72, 72), text)
    return doc.tobytes()


def image(shift=0, fmt="GIF", mode="L"):
    from PIL import Image, ImageDraw
    im = Image.new(mode, (64, 64), 255)
    ImageDraw.Draw(im).rectangle([16 + shift, 16, 40 + shift, 40], fill=0)
    buf = io.BytesIO()
    im.save(buf, fmt)
    return buf.getvalue()


def archive(members):
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def libreoffice(data, ext):
    """The file as LibreOffice writes it: opened and saved again by soffice."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "in", "file." + ext)
        os.makedirs(os.path.dirname(src))
        open(src, "wb").write(data)
        out = os.path.join(d, "out")
        subprocess.run(
            ["soffice", f"-env:UserInstallation=file://{d}/profile", "--headless",
             "--convert-to", ext, "--outdir", out, src],
            check=True, capture_output=True, timeout=180,
        )
        return open(os.path.join(out, "file." + ext), "rb").read()


TABLE = [["Name", "Days"], ["bond", 8]]
DOC = ["Meeting notes", "Budget approved"]
PRICES = [["item", "price"], ["tea", "3"]]

CALC = "libreoffice_calc/4172ea6e-6b77-4edb-a9cc-c0014bd1603b"
DOCS = "multi_apps/aad10cd7-9337-4b62-b704-a857848cedf2"
SLIDES = "libreoffice_impress/a669ef01-ded5-4099-9ea9-25e99b569840"
TEXT = "multi_apps/acb0f96b-e27c-44d8-b55f-7cb76609dfcd"
CSV = "libreoffice_calc/3aaa4e37-dc91-482e-99af-132a612d40f3"
DOC_TABLE = "multi_apps/81c425f5-78f3-4771-afd6-3d2973825947"
SETTINGS = "vs_code/9d425400-e9b2-4424-9a4b-d4c7abac4140"
YAML = "multi_apps/e2392362-125e-4f76-a2ee-524b183a3412"
PREFS = "thunderbird/94760984-3ff5-41ee-8347-cf1af709fea0"
IMAGES = "multi_apps/2fe4b718-3bd7-46ec-bdce-b184f5653624"
ARCHIVE = "multi_apps/0e5303d4-8820-42f6-b18d-daf7e633de21"
PDF_DOC = "multi_apps/68a25bd4-59c7-4f4d-975e-da0c8509c848"
STRUCTURE = "multi_apps/e8172110-ec08-421b-a6f5-842e6451911f"
EXISTS = "os/5ea617a3-0e86-4ba6-aab2-dac9aa2e8d57"
WHICH = "os/94d95f96-9699-4208-98ba-3c3119edf9c2"

YML = "name: Test Account\nauthor:\n  name: Test Account\n  email: Test@gmail.com\n"


def synthetic(id_, func, result, expected, **extra):
    ev = {"func": func, "result": result, "expected": expected}
    ev.update(extra)
    return "pincer_lab/" + id_, {"id": id_, "instruction": "(a fidelity case)", "config": [],
                                 "evaluator": ev}


def cmd(c):
    return {"type": "vm_command_line", "command": c, "shell": True}


def rule(r):
    return {"type": "rule", "rules": r}


SYNTHETIC = dict([
    synthetic("lab-json", "check_direct_json_object", cmd("cat ~/answer.json"),
              rule({"expected": {"money": "over $60"}})),
    synthetic("lab-include", "check_include_exclude", cmd("cat ~/names.txt"),
              rule({"include": ["a.txt"], "exclude": ["b.txt"]})),
    synthetic("lab-url", "is_expected_url_pattern_match", cmd("cat ~/url.txt"),
              rule({"expected": ["^https://www\\.example\\.com/.*q=pincer"]})),
    synthetic("lab-list", "check_list",
              {"type": "vm_file", "path": "/home/user/list.txt", "dest": "list.txt"},
              rule({"expect": ["^alpha"], "unexpect": ["^beta"]})),
    synthetic("lab-in-list", "is_in_list", cmd("cat ~/out.txt"),
              rule({"expected": "packages in environment at"})),
    synthetic("lab-extension", "is_extension_installed", cmd("cat ~/ext.txt"),
              rule({"type": "contain", "expected": "ms-python.python"})),
    synthetic("lab-config", "compare_config",
              {"type": "vm_file", "path": "/home/user/cfg.txt", "dest": "cfg.txt"},
              rule({"expected": "a=1\n"})),
    # Chrome's getters are not pincer's yet; the rule getter hands the metric the same
    # shapes (the active tab's info, the open tabs), so the metrics (and tldextract,
    # offline in the sandbox) are compared all the same.
    synthetic("lab-active-tab", "is_expected_active_tab",
              rule({"url": "https://www.Example.com/path/"}),
              rule({"type": "url", "url": "https://www.example.com/path"})),
    synthetic("lab-tabs", "is_expected_tabs",
              rule([{"url": "https://a.example.com/"}, {"url": "https://b.example.org/x"}]),
              rule({"type": "url", "urls": ["https://a.example.com", "https://b.example.org/x"]})),
    synthetic("lab-tabs-wrong", "is_expected_tabs",
              rule([{"url": "https://a.example.com/"}]),
              rule({"type": "url", "urls": ["https://a.example.com", "https://b.example.org/x"]})),
    synthetic("lab-bookmarks", "is_expected_bookmarks",
              rule({"bookmark_bar": {"children": [
                  {"type": "folder", "name": "Work", "children": []},
                  {"type": "url", "name": "pincer", "url": "https://example.com/"}]}}),
              rule({"type": "bookmark_bar_folders_names", "names": ["Work"]})),
    synthetic("lab-bookmarks-wrong", "is_expected_bookmarks",
              rule({"bookmark_bar": {"children": [{"type": "folder", "name": "Play", "children": []}]}}),
              rule({"type": "bookmark_bar_folders_names", "names": ["Work"]})),
    synthetic("lab-diff", "diff_text_file",
              {"type": "vm_file", "path": "/home/user/poem.txt", "dest": "poem.txt"},
              {"type": "cloud_file", "path": "https://example.invalid/poem.txt", "dest": "poem_gold.txt"}),
    synthetic("lab-gimp", "check_config_status",
              {"type": "vm_file", "path": "/home/user/.config/GIMP/2.10/sessionrc", "dest": "sessionrc"},
              rule({"key": ["session-info", "toolbox"], "value": "yes"})),
    synthetic("lab-stderr", "check_include_exclude",
              {"type": "vm_command_error", "command": "cat ~/err.txt 1>&2", "shell": True},
              rule({"include": [], "exclude": ["Error:"]})),
    synthetic("lab-or", ["exact_match", "exact_match"],
              [cmd("cat ~/one.txt"), cmd("cat ~/two.txt")],
              [rule({"expected": "yes\n"}), rule({"expected": "yes\n"})], conj="or"),
    synthetic("lab-and-graded", ["compare_images", "exact_match"],
              [{"type": "vm_file", "path": "/home/user/pic.gif", "dest": "pic.gif"},
               cmd("cat ~/one.txt")],
              [{"type": "cloud_file", "path": "https://example.invalid/pic.gif",
                "dest": "pic_gold.gif"}, rule({"expected": "yes\n"})]),
])

BGCONE = "vlc/215dfd39-f493-4bc3-a027-8a97d72c61bf"
MAX_VOLUME = "vlc/9195653c-f4aa-453d-aa95-787f6ccfaae9"

# cache_file over postconfig output (9 tasks), gimp_config_file (5), list_directory,
# default_video_player, vm_wallpaper.
LOCAL_FOLDERS = "thunderbird/2ad9387a-65d8-4e33-ad5b-7580065a27ca"
EMAILS_BAK = "thunderbird/06fe7178-4491-4589-810f-2e2bc9502122"
GIMP_THEME = "gimp/7767eef2-56a3-4cea-8c9f-48c070c7d65b"
MOVED_JPGS = "os/23393935-50c7-4a86-aeea-2b78fd089c5c"
VIDEO_PLAYER = "multi_apps/937087b6-f668-4ba6-9110-60682ee33441"
WALLPAPER = "multi_apps/c2751594-0cd5-4088-be1b-b5f2f9ec97c4"
FOLDERS = ".thunderbird/t5q2a5hp.default-release/Mail/Local Folders/"
WELCOME = "\u6b61\u8fce\u4f7f\u7528\u65b0\u7684 Outlook.com \u5e33\u6236"
VLC_DESKTOP = b"[Desktop Entry]\nType=Application\nName=VLC\nExec=vlc %U\nMimeType=video/mp4;\n"

# Chrome's profile getters, run in OSWorld's own code on the files pincer fetched.
SEARCH_ENGINE = "chrome/bb5e4c0d-f964-439c-97b6-bdb9747de3f4"
DO_NOT_TRACK = "chrome/030eeff7-b492-4218-b312-701ec99ee0cc"
FONT_SIZE = "chrome/af630914-714e-4a24-a7bb-f9af687d3b91"
EXPERIMENTS = "chrome/480bcfea-d68f-4aaa-a0a9-2589ef319381"
HISTORY = "chrome/44ee5668-ecd5-4366-a6ce-c1c9b8d4e938"
PROFILE_NAME = "chrome/2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3"
ENHANCED = "chrome/9656a811-9b5b-4ddf-99c7-5117bcef0626"
STARTUP = "chrome/3299584d-8f11-4457-bf4c-ce98f7600250"
DATA_DELETE = "chrome/99146c54-4f37-4ab8-9327-5f3291665e1e"
UNPACKED = "chrome/6766f2b8-8a72-417f-a9e5-56fcaa735837"
INSTALLED = "multi_apps/873cafdd-a581-47f6-8b33-b9696ddb7b05"
BOOKMARKS = "chrome/2ad9387a-65d8-4e33-ad5b-7580065a27ca"
COOKIES = "chrome/7b6c7e24-c58a-49fc-a5bb-d57b80e5b4c3"
CHROME = ".config/google-chrome/"


def prefs(data):
    return lambda: json.dumps(data).encode()


SONGS = [("Cheng Xiang", "Missing You"), ("Han Baoyi", "Tears of Dancing Girl"),
         ("Huang An", "I Know Missing is Painful"), ("Chen Shaohua", "Red Daughter"),
         ("Zhou Xuan", "Nights in Shanghai")]


def mp3(artist, title):
    """A file with an ID3 tag (mutagen writes the tag; `None` leaves the file untagged)."""
    def make():
        from mutagen.easyid3 import EasyID3
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "song.mp3")
            open(path, "wb").write(b"\xff\xfb\x90\x00" + bytes(413))
            if title is not None:
                tag = EasyID3()
                tag["artist"], tag["title"] = artist, title
                tag.save(path)
            return open(path, "rb").read()
    return make


def songs(**changed):
    return {f"Music/{a} - {t}.mp3": mp3(a, changed.get(t, t)) for a, t in SONGS}


def sqlite(create, insert, rows):
    """A SQLite database (Chrome's History or Cookies) as bytes."""
    def make():
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "db")
            conn = sqlite3.connect(db)
            conn.execute(create)
            conn.executemany(insert, rows)
            conn.commit()
            conn.close()
            return open(db, "rb").read()
    return make


def history(urls):
    return sqlite("CREATE TABLE urls (id INTEGER PRIMARY KEY, url TEXT, title TEXT, last_visit_time INTEGER)",
                  "INSERT INTO urls (url, title, last_visit_time) VALUES (?, ?, 13300000000000000)",
                  [(u, u) for u in urls])


def cookies(hosts):
    return sqlite("CREATE TABLE cookies (creation_utc INTEGER, host_key TEXT, name TEXT)",
                  "INSERT INTO cookies VALUES (13300000000000000, ?, 'id')", [(h,) for h in hosts])


def extensions(*found):
    return prefs({"extensions": {"settings": {f"id{i}": {"path": path, "manifest": {"name": name}}
                                              for i, (path, name) in enumerate(found)}}})


MP3_META = "multi_apps/3f05f3b9-29ba-4b6b-95aa-2204697ffc06"
REAL = [MP3_META, SEARCH_ENGINE, DO_NOT_TRACK, FONT_SIZE, EXPERIMENTS, HISTORY, PROFILE_NAME, ENHANCED,
        STARTUP, DATA_DELETE, UNPACKED, INSTALLED, BOOKMARKS, COOKIES, LOCAL_FOLDERS, EMAILS_BAK, GIMP_THEME, MOVED_JPGS, VIDEO_PLAYER, WALLPAPER,
        BGCONE, MAX_VOLUME, CALC, DOCS, SLIDES, TEXT, CSV, DOC_TABLE, SETTINGS, YAML, PREFS, IMAGES, ARCHIVE,
        PDF_DOC, STRUCTURE, EXISTS, WHICH]


def case(task, guest=None, gold=None, dconf=None):
    """A task's end state: files in the home and the cache, and GSettings values (dconf
    paths to keys to GVariant text, `{home}` standing for the home)."""
    return {"task": task, "guest": guest or {}, "gold": gold or {}, "dconf": dconf or {}}


def lab_id(t):
    return t.split("/", 1)[1]


CASES = {
    # compare_table (60 tasks): the traps of the issue, and LibreOffice's own file.
    "table-same": case(CALC, {"MaturityDate.xlsx": lambda: xlsx(TABLE)},
                       {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-text-number": case(CALC, {"MaturityDate.xlsx": lambda: xlsx(TABLE, text=["B2"])},
                              {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-near-number": case(CALC, {"MaturityDate.xlsx": lambda: xlsx([TABLE[0], ["bond", 8.00001]])},
                              {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-renamed-sheet": case(CALC, {"MaturityDate.xlsx": lambda: xlsx(TABLE, title="Renamed")},
                                {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-formula-uncached": case(CALC, {"MaturityDate.xlsx": lambda: xlsx(TABLE, formula=("B2", "=1+7"))},
                                   {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-libreoffice": case(CALC, {"MaturityDate.xlsx": lambda: libreoffice(xlsx(TABLE), "xlsx")},
                              {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-wrong": case(CALC, {"MaturityDate.xlsx": lambda: xlsx([TABLE[0], ["bond", 9]])},
                        {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    "table-missing": case(CALC, {}, {"1_MaturityDate_gt1.xlsx": lambda: xlsx(TABLE)}),
    # compare_docx_files (14)
    "docx-same": case(DOCS, {"Desktop/notes.docx": lambda: docx(DOC)},
                      {"notes_Gold.docx": lambda: docx(DOC)}),
    "docx-extra-blank": case(DOCS, {"Desktop/notes.docx": lambda: docx(DOC + [""])},
                             {"notes_Gold.docx": lambda: docx(DOC)}),
    "docx-changed-word": case(DOCS, {"Desktop/notes.docx": lambda: docx(["Meeting notes", "Budget rejected"])},
                              {"notes_Gold.docx": lambda: docx(DOC)}),
    "docx-libreoffice": case(DOCS, {"Desktop/notes.docx": lambda: libreoffice(docx(DOC), "docx")},
                             {"notes_Gold.docx": lambda: docx(DOC)}),
    # compare_pptx_files (38)
    "pptx-same": case(SLIDES, {"Desktop/Writing-Outlines.pptx": lambda: pptx("Outline")},
                      {"Writing-Outlines_Gold.pptx": lambda: pptx("Outline")}),
    "pptx-moved": case(SLIDES, {"Desktop/Writing-Outlines.pptx": lambda: pptx("Outline", 1.5)},
                       {"Writing-Outlines_Gold.pptx": lambda: pptx("Outline")}),
    "pptx-changed": case(SLIDES, {"Desktop/Writing-Outlines.pptx": lambda: pptx("Outlines")},
                         {"Writing-Outlines_Gold.pptx": lambda: pptx("Outline")}),
    # compare_text_file (6)
    "text-same": case(TEXT, {"log.txt": lambda: b"a\nb\n"}, {"log_Gold.txt": lambda: b"a\nb\n"}),
    "text-newline": case(TEXT, {"log.txt": lambda: b"a\nb"}, {"log_Gold.txt": lambda: b"a\nb\n"}),
    "text-differs": case(TEXT, {"log.txt": lambda: b"a\nc\n"}, {"log_Gold.txt": lambda: b"a\nb\n"}),
    # compare_csv (4)
    "csv-same": case(CSV, {"Export_Calc_to_CSV.csv": lambda: b"a,b\n1,2\n"},
                     {"Export_Calc_to_CSV_gold.csv": lambda: b"a,b\n1,2\n"}),
    "csv-no-final-newline": case(CSV, {"Export_Calc_to_CSV.csv": lambda: b"a,b\n1,2"},
                                 {"Export_Calc_to_CSV_gold.csv": lambda: b"a,b\n1,2\n"}),
    "csv-differs": case(CSV, {"Export_Calc_to_CSV.csv": lambda: b"a,b\n1,3\n"},
                        {"Export_Calc_to_CSV_gold.csv": lambda: b"a,b\n1,2\n"}),
    # compare_docx_tables (4)
    "docx-table-same": case(DOC_TABLE, {"Desktop/price.docx": lambda: docx(["Prices"], PRICES)},
                            {"price_Gold.docx": lambda: docx(["Prices"], PRICES)}),
    "docx-table-cell": case(DOC_TABLE, {"Desktop/price.docx": lambda: docx(["Prices"], [PRICES[0], ["tea", "4"]])},
                            {"price_Gold.docx": lambda: docx(["Prices"], PRICES)}),
    # check_json_settings (7)
    "settings-match": case(SETTINGS, {".config/Code/User/settings.json": lambda: b'{"workbench.editor.wrapTabs": true}'}),
    "settings-mismatch": case(SETTINGS, {".config/Code/User/settings.json": lambda: b'{"workbench.editor.wrapTabs": false}'}),
    "settings-invalid": case(SETTINGS, {".config/Code/User/settings.json": lambda: b'{"workbench.editor'}),
    # check_json (3), YAML
    "yaml-match": case(YAML, {"Code/Website/academicpages.github.io/_config.yml": lambda: YML.encode()}),
    "yaml-mismatch": case(YAML, {"Code/Website/academicpages.github.io/_config.yml": lambda: YML.replace("Test@", "Tset@").encode()}),
    # check_thunderbird_prefs (4)
    "prefs-dark": case(PREFS, {".thunderbird/t5q2a5hp.default-release/prefs.js":
                               lambda: b'user_pref("extensions.activeThemeID", "thunderbird-compact-dark@mozilla.org");\n'}),
    "prefs-light": case(PREFS, {".thunderbird/t5q2a5hp.default-release/prefs.js":
                                lambda: b'user_pref("extensions.activeThemeID", "thunderbird-compact-light@mozilla.org");\n'}),
    # compare_images (7): graded
    "images-same": case(IMAGES, {"Desktop/src_clip.gif": lambda: image()}, {"src_clip_gold.gif": lambda: image()}),
    "images-shifted": case(IMAGES, {"Desktop/src_clip.gif": lambda: image(8)}, {"src_clip_gold.gif": lambda: image()}),
    # compare_archive (3): graded over the PDFs inside
    "archive-same": case(ARCHIVE, {"lecture_slides.zip": lambda: archive({"lecture_slides/a.pdf": pdf("Hello PDF world"), "lecture_slides/b.pdf": pdf("Second")})},
                         {"gold_lecture_slides.zip": lambda: archive({"lecture_slides/a.pdf": pdf("Hello PDF world"), "lecture_slides/b.pdf": pdf("Second")})}),
    "archive-one-changed": case(ARCHIVE, {"lecture_slides.zip": lambda: archive({"lecture_slides/a.pdf": pdf("Hello PDF planet"), "lecture_slides/b.pdf": pdf("Second")})},
                                {"gold_lecture_slides.zip": lambda: archive({"lecture_slides/a.pdf": pdf("Hello PDF world"), "lecture_slides/b.pdf": pdf("Second")})}),
    # compare_pdfs (9) and compare_docx_files under "and"
    "pdf-docx-same": case(PDF_DOC, {"paper01.pdf": lambda: pdf("Hello PDF world"), "ans.docx": lambda: docx(DOC)},
                          {"paper01_Gold.pdf": lambda: pdf("Hello PDF world"), "ans_Gold.docx": lambda: docx(DOC)}),
    "pdf-near-docx-same": case(PDF_DOC, {"paper01.pdf": lambda: pdf("Hello PDF planet"), "ans.docx": lambda: docx(DOC)},
                               {"paper01_Gold.pdf": lambda: pdf("Hello PDF world"), "ans_Gold.docx": lambda: docx(DOC)}),
    "pdf-same-docx-differs": case(PDF_DOC, {"paper01.pdf": lambda: pdf("Hello PDF world"), "ans.docx": lambda: docx(["x"])},
                                  {"paper01_Gold.pdf": lambda: pdf("Hello PDF world"), "ans_Gold.docx": lambda: docx(DOC)}),
    # check_structure_sim (4), two under "and"
    "structure-both": case(STRUCTURE, {f"Desktop/{n}": (lambda: image(fmt="PNG", mode="RGB")) for n in
                                       ("character_gimp.png", "character_code.png", "character_no_background_gold.png")}),
    "structure-one-off": case(STRUCTURE, {"Desktop/character_gimp.png": lambda: image(fmt="PNG", mode="RGB"),
                                          "Desktop/character_code.png": lambda: image(12, fmt="PNG", mode="RGB"),
                                          "Desktop/character_no_background_gold.png": lambda: image(fmt="PNG", mode="RGB")}),
    # exact_match (20) and check_include_exclude (18) over commands
    "exists-yes": case(EXISTS, {"Desktop/poster_party_night.webp": lambda: b"RIFF"}),
    "exists-no": case(EXISTS),
    "which-absent": case(WHICH),
    "json-single-quotes": case("pincer_lab/lab-json", {"answer.json": lambda: b"{'money': 'over $60'}\n"}),
    "json-mismatch": case("pincer_lab/lab-json", {"answer.json": lambda: b'{"money": "under $60"}'}),
    "json-not-json": case("pincer_lab/lab-json", {"answer.json": lambda: b"not json"}),
    "include-substring": case("pincer_lab/lab-include", {"names.txt": lambda: b"aa.txt\n"}),
    "include-excluded": case("pincer_lab/lab-include", {"names.txt": lambda: b"a.txt b.txt\n"}),
    "url-match": case("pincer_lab/lab-url", {"url.txt": lambda: b"https://www.example.com/search?q=pincer"}),
    "url-no-match": case("pincer_lab/lab-url", {"url.txt": lambda: b"https://www.example.org/?q=pincer"}),
    "list-pass": case("pincer_lab/lab-list", {"list.txt": lambda: b"alpha\ngamma\n"}),
    "list-unexpected": case("pincer_lab/lab-list", {"list.txt": lambda: b"alpha\nbeta\n"}),
    "in-list": case("pincer_lab/lab-in-list", {"out.txt": lambda: b"# packages in environment at /opt:\n"}),
    "extension-yes": case("pincer_lab/lab-extension", {"ext.txt": lambda: b"ms-python.python\n"}),
    "extension-no": case("pincer_lab/lab-extension", {"ext.txt": lambda: b"golang.go\n"}),
    "config-exact": case("pincer_lab/lab-config", {"cfg.txt": lambda: b"a=1\n"}),
    "config-no-newline": case("pincer_lab/lab-config", {"cfg.txt": lambda: b"a=1"}),
    "active-tab": case("pincer_lab/lab-active-tab"),
    "tabs": case("pincer_lab/lab-tabs"),
    "tabs-missing-one": case("pincer_lab/lab-tabs-wrong"),
    "bookmarks": case("pincer_lab/lab-bookmarks"),
    "bookmarks-wrong": case("pincer_lab/lab-bookmarks-wrong"),
    "diff-graded": case("pincer_lab/lab-diff", {"poem.txt": lambda: b"one\ntwo\nthree\nfour\n"},
                        {"poem_gold.txt": lambda: b"one\ntwo\n3\nfour\n"}),
    "gimp-config": case("pincer_lab/lab-gimp", {".config/GIMP/2.10/sessionrc": lambda: b"# GIMP sessionrc\n(session-info toolbox yes)\n"}),
    "gimp-config-no": case("pincer_lab/lab-gimp", {".config/GIMP/2.10/sessionrc": lambda: b"(session-info toolbox no)\n"}),
    # vlc_config (7 tasks) and vm_command_error
    "vlc-bgcone-off": case(BGCONE, {".config/vlc/vlcrc": lambda: b"[qt]\nqt-bgcone=0\n"}),
    # OSWorld reads a commented-out setting as set.
    "vlc-bgcone-commented": case(BGCONE, {".config/vlc/vlcrc": lambda: b"[qt]\n#qt-bgcone=0\n"}),
    "vlc-no-config": case(BGCONE),
    "vlc-max-volume": case(MAX_VOLUME, {".config/vlc/vlcrc": lambda: b"[qt]\nqt-max-volume=200\n"}),
    "vlc-max-volume-low": case(MAX_VOLUME, {".config/vlc/vlcrc": lambda: b"[qt]\nqt-max-volume=125\n"}),
    "stderr-clean": case("pincer_lab/lab-stderr", {"err.txt": lambda: b"warning: slow\n"}),
    "stderr-error": case("pincer_lab/lab-stderr", {"err.txt": lambda: b"Error: no module\n"}),
    "or-second": case("pincer_lab/lab-or", {"one.txt": lambda: b"no\n", "two.txt": lambda: b"yes\n"}),
    "or-neither": case("pincer_lab/lab-or", {"one.txt": lambda: b"no\n", "two.txt": lambda: b"nah\n"}),
    # cache_file: OSWorld keeps a postconfig command's output; pincer runs it at judgement.
    "kept-folders": case(LOCAL_FOLDERS, {FOLDERS + n: lambda: b"" for n in
                                         ("COMPANY.msf", "COMPANY/Inbox", "UNIVERSITY.msf", "UNIVERSITY/Inbox")}),
    "kept-folders-one-missing": case(LOCAL_FOLDERS, {FOLDERS + n: lambda: b"" for n in
                                                     ("COMPANY.msf", "COMPANY/Inbox")}),
    "kept-non-ascii-names": case(EMAILS_BAK, {"emails.bak/" + n: lambda: b"From: a\n" for n in
                                              (WELCOME + ".eml", "A Test E-mail.eml")}),
    "kept-no-folder": case(EMAILS_BAK),
    # gimp_config_file: None for a missing file.
    "gimp-theme-light": case(GIMP_THEME, {".config/GIMP/2.10/gimprc": lambda: b'(theme "Light")\n'}),
    "gimp-theme-dark": case(GIMP_THEME, {".config/GIMP/2.10/gimprc": lambda: b'(theme "Dark")\n'}),
    "gimp-no-gimprc": case(GIMP_THEME),
    # list_directory: a folder's tree; None when it is not there.
    "jpgs-moved": case(MOVED_JPGS, {"Desktop/cpjpg/" + n: lambda: b"jpg" for n in
                                    ("emnlp2023.jpg", "hk_group_photo.jpg", "hong-kong-china.jpg",
                                     "monk252520thailand252520wat252520arun252520scaled25255B225255D.jpg")}),
    "jpgs-one-short": case(MOVED_JPGS, {"Desktop/cpjpg/" + n: lambda: b"jpg" for n in
                                        ("emnlp2023.jpg", "hk_group_photo.jpg", "hong-kong-china.jpg")}),
    "jpgs-no-folder": case(MOVED_JPGS),
    # default_video_player: what xdg-mime names most often.
    "video-player-vlc": case(VIDEO_PLAYER, {
        ".config/mimeapps.list": lambda: b"[Default Applications]\nvideo/mp4=vlc.desktop\nvideo/webm=vlc.desktop\n",
        ".local/share/applications/vlc.desktop": lambda: VLC_DESKTOP}),
    "video-player-none": case(VIDEO_PLAYER),
    # vm_wallpaper: the file GNOME's picture-uri names (graded by compare_images).
    "wallpaper-same": case(WALLPAPER, {"Pictures/wall.png": lambda: image(fmt="PNG", mode="RGB")},
                           {"gold_background.png": lambda: image(fmt="PNG", mode="RGB")},
                           {"org/gnome/desktop/background": {"picture-uri": "'file://{home}/Pictures/wall.png'"}}),
    "wallpaper-shifted": case(WALLPAPER, {"Pictures/wall.png": lambda: image(8, fmt="PNG", mode="RGB")},
                              {"gold_background.png": lambda: image(fmt="PNG", mode="RGB")},
                              {"org/gnome/desktop/background": {"picture-uri": "'file://{home}/Pictures/wall.png'"}}),
    # Chrome's profile: a value, another, and no profile at all (the getters' defaults).
    "search-engine-bing": case(SEARCH_ENGINE, {CHROME + "Default/Preferences": prefs(
        {"default_search_provider_data": {"template_url_data": {"short_name": "Bing"}}})}),
    "search-engine-google": case(SEARCH_ENGINE, {CHROME + "Default/Preferences": prefs(
        {"default_search_provider_data": {"template_url_data": {"short_name": "Google"}}})}),
    "search-engine-no-profile": case(SEARCH_ENGINE),
    "do-not-track-on": case(DO_NOT_TRACK, {CHROME + "Default/Preferences": prefs({"enable_do_not_track": True})}),
    "do-not-track-broken": case(DO_NOT_TRACK, {CHROME + "Default/Preferences": lambda: b'{"enable_do_not_track": tr'}),
    "font-size-20": case(FONT_SIZE, {CHROME + "Default/Preferences": prefs(
        {"webkit": {"webprefs": {"default_font_size": 20}}})}),
    "font-size-default": case(FONT_SIZE, {CHROME + "Default/Preferences": prefs({})}),
    "experiments-on": case(EXPERIMENTS, {CHROME + "Local State": prefs({"browser": {"enabled_labs_experiments": [
        "chrome-refresh-2023@1", "chrome-webui-refresh-2023@1"]}})}),
    "experiments-one": case(EXPERIMENTS, {CHROME + "Local State": prefs({"browser": {"enabled_labs_experiments": [
        "chrome-refresh-2023@1"]}})}),
    "history-cleared": case(HISTORY, {CHROME + "Default/History": history(["https://example.com/"])}),
    "history-kept": case(HISTORY, {CHROME + "Default/History": history(["https://www.youtube.com/watch?v=1"])}),
    "profile-thomas": case(PROFILE_NAME, {CHROME + "Default/Preferences": prefs({"profile": {"name": "Thomas"}})}),
    "profile-person-1": case(PROFILE_NAME, {CHROME + "Default/Preferences": prefs({"profile": {"name": "Person 1"}})}),
    "enhanced-on": case(ENHANCED, {CHROME + "Default/Preferences": prefs({"safebrowsing": {"enhanced": True}})}),
    "enhanced-no-profile": case(ENHANCED),
    "startup-fresh": case(STARTUP, {CHROME + "Default/Preferences": prefs({})}),
    "startup-restore": case(STARTUP, {CHROME + "Default/Preferences": prefs({"session": {"restore_on_startup": 1}})}),
    "data-delete-set": case(DATA_DELETE, {CHROME + "Default/Preferences": prefs(
        {"profile": {"default_content_setting_values": {"cookies": 4}}})}),
    "data-delete-unset": case(DATA_DELETE, {CHROME + "Default/Preferences": prefs({"profile": {}})}),
    "unpacked-loaded": case(UNPACKED, {CHROME + "Default/Preferences": extensions(
        ("/home/user/Desktop/helloExtension", "Hello"))}),
    "unpacked-elsewhere": case(UNPACKED, {CHROME + "Default/Preferences": extensions(("/tmp/hello", "Hello"))}),
    "installed-some": case(INSTALLED, {CHROME + "Default/Preferences": extensions(
        ("/x", "Zoom Chrome Extension"), ("/y", "Momentum"))}),
    "bookmarks-favorites": case(BOOKMARKS, {CHROME + "Default/Bookmarks": prefs(
        {"roots": {"bookmark_bar": {"children": [{"type": "folder", "name": "Favorites", "children": []}]}}})}),
    "bookmarks-none": case(BOOKMARKS),
    "cookies-deleted": case(COOKIES, {CHROME + "Default/Cookies": cookies([".example.org"])}),
    "cookies-kept": case(COOKIES, {CHROME + "Default/Cookies": cookies([".amazon.com", ".example.org"])}),
    # check_mp3_meta (1 task, five metrics under "and"): ID3 tags.
    "mp3-tagged": case(MP3_META, songs()),
    "mp3-one-title-wrong": case(MP3_META, songs(**{"Red Daughter": "Red Daughters"})),
    "mp3-one-untagged": case(MP3_META, songs(**{"Missing You": None})),
    "and-graded": case("pincer_lab/lab-and-graded", {"pic.gif": lambda: image(8), "one.txt": lambda: b"yes\n"},
                       {"pic_gold.gif": lambda: image()}),
}


def prepare(out, fixture):
    examples = os.path.join(out, "examples")
    index = {}
    for t in REAL:
        domain, id_ = t.split("/")
        os.makedirs(os.path.join(examples, domain), exist_ok=True)
        shutil.copy(os.path.join(fixture, "examples", domain, id_ + ".json"),
                    os.path.join(examples, domain, id_ + ".json"))
        index.setdefault(domain, []).append(id_)
    for t, task in SYNTHETIC.items():
        domain, id_ = t.split("/")
        os.makedirs(os.path.join(examples, domain), exist_ok=True)
        json.dump(task, open(os.path.join(examples, domain, id_ + ".json"), "w"))
        index.setdefault(domain, []).append(id_)
    json.dump(index, open(os.path.join(out, "test_all.json"), "w"))
    return {"cases": [{"name": n, "task": c["task"]} for n, c in CASES.items()]}


WRITTEN = []


def make(c, home, assets):
    for p in WRITTEN:
        with contextlib.suppress(FileNotFoundError):
            os.remove(p)
    WRITTEN.clear()
    for rel, make_bytes in c["guest"].items():
        path = os.path.join(home, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").write(make_bytes())
        WRITTEN.append(path)
    if c["dconf"]:
        # GSettings reads the user's dconf database from the file, without the bus.
        with tempfile.TemporaryDirectory() as keyfiles:
            with open(os.path.join(keyfiles, "lab"), "w") as f:
                for path, keys in c["dconf"].items():
                    f.write(f"[{path}]\n")
                    f.writelines(f"{k}={v.format(home=home)}\n" for k, v in keys.items())
            db = os.path.join(home, ".config", "dconf", "user")
            os.makedirs(os.path.dirname(db), exist_ok=True)
            subprocess.run(["dconf", "compile", db, keyfiles], check=True)
            WRITTEN.append(db)
    for dest, make_bytes in c["gold"].items():
        path = os.path.join(assets, lab_id(c["task"]), dest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "wb").write(make_bytes())
        WRITTEN.append(path)


def evaluator_of(task, fixture_out):
    domain, id_ = task.split("/")
    return json.load(open(os.path.join(fixture_out, "examples", domain, id_ + ".json")))["evaluator"]


def main():
    worker._stub(worker.STUBS)
    worker._stub(worker.GETTER_STUBS)
    worker._packages()
    worker._offline_tldextract()
    env_class = osworld_env_class()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Execute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = sys.stdout
    sys.stdout = sys.stderr
    folder = {"dir": None}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "prepare":
                folder["dir"] = req["out"]
                reply = prepare(req["out"], req["fixture"])
            else:
                c = CASES[req["case"]]
                HOME["dir"] = req["home"]
                os.environ["HOME"] = req["home"]
                if req["op"] == "make":
                    make(c, req["home"], req["assets"])
                    reply = {"ok": True}
                else:
                    ev = evaluator_of(c["task"], folder["dir"])
                    with contextlib.redirect_stdout(io.StringIO()):
                        reply = {"score": score(ev, lab_id(c["task"]), req["assets"],
                                                server.server_address[1], env_class)}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()

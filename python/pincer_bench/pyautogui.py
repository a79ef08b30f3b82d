"""Translate the pyautogui code of OSWorld-style agents into pincer actions, without running it.

OSWorld agents answer with Python source such as::

    import pyautogui
    pyautogui.click(120, 300)
    pyautogui.typewrite('hello')
    pyautogui.press('enter')

This module reads that source with :mod:`ast` and never executes, imports or evaluates any
of it: each statement must be ``import pyautogui``, ``import time``, a call
``pyautogui.<function>(...)`` or ``time.sleep(...)`` whose arguments are literals (read with
:func:`ast.literal_eval`), or the settings ``pyautogui.FAILSAFE = True/False`` and
``pyautogui.PAUSE = <seconds>`` (ignored). Anything else is refused with
:class:`ActionRefused`, naming the line.

The result is a list of pincer action dicts (the JSON the host's ``actions::parse`` reads):

* ``{"action": "click" | "double_click" | "right_click", "target": {"x": X, "y": Y}}``
* ``{"action": "move", "target": {"x": X, "y": Y}}``
* ``{"action": "drag", "from": {"x": X, "y": Y}, "to": {"x": X, "y": Y}}``
* ``{"action": "scroll", "dx": DX, "dy": DY}``, with ``"target"`` when the call gave a point;
  ``dy`` counts notches down and ``dx`` notches right (``pyautogui.scroll(3)`` is ``dy = -3``)
* ``{"action": "type", "text": TEXT}``
* ``{"action": "key", "key": KEY}`` and ``{"action": "hotkey", "keys": [KEY, ...]}``
* ``{"action": "wait", "seconds": S}`` (``time.sleep``, at most ten seconds)

Each dict also has ``"env": ENV`` when the parser was given an environment role.

Semantics, following pyautogui 0.9.54:

* The pointer position is tracked across calls (and across :meth:`Parser.parse` calls), so
  ``click()`` without coordinates, ``moveRel``, ``dragTo`` and ``dragRel`` work once a point is
  known; before that they are refused. Coordinates are truncated to integers like pyautogui
  does; a point may be given as ``(x, y)`` or as a box ``(left, top, width, height)``, whose
  centre is used.
* ``clicks=2`` with the left button is a ``double_click``; a triple click (``tripleClick`` or
  ``clicks=3``) becomes a ``double_click`` then a ``click`` at the same point, which desktops
  count as a triple click when they arrive within the double-click time. Right-button clicks
  repeat ``right_click``. The middle button is refused.
* ``mouseDown`` ... pointer moves ... ``mouseUp`` is one ``drag`` (a ``click`` when the pointer
  did not move); an unmatched ``mouseDown`` or ``mouseUp`` is refused. Only the left button
  drags.
* ``keyDown``/``keyUp`` fold into chords: while keys are held, every key pressed (``press``,
  ``typewrite``, ``hotkey``) becomes a ``hotkey`` of the held keys and that key. Releasing a
  held key that nothing was pressed with sends the held keys themselves (a lone
  ``keyDown('shift'); keyUp('shift')`` is ``key shift``). A key still held at the end of the
  code, and mouse buttons or the wheel used while keys are held (``ctrl+click``), are refused:
  pincer cannot keep keys down between actions. ``keyUp`` of a key that is not held does
  nothing, as in pyautogui.
* Key names are pyautogui's (multi-character names are case-insensitive) and pincer's own;
  see :func:`pincer_key`. Unknown names are refused, where pyautogui would silently ignore
  them.
* OSWorld's bare answers ``WAIT``, ``DONE`` and ``FAIL`` are not code: ``DesktopEnv.step``
  handles them, and :func:`parse` refuses them. Sizes are capped by the ``MAX_*`` constants.
"""

from __future__ import annotations

import ast
import inspect
import math
import types
from typing import Any

__all__ = [
    "MAX_ACTIONS",
    "MAX_CLICKS",
    "MAX_CODE_CHARS",
    "MAX_COORDINATE",
    "MAX_HOTKEY_KEYS",
    "MAX_PRESSES",
    "MAX_SCROLL_NOTCHES",
    "MAX_TEXT_CHARS",
    "MAX_WAIT_SECONDS",
    "ActionRefused",
    "Parser",
    "parse",
    "pincer_key",
]

Action = dict[str, Any]
"""One pincer action, as the JSON object the host reads."""

Point = tuple[int, int]
"""A screen point in pixels, origin top-left."""

MAX_CODE_CHARS = 100_000
"""Longest code string read."""
MAX_ACTIONS = 100
"""Most actions one code string may make (each is a step of a task, whose step limits are
far smaller)."""
MAX_TEXT_CHARS = 10_000
"""Longest text typed by one ``typewrite``/``write``."""
MAX_WAIT_SECONDS = 10.0
"""``time.sleep`` waits are clamped to this."""
MAX_SCROLL_NOTCHES = 1000
"""Largest scroll, in wheel notches, that pincer accepts."""
MAX_HOTKEY_KEYS = 8
"""Most keys in one pincer hotkey."""
MAX_CLICKS = 3
"""Most clicks in one ``click(clicks=...)``."""
MAX_PRESSES = 100
"""Most repetitions in one ``press(presses=...)``."""
MAX_COORDINATE = 100_000
"""Largest coordinate (in absolute value) accepted for a point."""


class ActionRefused(ValueError):
    """The code is not something pincer will translate; the message says why and where."""


_WAIT_DONE_FAIL = frozenset({"WAIT", "DONE", "FAIL"})

# pincer's key names (shared/src/key.rs: NAMES and the aliases of `Key::from_str`) and
# pyautogui's KEY_NAMES, by the canonical pincer name they become. Lookups are in lower case
# without '_', '-' and ' ', as pincer reads names.
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "shift": ("shift", "shiftleft", "shiftright", "shiftl", "shiftr"),
    "ctrl": ("ctrl", "control", "ctrlleft", "ctrlright", "ctrll", "ctrlr", "controll", "controlr"),
    "alt": ("alt", "option", "altleft", "altright", "optionleft", "optionright", "altl", "altr"),
    "super": (
        "super",
        "win",
        "meta",
        "cmd",
        "command",
        "winleft",
        "winright",
        "superl",
        "superr",
        "windows",
    ),
    "altgr": ("altgr",),
    "capslock": ("capslock",),
    "enter": ("enter", "return", "kpenter"),
    "tab": ("tab",),
    "escape": ("escape", "esc"),
    "backspace": ("backspace",),
    "delete": ("delete", "del"),
    "insert": ("insert",),
    "home": ("home",),
    "end": ("end",),
    "pageup": ("pageup", "pgup"),
    "pagedown": ("pagedown", "pgdn"),
    "left": ("left", "arrowleft"),
    "right": ("right", "arrowright"),
    "up": ("up", "arrowup"),
    "down": ("down", "arrowdown"),
    "space": ("space",),
    "printscreen": ("printscreen", "print", "prntscrn", "prtsc", "prtscr"),
    "menu": ("menu", "apps"),
    "pause": ("pause",),
    "numlock": ("numlock",),
    "scrolllock": ("scrolllock",),
    # pincer has no keypad: pyautogui's keypad keys become the keys of their characters.
    "plus": ("plus", "add"),
    "-": ("minus", "subtract"),
    "*": ("multiply",),
    "/": ("divide",),
    ".": ("decimal",),
    **{str(d): (f"num{d}",) for d in range(10)},
    **{f"f{n}": (f"f{n}",) for n in range(1, 25)},
}
_KEY_NAMES: dict[str, str] = {
    alias: name for name, aliases in _KEY_ALIASES.items() for alias in aliases
}
# Single characters pincer cannot take as they are: whitespace (pincer trims names) and '+'
# (pincer joins hotkeys with '+').
_CHARACTER_KEYS: dict[str, str] = {
    "\n": "enter",
    "\r": "enter",
    "\t": "tab",
    " ": "space",
    "+": "plus",
}


def pincer_key(name: object) -> str:
    r"""The pincer name of the key pyautogui calls ``name``.

    A single printable character is its own key (case kept, as pyautogui keeps it), except
    ``' '``, ``'\n'``, ``'\r'``, ``'\t'`` and ``'+'``, which become ``space``, ``enter``,
    ``enter``, ``tab`` and ``plus``. Longer names are case-insensitive and become pincer's
    canonical name: ``ctrlleft`` is ``ctrl``, ``esc`` is ``escape``, ``return`` is ``enter``,
    ``win``/``command`` are ``super``, ``option`` is ``alt``, ``pgdn`` is ``pagedown``,
    ``del`` is ``delete``, ``prtsc`` is ``printscreen``, ``apps`` is ``menu``, keypad keys
    (``num0``, ``add``, ``decimal``, ...) are their characters. Raises :class:`ActionRefused`
    for keys pincer does not have (``fn``, ``volumeup``, ``browserback``, ...).
    """
    if not isinstance(name, str):
        raise ActionRefused(f"a key must be a string, not {name!r}")
    if len(name) == 1:
        if name in _CHARACTER_KEYS:
            return _CHARACTER_KEYS[name]
        if name.isprintable() and not name.isspace():
            return name
        raise ActionRefused(f"{name!r} is not a key")
    key = _KEY_NAMES.get(name.lower().replace("_", "").replace("-", "").replace(" ", ""))
    if key is not None:
        return key
    if "+" in name:
        raise ActionRefused(
            f"unknown key {name!r}: for a combination write pyautogui.hotkey('ctrl', 'c')"
        )
    raise ActionRefused(
        f"unknown key {name!r}: use a single character or a name such as enter, esc, tab, "
        "backspace, delete, ctrl, shift, alt, win, up, down, left, right, home, end, pageup, "
        "pagedown, space, f1..f24"
    )


# The keys a US keyboard has under the shifted characters, for chords.
_UNSHIFTED: dict[str, str] = dict(zip('~!@#$%^&*()_{}|:"<>?', "`1234567890-[]\\;',./"))


def _shifted(keys: list[str]) -> list[str]:
    """A chord as pyautogui presses it on X11, where OSWorld runs it.

    pyautogui holds shift around a key whose character needs it (``isShiftCharacter``: a
    capital ASCII letter or a shifted symbol), so ``hotkey('ctrl', 'T')`` is ctrl+shift+t and
    ``hotkey('ctrl', '!')`` is ctrl+shift+1 (the key of ``!`` on a US layout, as OSWorld's
    desktops have). Sent as they are, ``T`` and ``!`` would reach the application without
    shift. ``plus`` stays itself: pincer names it as a key.
    """
    out: list[str] = []
    for key in keys:
        if len(key) == 1 and key.isascii() and (key.isupper() or key in _UNSHIFTED):
            if "shift" not in out:
                out.append("shift")
            out.append(_UNSHIFTED.get(key, key.lower()))
        else:
            out.append(key)
    return out


# pyautogui functions, by the _Session method that translates them.
_CALLS: dict[str, str] = {
    "click": "click",
    "doubleClick": "doubleClick",
    "tripleClick": "tripleClick",
    "rightClick": "rightClick",
    "leftClick": "leftClick",
    "moveTo": "moveTo",
    "moveRel": "moveRel",
    "move": "moveRel",
    "dragTo": "dragTo",
    "dragRel": "dragRel",
    "drag": "dragRel",
    "mouseDown": "mouseDown",
    "mouseUp": "mouseUp",
    "scroll": "scroll",
    "hscroll": "hscroll",
    "vscroll": "scroll",
    "typewrite": "typewrite",
    "write": "typewrite",
    "press": "press",
    "hotkey": "hotkey",
    "shortcut": "hotkey",
    "keyDown": "keyDown",
    "keyUp": "keyUp",
    "sleep": "sleep",
    "position": "position",
    "size": "size",
}
# Calls accepted while the mouse button is held (between mouseDown and mouseUp).
_DURING_DRAG = frozenset({"moveTo", "moveRel", "move", "mouseUp", "sleep", "position", "size"})
# Calls refused while keys are held: pincer has no ctrl+click or ctrl+scroll.
_USE_BUTTONS = frozenset(
    {
        "click",
        "doubleClick",
        "tripleClick",
        "rightClick",
        "leftClick",
        "dragTo",
        "dragRel",
        "drag",
        "mouseDown",
        "mouseUp",
        "scroll",
        "hscroll",
        "vscroll",
    }
)
# Better reasons for some pyautogui functions pincer does not translate.
_UNSUPPORTED: dict[str, str] = {
    "middleClick": "the middle mouse button is not supported",
    "hold": "pyautogui.hold is a context manager; use pyautogui.keyDown and pyautogui.keyUp",
    "screenshot": "pincer takes the screenshots itself",
    "locateOnScreen": "locating images on the screen is not supported; give coordinates",
    "locateCenterOnScreen": "locating images on the screen is not supported; give coordinates",
}
_ACCEPTED = (
    f"pincer accepts only these pyautogui calls: {', '.join(_CALLS)} and time.sleep, "
    "with literal arguments; nothing is executed"
)


def _excerpt(text: str) -> str:
    """The first line of ``text``, shortened for a message."""
    lines = text.strip().splitlines() or [""]
    line = lines[0] + (" ..." if len(lines) > 1 else "")
    return line if len(line) <= 120 else line[:117] + "..."


def _refusal(line: int | None, source: str, reason: str) -> ActionRefused:
    """The refusal of the statement at ``line`` whose text is ``source``."""
    return ActionRefused(f"line {line}: `{_excerpt(source)}`: {reason}. {_ACCEPTED}")


def _number(value: object) -> float | None:
    """``value`` if it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return None


def _coordinate(value: object) -> int:
    """A coordinate or offset, truncated to an integer as pyautogui does."""
    number = _number(value)
    if number is None:
        raise ActionRefused(f"coordinate {value!r} is not a number")
    return _bounded(int(number))


def _bounded(c: int) -> int:
    """``c`` if it is a plausible screen coordinate."""
    if abs(c) > MAX_COORDINATE:
        raise ActionRefused(f"coordinate {c} is off any screen (at most {MAX_COORDINATE})")
    return c


def _whole(value: object, what: str, most: int) -> int:
    """A count from 0 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ActionRefused(f"{what} must be a whole number from 0 to {most}, not {value!r}")
    return value


def _notches(clicks: object) -> int:
    """Scroll notches, truncated to an integer as pyautogui does."""
    number = _number(clicks)
    if number is None:
        raise ActionRefused(f"scroll clicks must be a number, not {clicks!r}")
    n = int(number)
    if abs(n) > MAX_SCROLL_NOTCHES:
        raise ActionRefused(
            f"a scroll of {n} notches is more than the {MAX_SCROLL_NOTCHES} allowed"
        )
    return n


def _button(button: object) -> str:
    """``"left"`` or ``"right"`` for pyautogui's button names."""
    name = button.lower() if isinstance(button, str) else button
    if name in ("left", "primary"):
        return "left"
    if name in ("right", "secondary"):
        return "right"
    if name == "middle":
        raise ActionRefused("the middle mouse button is not supported")
    raise ActionRefused(f"button must be 'left' or 'right', not {button!r}")


def _left_only(button: object) -> None:
    """Refuses buttons other than the left one (pincer drags with the left button)."""
    if _button(button) != "left":
        raise ActionRefused("only the left button drags")


def _target(p: Point) -> dict[str, int]:
    """A pincer target for a point."""
    return {"x": p[0], "y": p[1]}


class _Session:
    """The translation of one code string: the pointer, held keys and button, and the output.

    The public methods are named and shaped like the pyautogui functions they translate, so
    calls bind to them exactly as they would to pyautogui; parameters that only shape timing
    or logging (``interval``, ``duration``, ``tween``, ``logScreenshot``, ``_pause``) are
    accepted and ignored.
    """

    statement: ast.stmt
    """The statement being translated (set by :meth:`run`)."""

    def __init__(self, code: str, position: Point | None, env: str | None) -> None:
        self.code = code
        self.pointer = position
        self.env = env
        self.actions: list[Action] = []
        # Held keys, in the order pressed, with the statement that pressed each.
        self.keys: dict[str, ast.stmt] = {}
        # Held keys that another key was pressed with.
        self.used: set[str] = set()
        # Where mouseDown pressed the button, and its statement, until mouseUp.
        self.button_down: tuple[Point, ast.stmt] | None = None

    # Reading the code.

    def run(self, tree: ast.Module) -> None:
        """Translates every statement, then refuses keys or a button left held."""
        for statement in tree.body:
            self.statement = statement
            try:
                self._statement(statement)
            except ActionRefused as e:
                raise self._refuse_at(statement, str(e)) from None
        if self.keys:
            key, statement = next(iter(self.keys.items()))
            raise self._refuse_at(
                statement,
                f"key {key!r} is pressed and never released, and pincer cannot leave keys "
                "down between actions; add pyautogui.keyUp or use pyautogui.hotkey",
            )
        if self.button_down is not None:
            raise self._refuse_at(
                self.button_down[1],
                "the mouse button is pressed and never released; add pyautogui.mouseUp()",
            )

    def _refuse_at(self, statement: ast.stmt, reason: str) -> ActionRefused:
        """The refusal of ``statement``."""
        source = ast.get_source_segment(self.code, statement) or ""
        return _refusal(statement.lineno, source, reason)

    def _statement(self, statement: ast.stmt) -> None:
        """Translates one statement."""
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.name not in ("pyautogui", "time") or alias.asname is not None:
                    raise ActionRefused("only `import pyautogui` and `import time` are accepted")
        elif isinstance(statement, ast.Assign):
            self._setting(statement)
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
            self._call(statement.value)
        else:
            raise ActionRefused("this is not a pyautogui call")

    def _setting(self, statement: ast.Assign) -> None:
        """Accepts (and ignores) ``pyautogui.FAILSAFE = bool`` and ``pyautogui.PAUSE = seconds``."""
        target = statement.targets[0] if len(statement.targets) == 1 else None
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "pyautogui"
        ):
            value = self._literal(statement.value)
            if target.attr == "FAILSAFE" and isinstance(value, bool):
                return
            seconds = _number(value)
            if target.attr == "PAUSE" and seconds is not None and seconds >= 0:
                return
        raise ActionRefused(
            "assignments are refused, except pyautogui.FAILSAFE = True/False and "
            "pyautogui.PAUSE = <seconds>, which are ignored"
        )

    def _literal(self, node: ast.expr) -> object:
        """The value of an argument, which must be a literal."""
        if isinstance(node, ast.Starred):
            raise ActionRefused("*arguments are refused; write the values")
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            source = ast.get_source_segment(self.code, node) or ""
            raise ActionRefused(
                f"argument `{_excerpt(source)}` is not a literal value (a number, string, "
                "True/False/None, or a tuple or list of them)"
            ) from None

    def _call(self, call: ast.Call) -> None:
        """Translates ``pyautogui.<function>(...)`` or ``time.sleep(...)``."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            raise ActionRefused(
                "only calls of the form pyautogui.<function>(...) and time.sleep(...) are accepted"
            )
        module, name = func.value.id, func.attr
        if module == "time" and name == "sleep":
            method = "sleep"
        elif module == "pyautogui" and name in _CALLS:
            method = _CALLS[name]
        elif module == "pyautogui":
            raise ActionRefused(_UNSUPPORTED.get(name, f"pyautogui.{name} is not supported"))
        else:
            raise ActionRefused(f"{module}.{name} is not a pyautogui call")
        args = [self._literal(a) for a in call.args]
        kwargs: dict[str, object] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ActionRefused("**arguments are refused; write the values")
            kwargs[keyword.arg] = self._literal(keyword.value)
        # Looked up on the class, so no state attribute can stand in for a method.
        handler = types.MethodType(getattr(_Session, method), self)
        try:
            bound = inspect.signature(handler).bind(*args, **kwargs)
        except TypeError as e:
            raise ActionRefused(f"{module}.{name}: {e}") from None
        if self.button_down is not None and name not in _DURING_DRAG:
            raise ActionRefused(
                "between pyautogui.mouseDown() and pyautogui.mouseUp() only pointer moves and "
                "waits are accepted"
            )
        if self.keys and name in _USE_BUTTONS:
            raise ActionRefused(
                "pincer cannot hold keys during mouse button or wheel actions (such as "
                "ctrl+click); hold keys only around press, typewrite or hotkey"
            )
        handler(*bound.args, **bound.kwargs)

    # Output and state.

    def _emit(self, action: Action) -> None:
        """Adds an action, with the environment when there is one."""
        if len(self.actions) == MAX_ACTIONS:
            raise ActionRefused(f"the code makes more than the {MAX_ACTIONS} actions accepted")
        if self.env is not None:
            action["env"] = self.env
        self.actions.append(action)

    def _known(self) -> Point:
        """The pointer position, which must be known."""
        if self.pointer is None:
            raise ActionRefused(
                "the pointer position is not known yet: give coordinates, e.g. "
                "pyautogui.click(x, y), or move first with pyautogui.moveTo(x, y)"
            )
        return self.pointer

    def _point(self, x: object, y: object) -> Point:
        """The point pyautogui makes of ``x`` and ``y`` (its ``_normalizeXYArgs``)."""
        if isinstance(x, str):
            raise ActionRefused(
                "locating an image on the screen (a string for x) is not supported; "
                "give coordinates"
            )
        if isinstance(x, (tuple, list)):
            if y is not None:
                raise ActionRefused("give a point either as (x, y) or as x and y, not both")
            if len(x) == 2:
                return (_coordinate(x[0]), _coordinate(x[1]))
            if len(x) == 4:
                left, top, width, height = (_coordinate(c) for c in x)
                return (_bounded(left + int(width / 2)), _bounded(top + int(height / 2)))
            raise ActionRefused(
                f"a point has 2 values (x, y) or 4 (left, top, width, height), not {len(x)}"
            )
        if x is None or y is None:
            here = self._known()
            return (
                here[0] if x is None else _coordinate(x),
                here[1] if y is None else _coordinate(y),
            )
        return (_coordinate(x), _coordinate(y))

    def _relative(self, x_offset: object, y_offset: object) -> Point:
        """The pointer position moved by the offsets (``None`` is 0; ``(dx, dy)`` is accepted)."""
        if isinstance(x_offset, (tuple, list)):
            if y_offset is not None or len(x_offset) != 2:
                raise ActionRefused("give an offset either as (dx, dy) or as dx and dy")
            x_offset, y_offset = x_offset
        dx = 0 if x_offset is None else _coordinate(x_offset)
        dy = 0 if y_offset is None else _coordinate(y_offset)
        x, y = self._known()
        return (_bounded(x + dx), _bounded(y + dy))

    def _move(self, p: Point) -> None:
        """Moves the pointer (silently while the button is held: the drag carries the move)."""
        self.pointer = p
        if self.button_down is None:
            self._emit({"action": "move", "target": _target(p)})

    def _click(self, x: object, y: object, clicks: object, button: object) -> None:
        """Clicks ``clicks`` times at the point of ``x`` and ``y``."""
        count = _whole(clicks, "clicks", MAX_CLICKS)
        side = _button(button)
        p = self._point(x, y)
        if count == 0:  # pyautogui moves and clicks zero times
            self._move(p)
            return
        self.pointer = p
        if side == "right":
            names = ["right_click"] * count
        else:
            names = {1: ["click"], 2: ["double_click"], 3: ["double_click", "click"]}[count]
        for name in names:
            self._emit({"action": name, "target": _target(p)})

    def _press_release(self, start: Point, end: Point) -> None:
        """A left press at ``start`` and release at ``end``: a drag, or a click in place."""
        self.pointer = end
        if start == end:
            self._emit({"action": "click", "target": _target(end)})
        else:
            self._emit({"action": "drag", "from": _target(start), "to": _target(end)})

    def _scroll(self, dx: int, dy: int, x: object, y: object) -> None:
        """Scrolls, at the point of ``x`` and ``y`` when either is given."""
        if dx == 0 and dy == 0:
            return
        action: Action = {"action": "scroll", "dx": dx, "dy": dy}
        if x is not None or y is not None:
            p = self._point(x, y)
            self.pointer = p
            action["target"] = _target(p)
        self._emit(action)

    def _press(self, key: str) -> None:
        """Presses a pincer key, with the held keys if any."""
        if self.keys:
            self._hotkey([*self.keys, key])
        else:
            self._emit({"action": "key", "key": key})

    def _hotkey(self, keys: list[str]) -> None:
        """Sends a chord; the held keys count as used."""
        chord = list(dict.fromkeys(_shifted(keys)))
        if len(chord) > MAX_HOTKEY_KEYS:
            raise ActionRefused(f"a hotkey has at most {MAX_HOTKEY_KEYS} keys, not {len(chord)}")
        self.used.update(self.keys)
        self._emit({"action": "hotkey", "keys": chord})

    # pyautogui's functions.

    def click(
        self,
        x: object = None,
        y: object = None,
        clicks: object = 1,
        interval: object = 0.0,
        button: object = "primary",
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.click``."""
        self._click(x, y, clicks, button)

    def leftClick(
        self,
        x: object = None,
        y: object = None,
        interval: object = 0.0,
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.leftClick``."""
        self._click(x, y, 1, "left")

    def rightClick(
        self,
        x: object = None,
        y: object = None,
        interval: object = 0.0,
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.rightClick``."""
        self._click(x, y, 1, "right")

    def doubleClick(
        self,
        x: object = None,
        y: object = None,
        interval: object = 0.0,
        button: object = "left",
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.doubleClick``."""
        self._click(x, y, 2, button)

    def tripleClick(
        self,
        x: object = None,
        y: object = None,
        interval: object = 0.0,
        button: object = "left",
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.tripleClick``."""
        self._click(x, y, 3, button)

    def moveTo(
        self,
        x: object = None,
        y: object = None,
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = False,
        _pause: object = True,
    ) -> None:
        """``pyautogui.moveTo``."""
        self._move(self._point(x, y))

    def moveRel(
        self,
        xOffset: object = None,
        yOffset: object = None,
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = False,
        _pause: object = True,
    ) -> None:
        """``pyautogui.moveRel`` and ``pyautogui.move``."""
        self._move(self._relative(xOffset, yOffset))

    def dragTo(
        self,
        x: object = None,
        y: object = None,
        duration: object = 0.0,
        tween: object = None,
        button: object = "primary",
        logScreenshot: object = None,
        _pause: object = True,
        mouseDownUp: object = True,
    ) -> None:
        """``pyautogui.dragTo``: from the pointer to the point (a move without mouseDownUp)."""
        end = self._point(x, y)
        if not mouseDownUp:
            self._move(end)
            return
        _left_only(button)
        self._press_release(self._known(), end)

    def dragRel(
        self,
        xOffset: object = None,
        yOffset: object = None,
        duration: object = 0.0,
        tween: object = None,
        button: object = "primary",
        logScreenshot: object = None,
        _pause: object = True,
        mouseDownUp: object = True,
    ) -> None:
        """``pyautogui.dragRel`` and ``pyautogui.drag``; no offset does nothing, as in pyautogui."""
        start = self._known()
        end = self._relative(xOffset, yOffset)
        if end == start:
            return
        if not mouseDownUp:
            self._move(end)
            return
        _left_only(button)
        self._press_release(start, end)

    def mouseDown(
        self,
        x: object = None,
        y: object = None,
        button: object = "primary",
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.mouseDown``: starts a drag that ``mouseUp`` ends."""
        _left_only(button)
        p = self._point(x, y)
        self.pointer = p
        self.button_down = (p, self.statement)

    def mouseUp(
        self,
        x: object = None,
        y: object = None,
        button: object = "primary",
        duration: object = 0.0,
        tween: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.mouseUp``: ends the drag ``mouseDown`` started."""
        if self.button_down is None:
            raise ActionRefused(
                "pyautogui.mouseUp() without a pyautogui.mouseDown() before it in the same code"
            )
        _left_only(button)
        end = self._point(x, y)
        start, self.button_down = self.button_down[0], None
        self._press_release(start, end)

    def scroll(
        self,
        clicks: object,
        x: object = None,
        y: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.scroll`` and ``pyautogui.vscroll``: positive clicks scroll up."""
        self._scroll(0, -_notches(clicks), x, y)

    def hscroll(
        self,
        clicks: object,
        x: object = None,
        y: object = None,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.hscroll``: positive clicks scroll right."""
        self._scroll(_notches(clicks), 0, x, y)

    def typewrite(
        self,
        message: object,
        interval: object = 0.0,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.typewrite`` and ``pyautogui.write``: text, or a list of key names."""
        if isinstance(message, str):
            if len(message) > MAX_TEXT_CHARS:
                raise ActionRefused(
                    f"text of {len(message)} characters is longer than the {MAX_TEXT_CHARS} "
                    "accepted in one call"
                )
            if self.keys:
                for key in [pincer_key(c) for c in message]:
                    self._press(key)
            elif message:
                self._emit({"action": "type", "text": message})
        elif isinstance(message, (list, tuple)):
            for key in [pincer_key(k) for k in message]:
                self._press(key)
        else:
            raise ActionRefused(f"typewrite takes a string or a list of key names, not {message!r}")

    def press(
        self,
        keys: object,
        presses: object = 1,
        interval: object = 0.0,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.press``: a key name or a list of them, ``presses`` times."""
        if isinstance(keys, str):
            names: list[object] = [keys]
        elif isinstance(keys, (list, tuple)):
            names = list(keys)
        else:
            raise ActionRefused(f"press takes a key name or a list of them, not {keys!r}")
        pincer_keys = [pincer_key(k) for k in names]
        for _ in range(_whole(presses, "presses", MAX_PRESSES)):
            for key in pincer_keys:
                self._press(key)

    def hotkey(
        self,
        *keys: object,
        interval: object = 0.0,
        logScreenshot: object = None,
        _pause: object = True,
    ) -> None:
        """``pyautogui.hotkey`` and ``pyautogui.shortcut``: keys as arguments or as one list."""
        if len(keys) == 1 and isinstance(keys[0], (list, tuple)):
            keys = tuple(keys[0])
        if not keys:
            raise ActionRefused("pyautogui.hotkey needs at least one key")
        self._hotkey([*self.keys, *(pincer_key(k) for k in keys)])

    def keyDown(self, key: object, logScreenshot: object = None, _pause: object = True) -> None:
        """``pyautogui.keyDown``: holds a key for the following presses."""
        name = pincer_key(key)
        self.keys.setdefault(name, self.statement)

    def keyUp(self, key: object, logScreenshot: object = None, _pause: object = True) -> None:
        """``pyautogui.keyUp``: releases a held key; sends the held keys if none was pressed."""
        name = pincer_key(key)
        if name not in self.keys:
            return
        if name not in self.used:
            if len(self.keys) == 1:
                self._emit({"action": "key", "key": name})
            else:
                self._hotkey(list(self.keys))
        del self.keys[name]
        self.used.discard(name)

    def sleep(self, seconds: object) -> None:
        """``time.sleep`` and ``pyautogui.sleep``: a wait of at most ten seconds."""
        number = _number(seconds)
        if number is None or number < 0:
            raise ActionRefused(f"sleep takes a number of seconds, not {seconds!r}")
        self._emit({"action": "wait", "seconds": min(float(number), MAX_WAIT_SECONDS)})

    def position(self, x: object = None, y: object = None) -> None:
        """``pyautogui.position``: has no effect as a statement."""

    def size(self) -> None:
        """``pyautogui.size``: has no effect as a statement."""


def _read(code: object) -> ast.Module:
    """The syntax tree of ``code``, refused when it is not code pincer will read."""
    if not isinstance(code, str):
        raise ActionRefused(f"pyautogui code must be a string, not {type(code).__name__}")
    if code.strip() in _WAIT_DONE_FAIL:
        raise ActionRefused(
            f"{code.strip()!r} is not pyautogui code: WAIT, DONE and FAIL are handled by "
            "DesktopEnv.step before code is parsed"
        )
    if len(code) > MAX_CODE_CHARS:
        raise ActionRefused(
            f"code of {len(code)} characters is longer than the {MAX_CODE_CHARS} accepted"
        )
    try:
        return ast.parse(code, mode="exec")
    except SyntaxError as e:
        raise _refusal(e.lineno, e.text or "", f"this is not valid Python ({e.msg})") from None
    except (ValueError, MemoryError, RecursionError) as e:
        raise ActionRefused(f"the code cannot be read as Python ({e}). {_ACCEPTED}") from None


class Parser:
    """Translates pyautogui code into pincer actions, keeping the pointer position between calls.

    Use one parser per episode: ``click()`` without coordinates in a later step clicks where an
    earlier step left the pointer. A refused code string leaves the position unchanged.
    """

    def __init__(self, env: str | None = None) -> None:
        """A parser whose actions carry ``"env": env`` (none when ``env`` is None)."""
        self.env = env
        self._position: Point | None = None

    @property
    def position(self) -> Point | None:
        """Where the pointer is after the code parsed so far, if any of it placed it."""
        return self._position

    def parse(self, code: str) -> list[Action]:
        """The pincer actions of ``code``; raises :class:`ActionRefused` for anything else."""
        tree = _read(code)
        session = _Session(code, self._position, self.env)
        session.run(tree)
        self._position = session.pointer
        return session.actions


def parse(code: str, env: str | None = None) -> list[Action]:
    """The pincer actions of ``code`` with a fresh :class:`Parser` (no pointer position known)."""
    return Parser(env).parse(code)

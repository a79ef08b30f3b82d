"""Tests of pincer_bench.pyautogui: pyautogui code from OSWorld agents into pincer actions.

The module is loaded from its file, so these tests run without the compiled extension that
``pincer_bench/__init__.py`` imports.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_PYTHON_DIR = Path(__file__).resolve().parents[1]
_KEY_RS = _PYTHON_DIR.parent / "shared" / "src" / "key.rs"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "pincer_bench_pyautogui_under_test", _PYTHON_DIR / "pincer_bench" / "pyautogui.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pag = _load()
ActionRefused = pag.ActionRefused
Parser = pag.Parser
parse = pag.parse
pincer_key = pag.pincer_key


def at(x: int, y: int) -> dict[str, int]:
    return {"x": x, "y": y}


def click(x: int, y: int) -> dict[str, Any]:
    return {"action": "click", "target": at(x, y)}


def move(x: int, y: int) -> dict[str, Any]:
    return {"action": "move", "target": at(x, y)}


def drag(a: tuple[int, int], b: tuple[int, int]) -> dict[str, Any]:
    return {"action": "drag", "from": at(*a), "to": at(*b)}


def key(k: str) -> dict[str, Any]:
    return {"action": "key", "key": k}


def hotkey(*keys: str) -> dict[str, Any]:
    return {"action": "hotkey", "keys": list(keys)}


def type_(text: str) -> dict[str, Any]:
    return {"action": "type", "text": text}


def refused(code: str, *fragments: str) -> str:
    """Asserts that ``code`` is refused with a message holding ``fragments``; returns it."""
    with pytest.raises(ActionRefused) as info:
        parse(code)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


# OSWorld-style code, as agents send it.


def test_the_osworld_example() -> None:
    code = (
        "import pyautogui\n"
        "pyautogui.click(120, 300)\n"
        "pyautogui.typewrite('hello')\n"
        "pyautogui.press('enter')"
    )
    assert parse(code) == [click(120, 300), type_("hello"), key("enter")]


def test_a_spreadsheet_formula() -> None:
    code = """import pyautogui
import time

# Select the target cell and enter the formula
pyautogui.click(960, 540)
time.sleep(0.5)
pyautogui.hotkey('ctrl', 'a')
pyautogui.typewrite('=SUM(A1:A10)', interval=0.05)
pyautogui.press('enter')
"""
    assert parse(code) == [
        click(960, 540),
        {"action": "wait", "seconds": 0.5},
        hotkey("ctrl", "a"),
        type_("=SUM(A1:A10)"),
        key("enter"),
    ]


def test_settings_comments_and_semicolons() -> None:
    code = (
        "import pyautogui; import time; pyautogui.FAILSAFE = False\n"
        "pyautogui.PAUSE = 0.5\n"
        "pyautogui.doubleClick(x=512, y=300)  # open the file\n"
        "pyautogui.hotkey('ctrl', 'shift', 'End')\n"
        "pyautogui.write('Hello\\nWorld')\n"
    )
    assert parse(code) == [
        {"action": "double_click", "target": at(512, 300)},
        hotkey("ctrl", "shift", "end"),
        type_("Hello\nWorld"),
    ]


def test_a_menu_walk_and_a_text_selection() -> None:
    code = """import pyautogui
pyautogui.rightClick(400, 250)
pyautogui.typewrite(['down', 'down', 'enter'], interval=0.2)
pyautogui.moveTo(300, 400)
pyautogui.dragTo(600, 400, duration=0.5, button='left')
pyautogui.hotkey('ctrl', 'c')
"""
    assert parse(code) == [
        {"action": "right_click", "target": at(400, 250)},
        key("down"),
        key("down"),
        key("enter"),
        move(300, 400),
        drag((300, 400), (600, 400)),
        hotkey("ctrl", "c"),
    ]


def test_a_multi_line_call() -> None:
    code = """pyautogui.click(
    x=10,
    y=20,
)"""
    assert parse(code) == [click(10, 20)]


def test_nothing_but_imports_is_no_action() -> None:
    assert parse("") == []
    assert parse("import pyautogui\nimport time\nimport pyautogui, time\n") == []


# The environment role.


def test_env_goes_on_every_action() -> None:
    code = (
        "pyautogui.click(1, 2)\ntime.sleep(1)\npyautogui.scroll(1)\npyautogui.hotkey('ctrl', 's')"
    )
    actions = parse(code, env="desktop")
    assert len(actions) == 4
    assert all(a["env"] == "desktop" for a in actions)
    assert all("env" not in a for a in parse(code))
    assert Parser(env="vm").parse("pyautogui.press('tab')") == [
        {"action": "key", "key": "tab", "env": "vm"}
    ]


# Clicks.


@pytest.mark.parametrize(
    "code",
    [
        "pyautogui.click(10, 20)",
        "pyautogui.click(x=10, y=20)",
        "pyautogui.click(10, y=20)",
        "pyautogui.click((10, 20))",
        "pyautogui.click([10, 20])",
        "pyautogui.click(x=(10, 20))",
        "pyautogui.click(10.9, 20.2)",
        "pyautogui.click(10, 20, 1)",
    ],
)
def test_click_forms(code: str) -> None:
    assert parse(code) == [click(10, 20)]


def test_click_a_box_clicks_its_centre() -> None:
    assert parse("pyautogui.click((0, 10, 21, 20))") == [click(10, 20)]


def test_click_keywords_that_only_shape_timing_are_ignored() -> None:
    code = (
        "pyautogui.click(10, 20, clicks=1, interval=0.25, button='left', duration=0.5, "
        "tween=None, logScreenshot=None, _pause=True)"
    )
    assert parse(code) == [click(10, 20)]


def test_negative_coordinates_pass_through() -> None:
    assert parse("pyautogui.click(-5, -1)") == [click(-5, -1)]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pyautogui.click(5, 6, clicks=2)", [{"action": "double_click", "target": at(5, 6)}]),
        ("pyautogui.click(5, 6, 2)", [{"action": "double_click", "target": at(5, 6)}]),
        ("pyautogui.doubleClick(5, 6)", [{"action": "double_click", "target": at(5, 6)}]),
        (
            "pyautogui.click(5, 6, clicks=3)",
            [{"action": "double_click", "target": at(5, 6)}, click(5, 6)],
        ),
        (
            "pyautogui.tripleClick(5, 6)",
            [{"action": "double_click", "target": at(5, 6)}, click(5, 6)],
        ),
        ("pyautogui.leftClick(5, 6)", [click(5, 6)]),
        ("pyautogui.click(5, 6, clicks=0)", [move(5, 6)]),
        ("pyautogui.click(5, 6, button='right')", [{"action": "right_click", "target": at(5, 6)}]),
        ("pyautogui.click(5, 6, button='RIGHT')", [{"action": "right_click", "target": at(5, 6)}]),
        (
            "pyautogui.click(5, 6, button='secondary')",
            [{"action": "right_click", "target": at(5, 6)}],
        ),
        ("pyautogui.click(5, 6, button='primary')", [click(5, 6)]),
        ("pyautogui.rightClick(x=5, y=6)", [{"action": "right_click", "target": at(5, 6)}]),
        (
            "pyautogui.doubleClick(5, 6, button='right')",
            [{"action": "right_click", "target": at(5, 6)}] * 2,
        ),
    ],
)
def test_click_kinds(code: str, expected: list[dict[str, Any]]) -> None:
    assert parse(code) == expected


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("pyautogui.click(5, 6, clicks=4)", "clicks must be a whole number from 0 to 3"),
        ("pyautogui.click(5, 6, clicks=-1)", "clicks must be a whole number"),
        ("pyautogui.click(5, 6, clicks=2.0)", "clicks must be a whole number"),
        ("pyautogui.click(5, 6, clicks=True)", "clicks must be a whole number"),
        ("pyautogui.click(5, 6, button='middle')", "middle mouse button is not supported"),
        ("pyautogui.click(5, 6, button='left2')", "button must be 'left' or 'right'"),
        ("pyautogui.click(5, 6, button=1)", "button must be 'left' or 'right'"),
        ("pyautogui.middleClick(5, 6)", "middle mouse button is not supported"),
        ("pyautogui.click('submit.png')", "locating an image on the screen"),
        ("pyautogui.click((1, 2, 3))", "a point has 2 values"),
        ("pyautogui.click((1, 2), 3)", "not both"),
        ("pyautogui.click('5', '6')", "locating an image"),
        ("pyautogui.click(5, '6')", "coordinate '6' is not a number"),
        ("pyautogui.click(5, None if False else 6)", "not a literal value"),
        ("pyautogui.click(True, 6)", "coordinate True is not a number"),
        ("pyautogui.click(float('nan'), 6)", "not a literal value"),
        ("pyautogui.click(1e308 * 10, 6)", "not a literal value"),
        ("pyautogui.click(1e309, 6)", "coordinate inf is not a number"),
        ("pyautogui.click(100001, 6)", "off any screen"),
        (
            "pyautogui.click(5, 6, 1, 0.0, 'left', 0, None, None, True, 'extra')",
            "too many positional arguments",
        ),
        ("pyautogui.click(5, 6, colour='red')", "unexpected keyword argument 'colour'"),
        ("pyautogui.click(5, 6, x=5)", "multiple values for argument 'x'"),
    ],
)
def test_click_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


# The pointer position.


def test_clicks_without_coordinates_use_the_tracked_position() -> None:
    code = (
        "pyautogui.moveTo(100, 200)\n"
        "pyautogui.click()\n"
        "pyautogui.doubleClick()\n"
        "pyautogui.rightClick()"
    )
    assert parse(code) == [
        move(100, 200),
        click(100, 200),
        {"action": "double_click", "target": at(100, 200)},
        {"action": "right_click", "target": at(100, 200)},
    ]


def test_one_missing_coordinate_comes_from_the_tracked_position() -> None:
    code = (
        "pyautogui.click(100, 200)\n"
        "pyautogui.click(x=150)\n"
        "pyautogui.click(y=250)\n"
        "pyautogui.moveTo(None, 300)"
    )
    assert parse(code) == [click(100, 200), click(150, 200), click(150, 250), move(150, 300)]


def test_relative_moves() -> None:
    code = (
        "pyautogui.moveTo(100, 100)\n"
        "pyautogui.moveRel(10, -20)\n"
        "pyautogui.move(xOffset=5)\n"
        "pyautogui.move((1, 1))\n"
        "pyautogui.moveRel(yOffset=-0.5)"
    )
    assert parse(code) == [
        move(100, 100),
        move(110, 80),
        move(115, 80),
        move(116, 81),
        move(116, 81),
    ]


def test_the_parser_keeps_the_position_between_steps() -> None:
    parser = Parser()
    assert parser.position is None
    assert parser.parse("pyautogui.click(300, 400)") == [click(300, 400)]
    assert parser.position == (300, 400)
    assert parser.parse("pyautogui.click()") == [click(300, 400)]
    assert parser.parse("pyautogui.moveRel(0, 50)\npyautogui.click()") == [
        move(300, 450),
        click(300, 450),
    ]
    assert parser.position == (300, 450)


def test_a_refused_step_leaves_the_position_unchanged() -> None:
    parser = Parser()
    parser.parse("pyautogui.click(10, 10)")
    with pytest.raises(ActionRefused):
        parser.parse("pyautogui.moveTo(500, 500)\nos.system('x')")
    assert parser.position == (10, 10)
    assert parser.parse("pyautogui.click()") == [click(10, 10)]


def test_the_module_parse_starts_with_no_position() -> None:
    parse("pyautogui.click(1, 1)")
    refused("pyautogui.click()", "the pointer position is not known yet", "pyautogui.moveTo(x, y)")


@pytest.mark.parametrize(
    "code",
    [
        "pyautogui.click()",
        "pyautogui.click(x=5)",
        "pyautogui.doubleClick()",
        "pyautogui.rightClick()",
        "pyautogui.moveRel(10, 10)",
        "pyautogui.move(10, 0)",
        "pyautogui.dragTo(10, 10)",
        "pyautogui.dragRel(10, 10)",
        "pyautogui.mouseDown()",
        "pyautogui.scroll(3, x=5)",
    ],
)
def test_an_unknown_position_is_refused(code: str) -> None:
    refused(code, "the pointer position is not known yet")


def test_moves_with_known_position_and_pointer_updates() -> None:
    code = "pyautogui.moveTo((7, 8))\npyautogui.moveTo()\npyautogui.click(clicks=0)"
    assert parse(code) == [move(7, 8), move(7, 8), move(7, 8)]


# Drags.


def test_drag_to_and_drag_rel() -> None:
    code = (
        "pyautogui.moveTo(100, 100)\n"
        "pyautogui.dragTo(200, 150, 0.5)\n"
        "pyautogui.dragRel(-50, 0, duration=1)\n"
        "pyautogui.drag(0, 10, button='primary')\n"
        "pyautogui.click()"
    )
    assert parse(code) == [
        move(100, 100),
        drag((100, 100), (200, 150)),
        drag((200, 150), (150, 150)),
        drag((150, 150), (150, 160)),
        click(150, 160),
    ]


def test_a_drag_in_place_is_a_click_and_no_offset_is_nothing() -> None:
    code = (
        "pyautogui.moveTo(5, 5)\n"
        "pyautogui.dragTo(5, 5)\n"
        "pyautogui.dragRel(0, 0)\n"
        "pyautogui.drag((0, 0))"
    )
    assert parse(code) == [move(5, 5), click(5, 5)]


def test_drag_without_mouse_down_up_is_a_move() -> None:
    code = (
        "pyautogui.moveTo(5, 5)\n"
        "pyautogui.dragTo(9, 9, mouseDownUp=False)\n"
        "pyautogui.dragRel(1, 1, mouseDownUp=False)"
    )
    assert parse(code) == [move(5, 5), move(9, 9), move(10, 10)]


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        (
            "pyautogui.moveTo(5, 5)\npyautogui.dragTo(9, 9, button='right')",
            "only the left button drags",
        ),
        ("pyautogui.moveTo(5, 5)\npyautogui.dragRel(9, 9, button='middle')", "middle mouse button"),
        ("pyautogui.moveTo(5, 5)\npyautogui.dragRel((1, 2), 3)", "give an offset either"),
        ("pyautogui.moveTo(5, 5)\npyautogui.moveRel((1, 2, 3))", "give an offset either"),
        ("pyautogui.moveTo(5, 5)\npyautogui.moveRel(99999, 99999)", "off any screen"),
    ],
)
def test_drag_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


def test_mouse_down_moves_mouse_up_is_one_drag() -> None:
    code = """import pyautogui
pyautogui.moveTo(100, 200)
pyautogui.mouseDown()
pyautogui.moveTo(150, 220, duration=0.3)
pyautogui.moveRel(50, 0)
pyautogui.mouseUp()
pyautogui.click()
"""
    assert parse(code) == [move(100, 200), drag((100, 200), (200, 220)), click(200, 220)]


def test_mouse_down_and_up_at_points() -> None:
    code = "pyautogui.mouseDown(10, 20, button='left')\npyautogui.mouseUp(x=30, y=40)"
    assert parse(code) == [drag((10, 20), (30, 40))]


def test_mouse_down_and_up_in_place_is_a_click() -> None:
    assert parse("pyautogui.mouseDown(10, 20)\npyautogui.mouseUp()") == [click(10, 20)]


def test_a_sleep_during_a_drag_is_a_wait_before_it() -> None:
    code = "pyautogui.mouseDown(10, 20)\ntime.sleep(0.2)\npyautogui.mouseUp(30, 40)"
    assert parse(code) == [{"action": "wait", "seconds": 0.2}, drag((10, 20), (30, 40))]


@pytest.mark.parametrize(
    ("code", "line", "fragment"),
    [
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.moveTo(30, 40)",
            1,
            "never released; add pyautogui.mouseUp()",
        ),
        ("pyautogui.mouseUp(10, 20)", 1, "without a pyautogui.mouseDown()"),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.mouseUp()\npyautogui.mouseUp()",
            3,
            "without a pyautogui.mouseDown()",
        ),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.click(5, 5)\npyautogui.mouseUp()",
            2,
            "only pointer moves and waits are accepted",
        ),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.mouseDown(10, 20)\npyautogui.mouseUp()",
            2,
            "only pointer moves",
        ),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.press('a')\npyautogui.mouseUp()",
            2,
            "only pointer moves",
        ),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.dragTo(1, 1)\npyautogui.mouseUp()",
            2,
            "only pointer moves",
        ),
        (
            "pyautogui.mouseDown(10, 20, button='right')\npyautogui.mouseUp()",
            1,
            "only the left button drags",
        ),
        (
            "pyautogui.mouseDown(10, 20)\npyautogui.mouseUp(button='right')",
            2,
            "only the left button drags",
        ),
        ("pyautogui.mouseDown(10, 20, button='middle')", 1, "middle mouse button"),
    ],
)
def test_mouse_down_up_refusals(code: str, line: int, fragment: str) -> None:
    refused(code, f"line {line}:", fragment)


# Scrolling.


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pyautogui.scroll(3)", {"action": "scroll", "dx": 0, "dy": -3}),
        ("pyautogui.scroll(-10)", {"action": "scroll", "dx": 0, "dy": 10}),
        ("pyautogui.scroll(clicks=-2)", {"action": "scroll", "dx": 0, "dy": 2}),
        ("pyautogui.vscroll(4)", {"action": "scroll", "dx": 0, "dy": -4}),
        ("pyautogui.hscroll(2)", {"action": "scroll", "dx": 2, "dy": 0}),
        ("pyautogui.hscroll(-7)", {"action": "scroll", "dx": -7, "dy": 0}),
        ("pyautogui.scroll(2.9)", {"action": "scroll", "dx": 0, "dy": -2}),
        (
            "pyautogui.scroll(-5, 100, 200)",
            {"action": "scroll", "dx": 0, "dy": 5, "target": at(100, 200)},
        ),
        (
            "pyautogui.scroll(-5, x=100, y=200)",
            {"action": "scroll", "dx": 0, "dy": 5, "target": at(100, 200)},
        ),
        (
            "pyautogui.scroll(1, (100, 200))",
            {"action": "scroll", "dx": 0, "dy": -1, "target": at(100, 200)},
        ),
        (
            "pyautogui.hscroll(1, 100, 200)",
            {"action": "scroll", "dx": 1, "dy": 0, "target": at(100, 200)},
        ),
        ("pyautogui.scroll(-1000)", {"action": "scroll", "dx": 0, "dy": 1000}),
    ],
)
def test_scroll(code: str, expected: dict[str, Any]) -> None:
    assert parse(code) == [expected]


def test_scroll_at_a_point_moves_the_pointer() -> None:
    code = (
        "pyautogui.scroll(-3, 640, 360)\n"
        "pyautogui.scroll(-3)\n"
        "pyautogui.click()\n"
        "pyautogui.scroll(1, y=10)"
    )
    assert parse(code) == [
        {"action": "scroll", "dx": 0, "dy": 3, "target": at(640, 360)},
        {"action": "scroll", "dx": 0, "dy": 3},
        click(640, 360),
        {"action": "scroll", "dx": 0, "dy": -1, "target": at(640, 10)},
    ]


def test_no_scroll_is_nothing() -> None:
    assert parse("pyautogui.scroll(0)\npyautogui.hscroll(0.5, 10, 10)") == []


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("pyautogui.scroll(1001)", "more than the 1000 allowed"),
        ("pyautogui.scroll('3')", "scroll clicks must be a number"),
        ("pyautogui.scroll()", "missing a required argument: 'clicks'"),
        ("pyautogui.hscroll(None)", "scroll clicks must be a number"),
    ],
)
def test_scroll_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


# Typing and keys.


def test_typewrite_and_write() -> None:
    code = (
        "pyautogui.typewrite('hello world')\n"
        "pyautogui.write(message='naïve café 🚀', interval=0.1)\n"
        "pyautogui.typewrite('')"
    )
    assert parse(code) == [type_("hello world"), type_("naïve café 🚀")]


def test_typewrite_a_list_presses_keys() -> None:
    code = "pyautogui.typewrite(['a', 'B', 'enter', 'Tab', ' ', 'left'])"
    assert parse(code) == [key("a"), key("B"), key("enter"), key("tab"), key("space"), key("left")]


def test_text_up_to_the_limit() -> None:
    text = "x" * pag.MAX_TEXT_CHARS
    assert parse(f"pyautogui.typewrite({text!r})") == [type_(text)]
    refused(f"pyautogui.typewrite({text + 'y'!r})", "longer than the 10000 accepted")


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("pyautogui.typewrite(42)", "typewrite takes a string or a list of key names"),
        ("pyautogui.typewrite(b'bytes')", "typewrite takes a string"),
        ("pyautogui.typewrite(['enter', 'hyperdrive'])", "unknown key 'hyperdrive'"),
        ("pyautogui.typewrite([1])", "a key must be a string"),
        ("pyautogui.typewrite()", "missing a required argument: 'message'"),
    ],
)
def test_typewrite_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


def test_press() -> None:
    code = (
        "pyautogui.press('enter')\n"
        "pyautogui.press('ENTER')\n"
        "pyautogui.press(['tab', 'tab', 'space'])\n"
        "pyautogui.press('backspace', presses=3, interval=0.1)\n"
        "pyautogui.press('a', 2)\n"
        "pyautogui.press('x', presses=0)\n"
        "pyautogui.press([])\n"
    )
    assert parse(code) == [
        key("enter"),
        key("enter"),
        key("tab"),
        key("tab"),
        key("space"),
        *[key("backspace")] * 3,
        key("a"),
        key("a"),
    ]


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("pyautogui.press('ctrl+c')", "for a combination write pyautogui.hotkey('ctrl', 'c')"),
        ("pyautogui.press('volumeup')", "unknown key 'volumeup'"),
        ("pyautogui.press('enter', presses=101)", "presses must be a whole number from 0 to 100"),
        ("pyautogui.press('enter', presses=2.0)", "presses must be a whole number"),
        ("pyautogui.press(None)", "press takes a key name or a list of them"),
        ("pyautogui.press('')", "unknown key ''"),
        ("pyautogui.press('\\x00')", "is not a key"),
        ("pyautogui.press('\\u00a0')", "is not a key"),
        # Every key is checked before any is pressed; the message names the bad one.
        ("pyautogui.press(['enter', 'fn'])", "unknown key 'fn'"),
    ],
)
def test_press_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pyautogui.hotkey('ctrl', 'c')", ["ctrl", "c"]),
        ("pyautogui.hotkey('CTRL', 'Shift', 'T')", ["ctrl", "shift", "t"]),
        # pyautogui holds shift for a capital letter or a shifted symbol (on X11).
        ("pyautogui.hotkey('ctrl', 'T')", ["ctrl", "shift", "t"]),
        ("pyautogui.hotkey('ctrl', 'alt', '!')", ["ctrl", "alt", "shift", "1"]),
        ("pyautogui.hotkey('ctrl', '?')", ["ctrl", "shift", "/"]),
        ("pyautogui.hotkey('ctrl', '|')", ["ctrl", "shift", "\\"]),
        ("pyautogui.hotkey('ctrl', 'É')", ["ctrl", "É"]),
        ("pyautogui.hotkey('T', 'ctrl')", ["shift", "t", "ctrl"]),
        ("pyautogui.hotkey(['ctrl', 'v'])", ["ctrl", "v"]),
        ("pyautogui.hotkey(('alt', 'f4'))", ["alt", "f4"]),
        ("pyautogui.hotkey('alt', 'F4', interval=0.1)", ["alt", "f4"]),
        ("pyautogui.shortcut('command', 'option', 'esc')", ["super", "alt", "escape"]),
        ("pyautogui.hotkey('ctrlleft', 'shiftright', 'pgdn')", ["ctrl", "shift", "pagedown"]),
        ("pyautogui.hotkey('ctrl', '+')", ["ctrl", "plus"]),
        ("pyautogui.hotkey('+', 'ctrl')", ["plus", "ctrl"]),
        ("pyautogui.hotkey('ctrl', '-')", ["ctrl", "-"]),
        ("pyautogui.hotkey('ctrl', 'ctrl', 'a')", ["ctrl", "a"]),
        ("pyautogui.hotkey('enter')", ["enter"]),
        ("pyautogui.hotkey('win')", ["super"]),
    ],
)
def test_hotkey(code: str, expected: list[str]) -> None:
    assert parse(code) == [hotkey(*expected)]


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("pyautogui.hotkey()", "needs at least one key"),
        ("pyautogui.hotkey([])", "needs at least one key"),
        ("pyautogui.hotkey('ctrl+s')", "for a combination write"),
        ("pyautogui.hotkey('ctrl', 'hyper')", "unknown key 'hyper'"),
        ("pyautogui.hotkey(*'abcdefghi')", "*arguments are refused"),
        ("pyautogui.hotkey('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i')", "at most 8 keys, not 9"),
        ("pyautogui.hotkey('ctrl', 'c', presses=2)", "unexpected keyword argument 'presses'"),
    ],
)
def test_hotkey_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


# Key names.


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("esc", "escape"),
        ("escape", "escape"),
        ("Escape", "escape"),
        ("return", "enter"),
        ("enter", "enter"),
        ("\n", "enter"),
        ("\r", "enter"),
        ("\t", "tab"),
        ("tab", "tab"),
        (" ", "space"),
        ("space", "space"),
        ("ctrl", "ctrl"),
        ("ctrlleft", "ctrl"),
        ("ctrlright", "ctrl"),
        ("control", "ctrl"),
        ("Control_L", "ctrl"),
        ("alt", "alt"),
        ("altleft", "alt"),
        ("altright", "alt"),
        ("option", "alt"),
        ("optionleft", "alt"),
        ("optionright", "alt"),
        ("shift", "shift"),
        ("shiftleft", "shift"),
        ("shiftright", "shift"),
        ("win", "super"),
        ("winleft", "super"),
        ("winright", "super"),
        ("command", "super"),
        ("cmd", "super"),
        ("super", "super"),
        ("meta", "super"),
        ("altgr", "altgr"),
        ("pgdn", "pagedown"),
        ("pagedown", "pagedown"),
        ("page_down", "pagedown"),
        ("pgup", "pageup"),
        ("pageup", "pageup"),
        ("backspace", "backspace"),
        ("del", "delete"),
        ("delete", "delete"),
        ("up", "up"),
        ("down", "down"),
        ("left", "left"),
        ("right", "right"),
        ("ArrowLeft", "left"),
        ("home", "home"),
        ("end", "end"),
        ("insert", "insert"),
        ("capslock", "capslock"),
        ("numlock", "numlock"),
        ("scrolllock", "scrolllock"),
        ("pause", "pause"),
        ("printscreen", "printscreen"),
        ("print", "printscreen"),
        ("prntscrn", "printscreen"),
        ("prtsc", "printscreen"),
        ("prtscr", "printscreen"),
        ("apps", "menu"),
        ("f1", "f1"),
        ("F12", "f12"),
        ("f24", "f24"),
        ("num0", "0"),
        ("num9", "9"),
        ("add", "plus"),
        ("subtract", "-"),
        ("multiply", "*"),
        ("divide", "/"),
        ("decimal", "."),
        ("plus", "plus"),
        ("+", "plus"),
        ("minus", "-"),
        ("a", "a"),
        ("A", "A"),
        ("1", "1"),
        ("-", "-"),
        ("é", "é"),
        ("\\", "\\"),
    ],
)
def test_key_names(name: str, expected: str) -> None:
    assert pincer_key(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "fn",
        "f25",
        "f0",
        "volumeup",
        "volumemute",
        "browserback",
        "launchmail",
        "clear",
        "hanja",
        "kana",
        "yen",
        "sleep",
        "hyperdrive",
        "ctrl+c",
        "",
        "\x00",
        "\x0b",
    ],
)
def test_keys_pincer_does_not_have(name: str) -> None:
    with pytest.raises(ActionRefused):
        pincer_key(name)


def _pincer_names() -> set[str]:
    """The key names pincer's key.rs accepts (its NAMES table and its aliases)."""
    source = _KEY_RS.read_text()
    table = source[source.index("const NAMES") : source.index("];", source.index("const NAMES"))]
    aliases = source[source.index("let alias = match") : source.index("_ => None")]
    names = set(re.findall(r'\("([a-z]+)", NamedKey::', table))
    names |= set(re.findall(r'"([a-z]+)"', aliases))
    return names | {f"f{n}" for n in range(1, 25)}


@pytest.mark.skipif(
    not _KEY_RS.exists(), reason="shared/src/key.rs is not beside the python package"
)
def test_every_emitted_name_is_one_pincer_accepts() -> None:
    pincer = _pincer_names()
    assert {"ctrl", "enter", "escape", "pagedown", "plus", "controll"} <= pincer
    # Every multi-character name pincer_key can return is a pincer name, and every pincer
    # name is accepted and maps to a name pincer accepts.
    for alias, name in pag._KEY_NAMES.items():
        assert len(name) == 1 or name in pincer, (alias, name)
    for name in pincer:
        mapped = pincer_key(name)
        assert len(mapped) == 1 or mapped in pincer, (name, mapped)


# Held keys.


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (
            "pyautogui.keyDown('shift')\npyautogui.press('tab')\npyautogui.keyUp('shift')",
            [hotkey("shift", "tab")],
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.typewrite('c')\npyautogui.keyUp('ctrl')",
            [hotkey("ctrl", "c")],
        ),
        (
            "pyautogui.keyDown('shift')\npyautogui.typewrite('ab')\npyautogui.keyUp('shift')",
            [hotkey("shift", "a"), hotkey("shift", "b")],
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.keyDown('shift')\npyautogui.press('t')\npyautogui.keyUp('shift')\npyautogui.keyUp('ctrl')",
            [hotkey("ctrl", "shift", "t")],
        ),
        (
            "pyautogui.keyDown('alt')\npyautogui.press(['tab', 'tab'])\npyautogui.keyUp('alt')",
            [hotkey("alt", "tab"), hotkey("alt", "tab")],
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.hotkey('shift', 'z')\npyautogui.keyUp('ctrl')",
            [hotkey("ctrl", "shift", "z")],
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.typewrite(['a', 'c'])\npyautogui.keyUp('ctrl')",
            [hotkey("ctrl", "a"), hotkey("ctrl", "c")],
        ),
        ("pyautogui.keyDown('enter')\npyautogui.keyUp('enter')", [key("enter")]),
        ("pyautogui.keyDown('shift')\npyautogui.keyUp('shiftleft')", [key("shift")]),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.keyDown('a')\npyautogui.keyUp('a')\npyautogui.keyUp('ctrl')",
            [hotkey("ctrl", "a")],
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.keyDown('shift')\npyautogui.keyUp('ctrl')\npyautogui.keyUp('shift')",
            [hotkey("ctrl", "shift")],
        ),
        (
            "pyautogui.keyDown('shift')\npyautogui.keyDown('shift')\npyautogui.press('a')\npyautogui.keyUp('shift')",
            [hotkey("shift", "a")],
        ),
        (
            "pyautogui.keyDown('shift')\npyautogui.press('a')\npyautogui.keyUp('shift')\npyautogui.press('a')",
            [hotkey("shift", "a"), key("a")],
        ),
        ("pyautogui.keyUp('ctrl')\npyautogui.press('a')", [key("a")]),
        (
            (
                "pyautogui.keyDown('shift')\n"
                "pyautogui.moveTo(5, 5)\n"
                "time.sleep(1)\n"
                "pyautogui.press('down')\n"
                "pyautogui.keyUp('shift')"
            ),
            [move(5, 5), {"action": "wait", "seconds": 1.0}, hotkey("shift", "down")],
        ),
    ],
)
def test_held_keys_fold_into_chords(code: str, expected: list[dict[str, Any]]) -> None:
    assert parse(code) == expected


@pytest.mark.parametrize(
    ("code", "line", "fragment"),
    [
        ("pyautogui.keyDown('shift')", 1, "key 'shift' is pressed and never released"),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.press('c')",
            1,
            "key 'ctrl' is pressed and never released",
        ),
        ("pyautogui.press('a')\npyautogui.keyDown('a')", 2, "never released"),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.click(5, 5)\npyautogui.keyUp('ctrl')",
            2,
            "such as ctrl+click",
        ),
        (
            "pyautogui.keyDown('ctrl')\npyautogui.scroll(5)\npyautogui.keyUp('ctrl')",
            2,
            "cannot hold keys",
        ),
        ("pyautogui.keyDown('shift')\npyautogui.mouseDown(1, 1)", 2, "cannot hold keys"),
        ("pyautogui.keyDown('hyper')", 1, "unknown key 'hyper'"),
        ("pyautogui.keyUp('hyper')", 1, "unknown key 'hyper'"),
        (
            "pyautogui.keyDown('shift')\npyautogui.typewrite('\\x01')\npyautogui.keyUp('shift')",
            2,
            "is not a key",
        ),
    ],
)
def test_held_key_refusals(code: str, line: int, fragment: str) -> None:
    refused(code, f"line {line}:", fragment)


# Waits, settings and no-ops.


@pytest.mark.parametrize(
    ("code", "seconds"),
    [
        ("time.sleep(1)", 1.0),
        ("time.sleep(0.25)", 0.25),
        ("time.sleep(0)", 0.0),
        ("time.sleep(60)", 10.0),
        ("pyautogui.sleep(2)", 2.0),
        ("pyautogui.sleep(seconds=3)", 3.0),
    ],
)
def test_sleep_is_a_clamped_wait(code: str, seconds: float) -> None:
    assert parse(code) == [{"action": "wait", "seconds": seconds}]


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("time.sleep(-1)", "sleep takes a number of seconds"),
        ("time.sleep('1')", "sleep takes a number of seconds"),
        ("time.sleep(True)", "sleep takes a number of seconds"),
        ("time.sleep()", "missing a required argument"),
        ("time.time()", "time.time is not a pyautogui call"),
    ],
)
def test_sleep_refusals(code: str, fragment: str) -> None:
    refused(code, fragment)


def test_settings_and_queries_are_ignored() -> None:
    code = (
        "pyautogui.FAILSAFE = False\n"
        "pyautogui.FAILSAFE = True\n"
        "pyautogui.PAUSE = 1\n"
        "pyautogui.PAUSE = 0.1\n"
        "pyautogui.size()\n"
        "pyautogui.position()"
    )
    assert parse(code) == []


@pytest.mark.parametrize(
    "code",
    [
        "pyautogui.FAILSAFE = 'no'",
        "pyautogui.PAUSE = -1",
        "pyautogui.PAUSE = None",
        "pyautogui.FAILSAFE = pyautogui.PAUSE = False",
        "pyautogui.MINIMUM_DURATION = 0",
        "pyautogui.PAUSE += 1",
        "pyautogui.PAUSE: float = 1",
        "pyautogui = None",
        "x = 100",
        "x, y = pyautogui.position()",
    ],
)
def test_other_assignments_are_refused(code: str) -> None:
    refused(code, "line 1:")


# Refusals of everything else.


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        (
            "import os\nos.system('rm -rf /')",
            "only `import pyautogui` and `import time` are accepted",
        ),
        ("os.system('rm -rf /')", "os.system is not a pyautogui call"),
        ("__import__('os').system('x')", "only calls of the form pyautogui.<function>(...)"),
        ("exec('import os')", "only calls of the form"),
        ("eval('1')", "only calls of the form"),
        ("open('/etc/passwd')", "only calls of the form"),
        ("print('hi')", "only calls of the form"),
        ("subprocess.run(['ls'])", "subprocess.run is not a pyautogui call"),
        ("import subprocess", "only `import pyautogui`"),
        ("import pyautogui as pg\npg.click(1, 2)", "only `import pyautogui`"),
        ("import time as t", "only `import pyautogui`"),
        ("import pyautogui, os", "only `import pyautogui`"),
        ("from pyautogui import click", "this is not a pyautogui call"),
        ("from pyautogui import *", "this is not a pyautogui call"),
        ("x = 5\npyautogui.click(x, 5)", "assignments are refused"),
        ("pyautogui.click(x, 5)", "argument `x` is not a literal value"),
        ("pyautogui.click(*args)", "*arguments are refused"),
        ("pyautogui.click(*[1, 2])", "*arguments are refused"),
        ("pyautogui.click(**{'x': 1, 'y': 2})", "**arguments are refused"),
        ("pyautogui.typewrite(f'{1+1}')", "is not a literal value"),
        ("pyautogui.typewrite('a' + 'b')", "is not a literal value"),
        ("pyautogui.typewrite('a' * 3)", "is not a literal value"),
        ("pyautogui.click(100 + 20, 300)", "is not a literal value"),
        ("pyautogui.click(pyautogui.size()[0] // 2, 10)", "is not a literal value"),
        ("pyautogui.click(*pyautogui.position())", "*arguments are refused"),
        ("pyautogui.typewrite([c for c in 'ab'])", "is not a literal value"),
        ("pyautogui.typewrite((lambda: 'x')())", "is not a literal value"),
        ("pyautogui.click(x := 5, 5)", "is not a literal value"),
        ("pyautogui.os.system('x')", "only calls of the form"),
        ("pyautogui.platformModule._click(1, 2, 'left')", "only calls of the form"),
        ("getattr(pyautogui, 'click')(1, 2)", "only calls of the form"),
        ("(lambda: pyautogui.click(1, 2))()", "only calls of the form"),
        ("f = lambda: 0", "assignments are refused"),
        ("pyautogui.click", "this is not a pyautogui call"),
        ("'a docstring'", "this is not a pyautogui call"),
        ("pass", "this is not a pyautogui call"),
        ("for i in range(3):\n    pyautogui.press('down')", "this is not a pyautogui call"),
        ("while True:\n    pass", "this is not a pyautogui call"),
        ("if True:\n    pyautogui.click(1, 2)", "this is not a pyautogui call"),
        ("def f():\n    pass", "this is not a pyautogui call"),
        ("class C:\n    pass", "this is not a pyautogui call"),
        ("with pyautogui.hold('shift'):\n    pyautogui.press('a')", "this is not a pyautogui call"),
        (
            "try:\n    pyautogui.click(1, 2)\nexcept Exception:\n    pass",
            "this is not a pyautogui call",
        ),
        ("del pyautogui", "this is not a pyautogui call"),
        ("global x", "this is not a pyautogui call"),
        ("raise SystemExit", "this is not a pyautogui call"),
        ("assert pyautogui.click(1, 2)", "this is not a pyautogui call"),
        ("pyautogui.screenshot()", "pincer takes the screenshots itself"),
        ("pyautogui.screenshot('/tmp/s.png')", "pincer takes the screenshots itself"),
        ("pyautogui.locateOnScreen('a.png')", "locating images on the screen is not supported"),
        ("pyautogui.locateCenterOnScreen('a.png')", "locating images"),
        ("pyautogui.hold('shift')", "pyautogui.hold is a context manager"),
        ("pyautogui.alert('hi')", "pyautogui.alert is not supported"),
        ("pyautogui.run('c10,20')", "pyautogui.run is not supported"),
        ("pyautogui.__init__()", "pyautogui.__init__ is not supported"),
        ("pyautogui.click(1, 2)()", "only calls of the form"),
        ("pyautogui.click(1,", "this is not valid Python"),
        ("pyautogui.click(1 2)", "this is not valid Python"),
        ("  pyautogui.click(1, 2)", "this is not valid Python"),
        ("```python\npyautogui.click(1, 2)\n```", "this is not valid Python"),
    ],
)
def test_refusals(code: str, fragment: str) -> None:
    message = refused(code, fragment)
    assert re.match(r"line \d+: `", message), message
    assert message.endswith(pag._ACCEPTED)
    assert "nothing is executed" in message


def test_the_refusal_names_the_line_and_its_text() -> None:
    code = "import pyautogui\npyautogui.click(10, 10)\nimport os\nos.system('echo hi')\n"
    message = refused(code, "line 3: `import os`")
    assert "click, doubleClick" in message
    assert "and time.sleep" in message
    message = refused(
        "pyautogui.click(1, 1)\n\npyautogui.typewrite(secret)",
        "line 3: `pyautogui.typewrite(secret)`",
    )
    assert "argument `secret`" in message


def test_long_statements_are_shortened_in_the_message() -> None:
    message = refused("pyautogui.typewrite(" + "'x' * 1000" + ")", "line 1:")
    assert len(message) < 600


def test_a_syntax_error_names_its_line() -> None:
    refused(
        "pyautogui.click(1, 2)\npyautogui.click(3 4)\npyautogui.press('a')",
        "line 2:",
        "not valid Python",
    )


@pytest.mark.parametrize("word", ["WAIT", "DONE", "FAIL", " DONE\n"])
def test_wait_done_fail_belong_to_desktop_env_step(word: str) -> None:
    refused(word, word.strip(), "handled by DesktopEnv.step")


def test_odd_inputs() -> None:
    with pytest.raises(ActionRefused):
        parse("pyautogui.click(" * 300 + ")" * 300)
    with pytest.raises(ActionRefused, match="must be a string"):
        parse(b"pyautogui.click(1, 2)")
    with pytest.raises(ActionRefused, match="longer than the 100000 accepted"):
        parse("#" * (pag.MAX_CODE_CHARS + 1))
    with pytest.raises(ActionRefused):
        parse("pyautogui.click(1, 2)\x00")
    with pytest.raises(ActionRefused):
        parse("pyautogui.click(" + "9" * 5000 + ", 1)")


def test_the_number_of_actions_is_capped() -> None:
    assert len(parse("pyautogui.press('a', presses=50)\n" * 2)) == pag.MAX_ACTIONS == 100
    refused("pyautogui.press('a', presses=50)\n" * 2 + "pyautogui.click(1, 1)", "line 3:")
    keys = repr(["a"] * 19_000)
    refused(f"pyautogui.press({keys}, presses=100)", "more than the 100 actions accepted")


def test_action_refused_is_a_value_error() -> None:
    assert issubclass(ActionRefused, ValueError)


# Nothing is ever executed.


@pytest.mark.parametrize(
    "template",
    [
        "open({path!r}, 'w').write('pwned')",
        "import os\nos.system('touch {path}')",
        "import pyautogui\npyautogui.click(10, 10)\n__import__('os').system('touch {path}')",
        "exec(\"open({path!r}, 'w').write('pwned')\")",
        "pyautogui.typewrite(open({path!r}, 'w').write('pwned'))",
        "pyautogui.click(x=__import__('pathlib').Path({path!r}).touch())",
        "pyautogui.hotkey(*[open({path!r}, 'w')])",
        "pyautogui.click(**dict(x=open({path!r}, 'w')))",
        "pyautogui.click(10, 10)\nwith open({path!r}, 'w') as f:\n    f.write('pwned')",
        "pyautogui.FAILSAFE = open({path!r}, 'w')",
        "pyautogui.click(1, 1)\nimport subprocess; subprocess.run(['touch', {path!r}])",
        "pyautogui.keyDown('shift')\nopen({path!r}, 'w')",
        "def f():\n    open({path!r}, 'w')\nf()",
        "pyautogui.click(1, (open({path!r}, 'w'), 2)[1])",
        "pyautogui.os.system('touch {path}')",
        "DONE; open({path!r}, 'w')",
    ],
)
def test_parsing_never_executes(template: str, tmp_path: Path) -> None:
    path = tmp_path / "pwned"
    parser = Parser(env="desktop")
    with pytest.raises(ActionRefused):
        parser.parse(template.format(path=str(path)))
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []
    assert parser.position is None


def test_pyautogui_itself_is_never_imported() -> None:
    parse("import pyautogui\nimport time\npyautogui.click(1, 2)\ntime.sleep(0.1)")
    assert "pyautogui" not in sys.modules

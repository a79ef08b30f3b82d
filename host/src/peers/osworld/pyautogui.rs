//! The pyautogui code OSWorld's setups and postconfigs run (`python -c "import pyautogui;
//! pyautogui.hotkey('ctrl', 's'); time.sleep(0.5)"`) turned into pincer's input steps, never
//! executed: a statement is parsed, not evaluated, and anything but a call of the handful
//! of functions the tasks use, with literal arguments, is refused naming it. The 369 tasks
//! use `hotkey`, `press`, `click`, `doubleClick`, `write`, `scroll`, `time.sleep` and
//! `mouseDown(); mouseUp()` (a click where the last one was).

use crate::task::steps::Step;
use pincer_shared::key::Key;
use std::collections::BTreeMap;

/// A literal argument.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Num(f64),
    /// `["shift", "ctrl", "e"]` (or a tuple): pyautogui's `hotkey` and `press` take one.
    List(Vec<Self>),
}

/// One call: its name and its positional and keyword arguments.
#[derive(Debug, PartialEq)]
struct Call {
    name: String,
    args: Vec<Value>,
    kwargs: BTreeMap<String, Value>,
}

/// The steps `code` stands for, or what in it cannot be run as input.
pub fn steps(code: &str) -> Result<Vec<Step>, String> {
    let mut out = Vec::new();
    // Where the last click left the pointer, and whether a button is held.
    let mut at: Option<(i32, i32)> = None;
    let mut down = false;
    for stmt in statements(code) {
        let stmt = stmt.trim();
        if stmt.is_empty()
            || stmt.starts_with("import ")
            || stmt.starts_with("from ")
            || stmt.replace(' ', "") == "pyautogui.FAILSAFE=False"
        {
            continue;
        }
        let call = parse_call(stmt).ok_or_else(|| format!("not a plain call: `{stmt}`"))?;
        // `mouseDown(); mouseUp()` where the pointer is: a click at the last click's place.
        let bare = call.args.is_empty() && call.kwargs.is_empty();
        match call.name.as_str() {
            "pyautogui.mouseDown" | "pyautogui.mouseUp" if !bare => {
                return Err(format!(
                    "`{stmt}`: a press with a position or a button is not supported"
                ));
            }
            "pyautogui.mouseDown" if !down => {
                down = true;
                continue;
            }
            "pyautogui.mouseUp" if down => {
                down = false;
                let (x, y) = at.ok_or(format!(
                    "`{stmt}`: a press where the pointer is, and no click before it says where"
                ))?;
                out.push(Step::Click {
                    x,
                    y,
                    button: None,
                    count: None,
                });
                continue;
            }
            "pyautogui.mouseUp" => return Err(format!("`{stmt}`: mouseUp without mouseDown")),
            _ if down => {
                return Err(format!(
                    "`{stmt}` between mouseDown and mouseUp: a drag is not supported"
                ));
            }
            _ => {}
        }
        for s in step(&call).map_err(|e| format!("`{stmt}`: {e}"))? {
            if let Step::Click { x, y, .. } = s {
                at = Some((x, y));
            }
            out.push(s);
        }
    }
    if down {
        return Err("mouseDown without mouseUp: a drag is not supported".into());
    }
    Ok(out)
}

/// Splits at `;` and line ends outside string literals.
fn statements(code: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in code.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                }
                out.last_mut().unwrap_or(&mut String::new()).push(c);
            }
            None if c == ';' || c == '\n' => out.push(String::new()),
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    out
}

/// `name(arg, key=arg, ...)` with literal arguments.
fn parse_call(s: &str) -> Option<Call> {
    let open = s.find('(')?;
    let name = s[..open].trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
    {
        return None;
    }
    let body = s[open + 1..].trim_end().strip_suffix(')')?;
    let mut args = Vec::new();
    let mut kwargs = BTreeMap::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let (key, after) = match rest.find('=') {
            Some(eq)
                if rest[..eq]
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !rest[..eq].trim().is_empty() =>
            {
                (
                    Some(rest[..eq].trim().to_owned()),
                    rest[eq + 1..].trim_start(),
                )
            }
            _ => (None, rest),
        };
        let (value, after) = literal(after)?;
        match key {
            Some(k) => {
                kwargs.insert(k, value);
            }
            None => args.push(value),
        }
        rest = after.trim_start();
        rest = match rest.strip_prefix(',') {
            Some(r) => r.trim_start(),
            None if rest.is_empty() => rest,
            None => return None,
        };
    }
    Some(Call {
        name: name.to_owned(),
        args,
        kwargs,
    })
}

/// A string, number or list literal at the start of `s`, and what follows it.
fn literal(s: &str) -> Option<(Value, &str)> {
    let mut chars = s.char_indices();
    let (_, first) = chars.next()?;
    if let Some(close) = match first {
        '[' => Some(']'),
        '(' => Some(')'),
        _ => None,
    } {
        let mut items = Vec::new();
        let mut rest = s[1..].trim_start();
        loop {
            if let Some(after) = rest.strip_prefix(close) {
                return Some((Value::List(items), after));
            }
            let (item, after) = literal(rest)?;
            items.push(item);
            rest = after.trim_start();
            rest = match rest.strip_prefix(',') {
                Some(r) => r.trim_start(),
                None if rest.starts_with(close) => rest,
                None => return None,
            };
        }
    }
    if first == '\'' || first == '"' {
        let mut text = String::new();
        let mut escaped = false;
        for (i, c) in chars {
            if escaped {
                text.push(match c {
                    'n' => '\n',
                    't' => '\t',
                    other => other,
                });
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == first {
                return Some((Value::Str(text), &s[i + 1..]));
            } else {
                text.push(c);
            }
        }
        return None;
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .unwrap_or(s.len());
    let n: f64 = s[..end].parse().ok()?;
    Some((Value::Num(n), &s[end..]))
}

/// pyautogui's name of a key as pincer's.
fn key(name: &str) -> Result<String, String> {
    let k: Key = name
        .parse()
        .map_err(|_| format!("pyautogui key '{name}' has no pincer name"))?;
    Ok(k.to_string())
}

fn num(v: Option<&Value>) -> Option<f64> {
    match v {
        Some(Value::Num(n)) => Some(*n),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Option<&str> {
    match v {
        Some(Value::Str(s)) => Some(s),
        _ => None,
    }
}

/// Key names given as strings, or as one list of strings (`hotkey(["ctrl", "s"])`,
/// `press(["enter"])`, which pyautogui accepts as it accepts separate arguments).
fn key_names<'a>(args: &'a [Value], what: &str) -> Result<Vec<&'a str>, String> {
    let items = match args {
        [Value::List(items)] => items.as_slice(),
        _ => args,
    };
    items
        .iter()
        .map(|a| match a {
            Value::Str(s) => Ok(s.as_str()),
            _ => Err(format!("{what} takes key names")),
        })
        .collect()
}

fn step(c: &Call) -> Result<Vec<Step>, String> {
    let arg = |i: usize, name: &str| c.args.get(i).or_else(|| c.kwargs.get(name));
    let one = |s: Step| Ok(vec![s]);
    match c.name.as_str() {
        "time.sleep" => {
            let s = num(arg(0, "secs")).ok_or("time.sleep takes a number")?;
            one(Step::Sleep {
                ms: (s.max(0.0) * 1000.0).round() as u64,
            })
        }
        "pyautogui.hotkey" => {
            let keys = key_names(&c.args, "hotkey")?
                .into_iter()
                .map(key)
                .collect::<Result<Vec<_>, _>>()?;
            if keys.is_empty() {
                return Err("hotkey without keys".into());
            }
            one(Step::Press {
                keys: keys.join("+"),
            })
        }
        // Each key in turn, `presses` times over, as pyautogui presses them.
        "pyautogui.press" => {
            let given = arg(0, "keys").ok_or("press takes a key name")?;
            let keys = key_names(std::slice::from_ref(given), "press")?
                .into_iter()
                .map(key)
                .collect::<Result<Vec<_>, _>>()?;
            let presses = num(c.kwargs.get("presses")).unwrap_or(1.0).max(0.0) as usize;
            if keys.is_empty() || presses == 0 {
                return Err("press without keys".into());
            }
            Ok((0..presses)
                .flat_map(|_| keys.iter().map(|k| Step::Press { keys: k.clone() }))
                .collect())
        }
        "pyautogui.click" | "pyautogui.doubleClick" => {
            let (Some(x), Some(y)) = (num(arg(0, "x")), num(arg(1, "y"))) else {
                return Err("a click without a position is not supported".into());
            };
            let clicks = if c.name == "pyautogui.doubleClick" {
                2.0
            } else {
                num(c.kwargs.get("clicks")).unwrap_or(1.0)
            };
            one(Step::Click {
                x: x.round() as i32,
                y: y.round() as i32,
                button: text(c.kwargs.get("button")).map(str::to_owned),
                count: (clicks != 1.0).then_some(clicks as u8),
            })
        }
        "pyautogui.write" | "pyautogui.typewrite" => one(Step::TypeText {
            text: text(arg(0, "message"))
                .ok_or("write takes a string")?
                .to_owned(),
        }),
        // pyautogui scrolls up for positive clicks; pincer's positive notches go down.
        "pyautogui.scroll" => one(Step::Scroll {
            dy: -(num(arg(0, "clicks"))
                .ok_or("scroll takes a number")?
                .round() as i32),
        }),
        other => Err(format!(
            "{other} is not one of the calls pincer runs as input"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tasks_pyautogui_becomes_input_steps() {
        let got = steps(
            "import pyautogui; import time; pyautogui.FAILSAFE = False; pyautogui.hotkey(\"ctrl\", \"s\"); time.sleep(0.5); pyautogui.press('enter');",
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                Step::Press {
                    keys: "ctrl+s".into()
                },
                Step::Sleep { ms: 500 },
                Step::Press {
                    keys: "enter".into()
                },
            ]
        );
        let got = steps("import pyautogui\npyautogui.click(960, 540)\npyautogui.doubleClick(x=10, y=20)\npyautogui.write('a; b')\npyautogui.scroll(-5)").unwrap();
        assert_eq!(
            got,
            vec![
                Step::Click {
                    x: 960,
                    y: 540,
                    button: None,
                    count: None
                },
                Step::Click {
                    x: 10,
                    y: 20,
                    button: None,
                    count: Some(2)
                },
                Step::TypeText {
                    text: "a; b".into()
                },
                Step::Scroll { dy: 5 },
            ]
        );
        let listed = steps(
            "pyautogui.hotkey([\"shift\", \"ctrl\", \"e\"]); pyautogui.press([\"down\", \"enter\"], presses=2)",
        )
        .unwrap();
        let press = |k: &str| Step::Press { keys: k.into() };
        assert_eq!(
            listed,
            vec![
                press("shift+ctrl+e"),
                press("down"),
                press("enter"),
                press("down"),
                press("enter"),
            ]
        );
        // Impress's setups click into a slide twice, then press where the pointer is.
        let pressed = steps("import pyautogui; import time;  time.sleep(4); pyautogui.doubleClick(x=200, y=650); time.sleep(0.5);pyautogui.mouseDown(); pyautogui.mouseUp(); time.sleep(0.5);").unwrap();
        assert_eq!(
            pressed[3],
            Step::Click {
                x: 200,
                y: 650,
                button: None,
                count: None
            }
        );
        assert_eq!(pressed.len(), 5, "{pressed:?}");
        let alt = steps("pyautogui.hotkey('alt', 'f10')").unwrap();
        assert_eq!(
            alt,
            vec![Step::Press {
                keys: "alt+f10".into()
            }]
        );
    }

    #[test]
    fn code_that_is_not_plain_input_is_refused_naming_it() {
        for (code, says) in [
            (
                "import os; os.system('rm -rf ~')",
                "os.system is not one of",
            ),
            ("pyautogui.click()", "without a position"),
            ("x = 1", "not a plain call"),
            (
                "pyautogui.hotkey('ctrl', 'nokey')",
                "'nokey' has no pincer name",
            ),
            ("pyautogui.press(open('f').read())", "not a plain call"),
            ("pyautogui.hotkey(['ctrl', 1])", "hotkey takes key names"),
            (
                "pyautogui.mouseDown(); pyautogui.mouseUp()",
                "no click before it",
            ),
            (
                "pyautogui.click(1, 2); pyautogui.mouseDown()",
                "mouseDown without mouseUp",
            ),
            (
                "pyautogui.click(1, 2); pyautogui.mouseDown(); pyautogui.moveTo(5, 5)",
                "a drag is not supported",
            ),
            ("pyautogui.mouseUp()", "mouseUp without mouseDown"),
            ("pyautogui.mouseDown(button='right')", "not supported"),
            ("pyautogui.press(['enter'", "not a plain call"),
        ] {
            let e = steps(code).unwrap_err();
            assert!(e.contains(says), "{code}: {e}");
        }
    }
}

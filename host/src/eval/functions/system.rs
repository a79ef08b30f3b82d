//! Processes, windows, the clipboard, desktop settings and command output.

use super::{LINUX, Library, Reads, clip, judge_text, quote, quote_passing, quoted};
use crate::eval::text::TextMatch;
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use pincer_shared::probe::{Probe, ProbeReply, ProcessInfo, WindowInfo};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ProcessArgs {
    /// Process name (as in `ps -o comm`) or the file name of its program.
    name: String,
}

fn matches_process(p: &ProcessInfo, name: &str) -> bool {
    p.name == name
        || p.cmdline
            .first()
            .and_then(|a| a.rsplit('/').next())
            .is_some_and(|base| base == name)
}

/// A process is (or is not) running.
#[derive(Debug)]
struct Process {
    name: String,
    running: bool,
}

impl Check for Process {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Processes]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let ps = match reply(r[0], "processes")? {
            ProbeReply::Processes(ps) => ps,
            other => return Err(unexpected("processes", other)),
        };
        let pids: Vec<String> = ps
            .iter()
            .filter(|p| matches_process(p, &self.name))
            .map(|p| p.pid.to_string())
            .collect();
        let name = &self.name;
        Ok(match (pids.is_empty(), self.running) {
            (true, false) => Verdict::pass(format!("no process '{name}' is running")),
            (true, true) => Verdict::fail(format!("no process '{name}' is running, expected one")),
            (false, running) => {
                let seen = format!(
                    "process '{name}' is running (pid {})",
                    clip(&pids.join(", "), 60)
                );
                Verdict::when(running, seen.clone(), format!("{seen}, expected none"))
            }
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TitleMatchArgs {
    /// How the active window's title is compared.
    text: TextMatch,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TitleArgs {
    /// Text the active window's title must contain.
    text: String,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WindowProcessArgs {
    /// Process name of the active window's owner.
    name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WindowExistsArgs {
    /// Text some window's title must contain.
    #[serde(default)]
    title_contains: Option<String>,
    /// How some window's title is compared (instead of `title_contains`).
    #[serde(default)]
    title: Option<TextMatch>,
}

/// A property of the active window.
#[derive(Debug)]
enum ActiveTest {
    Title(TextMatch),
    Process(String),
}

#[derive(Debug)]
struct Active(ActiveTest);

fn describe(w: &WindowInfo) -> String {
    format!(
        "'{}' ({})",
        clip(&w.title, 60),
        w.process_name.as_deref().unwrap_or("unknown process")
    )
}

impl Check for Active {
    fn probes(&self) -> Vec<Probe> {
        match self.0 {
            ActiveTest::Title(_) => vec![Probe::ActiveWindow],
            // The window names its process by `comm`, which the kernel cuts to 15 bytes
            // ("gtk3-widget-fac"); the process table has the program's full name.
            ActiveTest::Process(_) => vec![Probe::ActiveWindow, Probe::Processes],
        }
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let w = match reply(r[0], "active window")? {
            ProbeReply::ActiveWindow(Some(w)) => w,
            ProbeReply::ActiveWindow(None) => {
                return Ok(Verdict::fail(match &self.0 {
                    ActiveTest::Title(m) => {
                        format!("no window is active, expected one with a title {m}")
                    }
                    ActiveTest::Process(name) => {
                        format!("no window is active, expected a window of process '{name}'")
                    }
                }));
            }
            other => return Err(unexpected("active window", other)),
        };
        Ok(match &self.0 {
            ActiveTest::Title(m) => Verdict::when(
                m.test(&w.title),
                format!("the active window is {}", describe(w)),
                format!("the active window is {}, expected a title {m}", describe(w)),
            ),
            ActiveTest::Process(name) => {
                let ps = match reply(r[1], "processes")? {
                    ProbeReply::Processes(ps) => ps,
                    other => return Err(unexpected("processes", other)),
                };
                let owner = w.pid.and_then(|pid| ps.iter().find(|p| p.pid == pid));
                // A window of a process outside the listed ones (another session) is
                // judged by its `comm` alone.
                let ok = match owner {
                    Some(p) => matches_process(p, name),
                    None => w.process_name.as_deref() == Some(name.as_str()),
                };
                let program = owner
                    .and_then(|p| p.cmdline.first())
                    .and_then(|a| a.rsplit('/').next());
                let seen = match program {
                    Some(program) => format!("'{}' ({})", clip(&w.title, 60), clip(program, 40)),
                    None => describe(w),
                };
                Verdict::when(
                    ok,
                    format!("the active window is {seen}"),
                    format!("the active window is {seen}, expected a window of process '{name}'"),
                )
            }
        })
    }
}

/// Some window's title contains a text.
#[derive(Debug)]
struct AnyWindow {
    title: TextMatch,
}

impl Check for AnyWindow {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Windows]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let ws = match reply(r[0], "windows")? {
            ProbeReply::Windows(ws) => ws,
            other => return Err(unexpected("windows", other)),
        };
        let m = &self.title;
        Ok(match ws.iter().find(|w| m.test(&w.title)) {
            Some(w) => Verdict::pass(format!("window {} is open", describe(w))),
            None if ws.is_empty() => {
                Verdict::fail(format!("no window is open, expected one with a title {m}"))
            }
            None => Verdict::fail(format!(
                "no window has a title {m}; open: {}",
                quoted(ws.iter().map(|w| w.title.as_str()), 100)
            )),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClipTextArgs {
    /// How the clipboard's text is compared.
    text: TextMatch,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClipContainsArgs {
    /// Text the clipboard must contain.
    text: String,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClipMatchesArgs {
    /// Regular expression that must match the clipboard text (`$` also matches before a
    /// final newline).
    regex: String,
}

/// The clipboard's text.
#[derive(Debug)]
struct Clipboard(TextMatch);

impl Check for Clipboard {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Clipboard]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        match reply(r[0], "clipboard")? {
            ProbeReply::Clipboard(Some(t)) => Ok(judge_text("the clipboard", t, &self.0)),
            ProbeReply::Clipboard(None) => Ok(Verdict::fail(format!(
                "the clipboard holds no text, expected text {}",
                self.0
            ))),
            other => Err(unexpected("clipboard", other)),
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GsettingsArgs {
    /// Schema, such as "org.gnome.desktop.interface".
    schema: String,
    /// Key, such as "color-scheme".
    key: String,
    /// Expected value as `gsettings get` prints it, with or without the quotes of a string.
    value: String,
}

/// A desktop setting.
#[derive(Debug)]
struct Gsettings {
    schema: String,
    key: String,
    value: String,
}

/// A GVariant string as `gsettings get` prints it, unquoted: in single quotes, or in
/// double quotes when it holds a single quote, with `\` escapes. Anything else (numbers,
/// booleans, arrays, an expected value written without quotes) is returned as it is.
fn unquote(s: &str) -> String {
    let s = s.trim();
    let inner = ['\'', '"']
        .into_iter()
        .find_map(|q| s.strip_prefix(q)?.strip_suffix(q));
    let Some(inner) = inner else {
        return s.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('\\', Some(next @ ('\\' | '\'' | '"'))) => {
                out.push(next);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

impl Check for Gsettings {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Setting {
            schema: self.schema.clone(),
            key: self.key.clone(),
        }]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let setting = format!("setting {} {}", self.schema, self.key);
        let got = match reply(r[0], "gsettings")? {
            ProbeReply::Setting(Some(v)) => v.trim(),
            ProbeReply::Setting(None) => {
                return Ok(Verdict::fail(format!("{setting} does not exist")));
            }
            other => return Err(unexpected("gsettings", other)),
        };
        // `gsettings get` quotes strings itself; a value written with its quotes is shown
        // as written.
        let want = self.value.trim();
        let want = if unquote(want) == want {
            format!("'{want}'")
        } else {
            want.to_owned()
        };
        let seen = format!("{setting} is {}", clip(got, 60));
        Ok(Verdict::when(
            unquote(got) == unquote(&self.value),
            seen.clone(),
            format!("{seen}, expected {want}"),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CommandArgs {
    /// Program and arguments (no shell unless you run one).
    argv: Vec<String>,
    /// Regular expression that must match its standard output (`$` also matches before the
    /// final newline).
    regex: String,
    /// Kill it after this many milliseconds.
    #[serde(default = "ten_seconds")]
    timeout_ms: u64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CommandTextArgs {
    /// Program and arguments (no shell unless you run one).
    argv: Vec<String>,
    /// How its standard output is compared.
    text: TextMatch,
    /// Kill it after this many milliseconds.
    #[serde(default = "ten_seconds")]
    timeout_ms: u64,
}

fn ten_seconds() -> u64 {
    10_000
}

/// A command's output matches a pattern.
#[derive(Debug)]
struct Command {
    argv: Vec<String>,
    test: TextMatch,
    timeout_ms: u64,
}

impl Command {
    fn new(argv: Vec<String>, test: TextMatch, timeout_ms: u64) -> Result<Self, String> {
        if argv.is_empty() {
            return Err("`argv` is empty".into());
        }
        Ok(Self {
            argv,
            test,
            timeout_ms,
        })
    }
}

impl Check for Command {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Command {
            argv: self.argv.clone(),
            timeout_ms: self.timeout_ms,
            max_output: 1024 * 1024,
        }]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let out = match reply(r[0], "command")? {
            ProbeReply::Command(o) => o,
            other => return Err(unexpected("command", other)),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let cmd = clip(&self.argv.join(" "), 40);
        let m = &self.test;
        if m.test(&text) {
            let printed = if text.is_empty() {
                "nothing".to_owned()
            } else {
                quote_passing(&text, m)
            };
            return Ok(Verdict::pass(format!("`{cmd}` printed {printed} ({m})")));
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Why a command printed nothing useful is usually on its standard error.
        let complaint = if stderr.trim().is_empty() {
            String::new()
        } else {
            format!(", stderr '{}'", clip(stderr.trim(), 80))
        };
        let printed = if text.is_empty() {
            "nothing".to_owned()
        } else {
            quote(&text)
        };
        Ok(Verdict::fail(format!(
            "`{cmd}` printed {printed} ({}{complaint}), expected output {m}",
            out.status
        )))
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "process_running",
        "A process with this name is running.",
        Reads::Env(super::ANY),
        r#"{"name": "mousepad"}"#,
        |a: ProcessArgs, _| {
            Ok(Process {
                name: a.name,
                running: true,
            })
        },
    );
    lib.add(
        "process_not_running",
        "No process with this name is running.",
        Reads::Env(super::ANY),
        r#"{"name": "vim"}"#,
        |a: ProcessArgs, _| {
            Ok(Process {
                name: a.name,
                running: false,
            })
        },
    );
    lib.add(
        "window_title",
        "The active window's title passes a text match.",
        Reads::Env(LINUX),
        r#"{"text": {"contains": "Mousepad"}}"#,
        |a: TitleMatchArgs, _| Ok(Active(ActiveTest::Title(a.text))),
    );
    lib.add(
        "window_title_contains",
        "The active window's title contains the text (window_title with `contains`).",
        Reads::Env(LINUX),
        r#"{"text": "Mousepad"}"#,
        |a: TitleArgs, _| {
            Ok(Active(ActiveTest::Title(
                TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
            )))
        },
    );
    lib.add(
        "window_process_is",
        "The active window belongs to a process with this name.",
        Reads::Env(LINUX),
        r#"{"name": "gnome-calculator"}"#,
        |a: WindowProcessArgs, _| Ok(Active(ActiveTest::Process(a.name))),
    );
    lib.add(
        "window_exists",
        "Some open window's title contains the text (`title_contains`) or passes a text match (`title`).",
        Reads::Env(LINUX),
        r#"{"title_contains": "Untitled"}"#,
        |a: WindowExistsArgs, _| {
            let title = match (a.title_contains, a.title) {
                (Some(text), None) => TextMatch::contains(&text),
                (None, Some(m)) => m,
                _ => return Err("give one of `title_contains` and `title`".into()),
            };
            Ok(AnyWindow { title })
        },
    );
    lib.add(
        "clipboard_text",
        "The clipboard's text passes a text match.",
        Reads::Env(super::ANY),
        r#"{"text": {"equals": "4711"}}"#,
        |a: ClipTextArgs, _| Ok(Clipboard(a.text)),
    );
    lib.add(
        "clipboard_contains",
        "The clipboard's text contains the text (clipboard_text with `contains`).",
        Reads::Env(super::ANY),
        r#"{"text": "42"}"#,
        |a: ClipContainsArgs, _| {
            Ok(Clipboard(
                TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
            ))
        },
    );
    lib.add(
        "clipboard_matches",
        "A regular expression matches the clipboard's text (clipboard_text with `regex`).",
        Reads::Env(super::ANY),
        r#"{"regex": "^https?://"}"#,
        |a: ClipMatchesArgs, _| Ok(Clipboard(TextMatch::regex(&a.regex, false)?)),
    );
    lib.add(
        "gsettings_equals",
        "A GSettings key has the value (as `gsettings get` prints it).",
        Reads::Env(LINUX),
        r#"{"schema": "org.gnome.desktop.interface", "key": "color-scheme", "value": "prefer-dark"}"#,
        |a: GsettingsArgs, _| {
            Ok(Gsettings {
                schema: a.schema,
                key: a.key,
                value: a.value,
            })
        },
    );
    lib.add(
        "command_output",
        "A command run on the environment prints output that passes a text match (needs a guest that allows setup).",
        Reads::Env(super::ANY),
        r#"{"argv": ["wc", "-l", "/etc/hostname"], "text": {"regex": "^1 "}}"#,
        |a: CommandTextArgs, _| Command::new(a.argv, a.text, a.timeout_ms),
    );
    lib.add(
        "command_output_matches",
        "A command run on the environment prints output matching a regular expression (command_output with `regex`; needs a guest that allows setup).",
        Reads::Env(super::ANY),
        r#"{"argv": ["date", "+%Y"], "regex": "^20[0-9]{2}"}"#,
        |a: CommandArgs, _| Command::new(a.argv, TextMatch::regex(&a.regex, false)?, a.timeout_ms),
    );
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn gsettings_strings_compare_unquoted() {
        assert_eq!(unquote("'prefer-dark'"), "prefer-dark");
        assert_eq!(unquote("prefer-dark"), "prefer-dark");
        // `gsettings get` switches to double quotes when the string holds a single quote.
        assert_eq!(unquote("\"Bob's\""), "Bob's");
        assert_eq!(unquote(r"'a\\b \'c\''"), r"a\b 'c'");
        assert_eq!(unquote("''"), "");
        assert_eq!(unquote("uint32 5"), "uint32 5");
        assert_eq!(unquote("['a', 'b']"), "['a', 'b']");
    }
}

//! Processes, windows, the clipboard, desktop settings and command output.

use super::{LINUX, Library, Reads, clip};
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

/// Text without its final line break, for regular expressions: command output and files
/// end with one, and `^2$` should match `wc -l`'s "2\n" as it does in Python's `re`.
pub(super) fn final_line(text: &str) -> &str {
    text.strip_suffix('\n')
        .map_or(text, |t| t.strip_suffix('\r').unwrap_or(t))
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
        let seen = if pids.is_empty() {
            format!("no process '{}' is running", self.name)
        } else {
            format!(
                "process '{}' is running (pid {})",
                self.name,
                pids.join(", ")
            )
        };
        Ok(Verdict {
            passed: pids.is_empty() != self.running,
            feedback: seen,
        })
    }
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
    title_contains: String,
}

/// A property of the active window.
#[derive(Debug)]
enum ActiveTest {
    Title { text: String, ignore_case: bool },
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
            ActiveTest::Title { .. } => vec![Probe::ActiveWindow],
            // The window names its process by `comm`, which the kernel cuts to 15 bytes
            // ("gtk3-widget-fac"); the process table has the program's full name.
            ActiveTest::Process(_) => vec![Probe::ActiveWindow, Probe::Processes],
        }
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let w = match reply(r[0], "active window")? {
            ProbeReply::ActiveWindow(Some(w)) => w,
            ProbeReply::ActiveWindow(None) => return Ok(Verdict::fail("no window is active")),
            other => return Err(unexpected("active window", other)),
        };
        Ok(match &self.0 {
            ActiveTest::Title { text, ignore_case } => {
                let ok = if *ignore_case {
                    w.title.to_lowercase().contains(&text.to_lowercase())
                } else {
                    w.title.contains(text.as_str())
                };
                Verdict::when(
                    ok,
                    format!("the active window is {}", describe(w)),
                    format!(
                        "the active window is {}, expected a title containing '{text}'",
                        describe(w)
                    ),
                )
            }
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
                    format!("the active window is {seen}, expected one of process '{name}'"),
                )
            }
        })
    }
}

/// Some window's title contains a text.
#[derive(Debug)]
struct AnyWindow {
    title: String,
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
        Ok(match ws.iter().find(|w| w.title.contains(&self.title)) {
            Some(w) => Verdict::pass(format!("window {} is open", describe(w))),
            None => Verdict::fail(format!(
                "no window title contains '{}'; open: {}",
                self.title,
                clip(
                    &ws.iter()
                        .map(|w| format!("'{}'", w.title))
                        .collect::<Vec<_>>()
                        .join(", "),
                    100
                )
            )),
        })
    }
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

#[derive(Debug)]
enum ClipTest {
    Contains { text: String, ignore_case: bool },
    Matches(regex::Regex),
}

/// The clipboard's text.
#[derive(Debug)]
struct Clipboard(ClipTest);

impl Check for Clipboard {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Clipboard]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let text = match reply(r[0], "clipboard")? {
            ProbeReply::Clipboard(Some(t)) => t,
            ProbeReply::Clipboard(None) => return Ok(Verdict::fail("the clipboard holds no text")),
            other => return Err(unexpected("clipboard", other)),
        };
        Ok(match &self.0 {
            ClipTest::Contains {
                text: want,
                ignore_case,
            } => {
                let ok = if *ignore_case {
                    text.to_lowercase().contains(&want.to_lowercase())
                } else {
                    text.contains(want.as_str())
                };
                Verdict::when(
                    ok,
                    format!("the clipboard holds '{}'", clip(text, 60)),
                    format!(
                        "the clipboard holds '{}', expected it to contain '{}'",
                        clip(text, 60),
                        clip(want, 60)
                    ),
                )
            }
            ClipTest::Matches(re) => Verdict::when(
                re.is_match(final_line(text)),
                format!("the clipboard holds '{}'", clip(text, 60)),
                format!(
                    "the clipboard holds '{}', which does not match /{re}/",
                    clip(text, 60)
                ),
            ),
        })
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
        vec![Probe::Gsettings {
            schema: self.schema.clone(),
            key: self.key.clone(),
        }]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let got = match reply(r[0], "gsettings")? {
            ProbeReply::Gsettings(Some(v)) => v,
            ProbeReply::Gsettings(None) => {
                return Ok(Verdict::fail(format!(
                    "setting {} {} does not exist",
                    self.schema, self.key
                )));
            }
            other => return Err(unexpected("gsettings", other)),
        };
        Ok(Verdict::when(
            unquote(got) == unquote(&self.value),
            format!("{} {} is {}", self.schema, self.key, got.trim()),
            format!(
                "{} {} is {}, expected {}",
                self.schema,
                self.key,
                got.trim(),
                self.value
            ),
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

fn ten_seconds() -> u64 {
    10_000
}

/// A command's output matches a pattern.
#[derive(Debug)]
struct Command {
    argv: Vec<String>,
    re: regex::Regex,
    timeout_ms: u64,
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
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Why a command printed nothing useful is usually on its standard error.
        let complaint = if stderr.trim().is_empty() {
            String::new()
        } else {
            format!(", stderr '{}'", clip(stderr.trim(), 80))
        };
        Ok(Verdict::when(
            self.re.is_match(final_line(&text)),
            format!("`{cmd}` printed '{}'", clip(&text, 60)),
            format!(
                "`{cmd}` printed '{}' ({}{complaint}), which does not match /{}/",
                clip(&text, 60),
                out.status,
                self.re
            ),
        ))
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
        "window_title_contains",
        "The active window's title contains the text.",
        Reads::Env(LINUX),
        r#"{"text": "Mousepad"}"#,
        |a: TitleArgs, _| {
            Ok(Active(ActiveTest::Title {
                text: a.text,
                ignore_case: a.ignore_case,
            }))
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
        "Some open window's title contains the text.",
        Reads::Env(LINUX),
        r#"{"title_contains": "Untitled"}"#,
        |a: WindowExistsArgs, _| {
            Ok(AnyWindow {
                title: a.title_contains,
            })
        },
    );
    lib.add(
        "clipboard_contains",
        "The clipboard's text contains the text.",
        Reads::Env(super::ANY),
        r#"{"text": "42"}"#,
        |a: ClipContainsArgs, _| {
            Ok(Clipboard(ClipTest::Contains {
                text: a.text,
                ignore_case: a.ignore_case,
            }))
        },
    );
    lib.add(
        "clipboard_matches",
        "A regular expression matches the clipboard's text.",
        Reads::Env(super::ANY),
        r#"{"regex": "^https?://"}"#,
        |a: ClipMatchesArgs, _| {
            let re = regex::Regex::new(&a.regex)
                .map_err(|e| format!("`regex` is not a valid regular expression: {e}"))?;
            Ok(Clipboard(ClipTest::Matches(re)))
        },
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
        "command_output_matches",
        "A command run on the environment prints output matching a regular expression (needs a guest that allows setup).",
        Reads::Env(super::ANY),
        r#"{"argv": ["date", "+%Y"], "regex": "^20[0-9]{2}"}"#,
        |a: CommandArgs, _| {
            if a.argv.is_empty() {
                return Err("`argv` is empty".into());
            }
            let re = regex::Regex::new(&a.regex).map_err(|e| format!("`regex` is not a valid regular expression: {e}"))?;
            Ok(Command {
                argv: a.argv,
                re,
                timeout_ms: a.timeout_ms,
            })
        },
    );
}

#[cfg(test)]
mod tests {
    use super::{final_line, unquote};

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

    #[test]
    fn only_the_final_line_break_is_dropped() {
        assert_eq!(final_line("2\n"), "2");
        assert_eq!(final_line("2\r\n"), "2");
        assert_eq!(final_line("a\nb\n\n"), "a\nb\n");
        assert_eq!(final_line("2"), "2");
    }
}

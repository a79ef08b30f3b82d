//! CRAB's own predicates where they differ from pincer's, for `pincer run --compat crab`
//! (CRAB's `crab-benchmark-v0/dataset/ubuntu_subtasks.py` and `crab/actions/crab_actions.py`
//! at fa46f8c, line by line). Where CRAB's Python raises (a directory missing, a file that
//! is not a document), these fail as an evaluator error, which under `--compat crab` ends
//! the task as CRAB's `evaluator_exception` does. The Android ones follow
//! `android_subtasks.py`: the screen as `uiautomator dump` shows it, and the Android
//! environment's last action.

use super::android::{
    ANDROID, ContactEmailShown, ContactShownArgs, PhotosArgs, PhotosDetails, text, tree,
    tree_probe, with_id,
};
use super::documents::{crab_odt_text, file_bytes, read_probe};
use super::files::CopiedArgs;
use super::{LINUX, Library, Reads, clip};
use crate::eval::{
    AgentEvent, AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected,
};
use pincer_shared::action::Action;
use pincer_shared::probe::{Probe, ProbeReply};
use schemars::JsonSchema;
use serde::Deserialize;

/// What CRAB's Python would have raised.
fn raises(what: String) -> EvalError {
    EvalError::Scorer(format!("CRAB's check raises here: {what}"))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct OpenArgs {
    /// Text the process's name contains, in any case.
    name: String,
}

/// `is_process_open`: some process's name contains the text, ignoring case.
#[derive(Debug)]
struct Open(String);

impl Check for Open {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Processes]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let ProbeReply::Processes(ps) = reply(r[0], "processes")? else {
            return Err(unexpected("processes", reply(r[0], "processes")?));
        };
        let want = self.0.to_lowercase();
        Ok(
            match ps.iter().find(|p| p.name.to_lowercase().contains(&want)) {
                Some(p) => Verdict::pass(format!("process '{}' (pid {}) is open", p.name, p.pid)),
                None => Verdict::fail(format!("no process whose name contains '{}'", self.0)),
            },
        )
    }
}

/// `verify_files_copied`: the names ending in `.<extension>` (case-sensitive, any kind of
/// entry) are the same set in both directories; sizes and other files are not looked at.
#[derive(Debug)]
struct Copied(CopiedArgs);

impl Check for Copied {
    fn probes(&self) -> Vec<Probe> {
        vec![
            Probe::ListDir {
                path: self.0.source_dir.clone(),
            },
            Probe::ListDir {
                path: self.0.target_dir.clone(),
            },
        ]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let suffix = format!(".{}", self.0.extension);
        let names =
            |i: usize, dir: &str| -> Result<std::collections::BTreeSet<String>, EvalError> {
                match reply(r[i], "list dir")? {
                    ProbeReply::Dir(Some(d)) => Ok(d
                        .iter()
                        .filter(|e| e.name.ends_with(&suffix))
                        .map(|e| e.name.clone())
                        .collect()),
                    ProbeReply::Dir(None) => {
                        Err(raises(format!("os.listdir({dir}): no such directory")))
                    }
                    other => Err(unexpected("list dir", other)),
                }
            };
        let src = names(0, &self.0.source_dir)?;
        let dst = names(1, &self.0.target_dir)?;
        Ok(if src == dst {
            Verdict::pass(format!(
                "the {suffix} names of {} and {} are the same ({})",
                self.0.source_dir,
                self.0.target_dir,
                src.len()
            ))
        } else {
            let missing: Vec<&str> = src.difference(&dst).map(String::as_str).collect();
            let extra: Vec<&str> = dst.difference(&src).map(String::as_str).collect();
            Verdict::fail(format!(
                "the {suffix} names differ: missing from {} [{}], only there [{}]",
                self.0.target_dir,
                clip(&missing.join(", "), 60),
                clip(&extra.join(", "), 60)
            ))
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PastedArgs {
    /// The file.
    path: String,
    /// Read it as an OpenDocument text (Writer's check) instead of plain text (VS Code's).
    #[serde(default)]
    odt: bool,
}

/// `verify_file_content_with_clipboard` and `verify_odt_file_content_with_clipboard`: the
/// clipboard and the file split at newlines, and each clipboard line inside the file's
/// line of the same number, as far as the shorter of the two goes (Python's `zip`): an
/// empty clipboard, or a file with fewer lines, passes on what there is.
#[derive(Debug)]
struct Pasted(PastedArgs);

impl Check for Pasted {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.0.path), Probe::Clipboard]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.0.path;
        let clipboard = match reply(r[1], "clipboard")? {
            ProbeReply::Clipboard(t) => t.clone().unwrap_or_default(),
            other => return Err(unexpected("clipboard", other)),
        };
        let file = match file_bytes(r[0], p)? {
            Ok(f) => f,
            Err(_) => return Err(raises(format!("open({p}): no such file"))),
        };
        let text = if self.0.odt {
            crab_odt_text(&file.bytes).map_err(|e| raises(format!("odfpy cannot load {p}: {e}")))?
        } else {
            String::from_utf8(file.bytes.clone())
                .map_err(|_| raises(format!("{p} is not UTF-8 text")))?
        };
        for (i, (c, f)) in clipboard.split('\n').zip(text.split('\n')).enumerate() {
            if !f.contains(c) {
                return Ok(Verdict::fail(format!(
                    "line {} of {p} is '{}', which does not contain the clipboard's '{}'",
                    i + 1,
                    clip(f, 40),
                    clip(c, 40)
                )));
            }
        }
        Ok(Verdict::pass(format!(
            "each of the first {} clipboard lines is in the same line of {p}",
            clipboard.split('\n').count().min(text.split('\n').count())
        )))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SubmitArgs {
    /// Text the submitted answer contains (case-sensitive).
    text: String,
}

/// `check_submit`: the agent's last own action (a submit, a wait or done; CRAB's root
/// environment's trajectory) is a submit whose content contains the text.
#[derive(Debug)]
struct Submitted(String);

impl Check for Submitted {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let last = log.events.iter().rev().find(|e| {
            matches!(
                e,
                AgentEvent::Answer { .. } | AgentEvent::Wait | AgentEvent::Done
            )
        });
        let want = &self.0;
        Ok(match last {
            Some(AgentEvent::Answer { text }) if text.contains(want.as_str()) => Verdict::pass(
                format!("the agent's last own action submitted '{}'", clip(text, 60)),
            ),
            Some(AgentEvent::Answer { text }) => Verdict::fail(format!(
                "the agent submitted '{}', which does not contain '{}'",
                clip(text, 60),
                clip(want, 60)
            )),
            Some(_) => Verdict::fail(format!(
                "the agent's last own action was not a submit of '{}'",
                clip(want, 60)
            )),
            None => Verdict::fail(format!("the agent has not submitted '{}'", clip(want, 60))),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LastTypedArgs {
    /// Text the typing contains, in any case.
    text: String,
    /// The environment role whose actions count (CRAB's Android environment).
    env: String,
}

/// `check_contain_input_text`: the environment's last action typed a text containing this
/// one, ignoring case. Typing followed by any other action there (a tap on Send) no longer
/// counts.
#[derive(Debug)]
struct LastTyped(LastTypedArgs);

impl Check for LastTyped {
    fn probes(&self) -> Vec<Probe> {
        Vec::new()
    }

    fn judge(&self, _: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError> {
        let LastTypedArgs { text: want, env } = &self.0;
        let last = log.events.iter().rev().find_map(|e| match e {
            AgentEvent::Action { env: role, action } if role == env => Some(action),
            _ => None,
        });
        let quoted = clip(want, 60);
        Ok(match last {
            Some(Action::TypeText { text })
                if text.to_lowercase().contains(&want.to_lowercase()) =>
            {
                Verdict::pass(format!(
                    "the last action on {env} typed '{}'",
                    clip(text, 60)
                ))
            }
            Some(Action::TypeText { text }) => Verdict::fail(format!(
                "the last action on {env} typed '{}', which does not contain '{quoted}'",
                clip(text, 60)
            )),
            Some(_) => Verdict::fail(format!(
                "the last action on {env} was not typing '{quoted}'"
            )),
            None => Verdict::fail(format!(
                "the agent has done nothing on {env}, expected typing '{quoted}'"
            )),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RegisteredArgs {
    /// The contact's email address.
    mail: String,
    /// The contact's name.
    name: String,
}

/// `check_contact_registered`: the first `large_title` on screen is *part of* the name and
/// the first `header` part of the mail (CRAB's tests run that way round, so "John" passes
/// for "John Haruhimiya"); a screen with a title but no header raises.
#[derive(Debug)]
struct Registered(RegisteredArgs);

impl Check for Registered {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let RegisteredArgs { mail, name } = &self.0;
        let Some(title) = with_id(root, "com.android.contacts:id/large_title").next() else {
            return Ok(Verdict::fail(
                "the screen shows no contact's name (large_title)",
            ));
        };
        if !name.contains(text(title)) {
            return Ok(Verdict::fail(format!(
                "the contact shown is '{}', which is not part of '{name}'",
                clip(text(title), 60)
            )));
        }
        let Some(header) = with_id(root, "com.android.contacts:id/header").next() else {
            return Err(raises(
                "mail_node[0]: the contact page has no header (IndexError)".into(),
            ));
        };
        Ok(Verdict::when(
            mail.contains(text(header)),
            format!(
                "the contact page shows '{}' <{}>",
                clip(text(title), 60),
                clip(text(header), 60)
            ),
            format!(
                "the contact page's header is '{}', which is not part of '{mail}'",
                clip(text(header), 60)
            ),
        ))
    }
}

/// `check_contain_contact`'s email pattern (`re.match`, so anchored at the start only).
const CRAB_EMAIL: &str = r"^\w+@\w+.com";

/// `check_file`'s date pattern: two-digit days and hours, plain spaces around the bullet.
const CRAB_PHOTOS_DATE: &str = r"^(Tue|Mon|Wed|Thu|Fri|Sat|Sun),\s(May|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s\d{2},\s\d{4} • \d{2}:\d{2}\s(AM|PM)";

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "crab_process_open",
        "CRAB's is_process_open: some process's name contains the text, ignoring case (--compat crab).",
        Reads::Env(LINUX),
        r#"{"name": "vim"}"#,
        |a: OpenArgs, _| Ok(Open(a.name)),
    );
    lib.add(
        "crab_files_copied",
        "CRAB's verify_files_copied: the file names ending in .EXTENSION (case-sensitive) are the same in both directories; a missing directory is an evaluator error (--compat crab).",
        Reads::Env(LINUX),
        r#"{"source_dir": "/home/crab/assets", "target_dir": "/home/crab/assets_copy", "extension": "txt"}"#,
        |a: CopiedArgs, _| Ok(Copied(a)),
    );
    lib.add(
        "crab_clipboard_in_file",
        "CRAB's paste check: each clipboard line inside the same-numbered line of the file, as far as the shorter goes (Python's zip); `odt` reads Writer's paragraphs as odfpy does (--compat crab).",
        Reads::Env(LINUX),
        r#"{"path": "/home/crab/paste.odt", "odt": true}"#,
        |a: PastedArgs, _| Ok(Pasted(a)),
    );
    lib.add(
        "crab_submitted",
        "CRAB's check_submit: the agent's last own action (submit, wait or done) submitted a text containing this one, case-sensitive (--compat crab).",
        Reads::Agent,
        r#"{"text": "1 hour behind"}"#,
        |a: SubmitArgs, _| Ok(Submitted(a.text)),
    );
    lib.add(
        "crab_last_typed",
        "CRAB's check_contain_input_text: the environment's last action typed a text containing this one, ignoring case (--compat crab).",
        Reads::Agent,
        r#"{"text": "Sydney", "env": "phone"}"#,
        |a: LastTypedArgs, _| Ok(LastTyped(a)),
    );
    lib.add(
        "crab_contact_registered",
        "CRAB's check_contact_registered: the first contact name on screen is part of `name` and the first header part of `mail`; no header is an evaluator error (--compat crab).",
        Reads::Env(ANDROID),
        r#"{"mail": "abcdcly@qq.com", "name": "John Haruhimiya"}"#,
        |a: RegisteredArgs, _| Ok(Registered(a)),
    );
    lib.add(
        "crab_contact_email_shown",
        "CRAB's check_contain_contact: the named contact's page with an email row, its first header matching ^\\w+@\\w+.com (--compat crab).",
        Reads::Env(ANDROID),
        r#"{"name": "John Lauphin"}"#,
        |a: ContactShownArgs, _| ContactEmailShown::new(a.name, CRAB_EMAIL),
    );
    lib.add(
        "crab_photos_details",
        "CRAB's check_file: Photos' details panel shows the file and, first, a date with two-digit day and hour (--compat crab).",
        Reads::Env(ANDROID),
        r#"{"file": "meow.jpg"}"#,
        |a: PhotosArgs, _| PhotosDetails::new(a.file, CRAB_PHOTOS_DATE),
    );
}

#[cfg(test)]
mod tests {
    use super::super::replies::{archive, file};
    use crate::eval::functions::Library;
    use crate::eval::{AgentEvent, AgentLog, EvalError, ProbeResult, Verdict};
    use pincer_shared::action::Action;
    use pincer_shared::probe::{DirEntry, FileKind, ProbeReply, ProcessInfo};
    use serde_json::json;

    fn judge_log(
        name: &str,
        args: serde_json::Value,
        replies: &[ProbeResult],
        log: &AgentLog,
    ) -> Result<Verdict, EvalError> {
        let check = Library::standard().build(name, &args).unwrap();
        let replies: Vec<&ProbeResult> = replies.iter().collect();
        check.judge(&replies, log)
    }

    fn judge(
        name: &str,
        args: serde_json::Value,
        replies: &[ProbeResult],
    ) -> Result<bool, EvalError> {
        judge_log(name, args, replies, &AgentLog::default()).map(|v| v.passed)
    }

    fn dir(names: &[&str]) -> ProbeResult {
        Ok(ProbeReply::Dir(Some(
            names
                .iter()
                .map(|n| DirEntry {
                    name: (*n).into(),
                    kind: FileKind::File,
                    size: 1,
                })
                .collect(),
        )))
    }

    fn clipboard(text: Option<&str>) -> ProbeResult {
        Ok(ProbeReply::Clipboard(text.map(str::to_owned)))
    }

    /// A Writer document with these body elements.
    fn odt(body: &str) -> Vec<u8> {
        archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.text"),
            (
                "content.xml",
                &format!(
                    r#"<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>{body}</office:text></office:body></office:document-content>"#
                ),
            ),
        ])
    }

    #[test]
    fn a_process_is_open_when_its_name_contains_the_text_in_any_case() {
        let ps = |name: &str| -> ProbeResult {
            Ok(ProbeReply::Processes(vec![ProcessInfo {
                pid: 7,
                ppid: 1,
                name: name.into(),
                cmdline: vec![],
                uid: 1000,
            }]))
        };
        let vim = json!({"name": "vim"});
        assert!(judge("crab_process_open", vim.clone(), &[ps("vim.basic")]).unwrap());
        assert!(judge("crab_process_open", vim.clone(), &[ps("NVIM")]).unwrap());
        assert!(!judge("crab_process_open", vim, &[ps("nano")]).unwrap());
    }

    #[test]
    fn copies_compare_name_sets_of_the_extension_only() {
        let args = json!({"source_dir": "/s", "target_dir": "/t", "extension": "py"});
        let same = [dir(&["a.py", "b.py", "x.txt"]), dir(&["a.py", "b.py"])];
        assert!(judge("crab_files_copied", args.clone(), &same).unwrap());
        // An extra .py in the target fails (pincer's files_copied passes it).
        let extra = [dir(&["a.py"]), dir(&["a.py", "old.py"])];
        assert!(!judge("crab_files_copied", args.clone(), &extra).unwrap());
        // Case matters; nothing to copy and nothing copied passes.
        let upper = [dir(&["A.PY"]), dir(&[])];
        assert!(judge("crab_files_copied", args.clone(), &upper).unwrap());
        // A missing directory is what Python's os.listdir raises on.
        let gone = [dir(&["a.py"]), Ok(ProbeReply::Dir(None))];
        let e = judge("crab_files_copied", args, &gone).unwrap_err();
        assert!(e.to_string().contains("os.listdir(/t)"), "{e}");
    }

    #[test]
    fn pastes_compare_lines_as_far_as_the_shorter_goes() {
        let text = json!({"path": "/p"});
        let two = file(b"alpha one\nbeta two\n");
        assert!(
            judge(
                "crab_clipboard_in_file",
                text.clone(),
                &[two.clone(), clipboard(Some("alpha\nbeta"))]
            )
            .unwrap()
        );
        assert!(
            !judge(
                "crab_clipboard_in_file",
                text.clone(),
                &[two.clone(), clipboard(Some("beta\nalpha"))]
            )
            .unwrap()
        );
        // The vacuous passes pincer's check refuses: an empty clipboard, a shorter file.
        assert!(
            judge(
                "crab_clipboard_in_file",
                text.clone(),
                &[two.clone(), clipboard(None)]
            )
            .unwrap()
        );
        assert!(
            judge(
                "crab_clipboard_in_file",
                text.clone(),
                &[file(b"alpha"), clipboard(Some("alpha\nmissing"))]
            )
            .unwrap()
        );
        // Writer's file read as odfpy reads it: headings left out, a soft break splits.
        let writer = json!({"path": "/p", "odt": true});
        let doc = file(&odt(
            "<text:h>Title</text:h><text:p>first<text:line-break/>second</text:p><text:p>third</text:p>",
        ));
        assert!(
            judge(
                "crab_clipboard_in_file",
                writer.clone(),
                &[doc.clone(), clipboard(Some("first\nsecond\nthird"))]
            )
            .unwrap()
        );
        assert!(
            !judge(
                "crab_clipboard_in_file",
                writer.clone(),
                &[doc, clipboard(Some("Title"))]
            )
            .unwrap()
        );
        // A file odfpy cannot load is an exception in CRAB.
        let e = judge(
            "crab_clipboard_in_file",
            writer,
            &[file(b"plain"), clipboard(Some("x"))],
        )
        .unwrap_err();
        assert!(e.to_string().contains("odfpy cannot load /p"), "{e}");
    }

    #[test]
    fn a_submit_counts_only_while_it_is_the_agents_last_own_action() {
        let args = json!({"text": "1 hour behind"});
        let log = |events: Vec<AgentEvent>| AgentLog { events };
        let answer = AgentEvent::Answer {
            text: "It is 1 hour behind.".into(),
        };
        let passed = |l: &AgentLog| {
            judge_log("crab_submitted", args.clone(), &[], l)
                .unwrap()
                .passed
        };
        assert!(passed(&log(vec![answer.clone()])));
        assert!(!passed(&log(vec![answer.clone(), AgentEvent::Wait])));
        // Actions on a screen are not the agent's own (CRAB's root environment's).
        let typed = AgentEvent::Action {
            env: "desktop".into(),
            action: Action::KeyPress {
                key: "enter".parse().unwrap(),
            },
        };
        assert!(passed(&log(vec![answer, typed])));
        let lower = AgentEvent::Answer {
            text: "1 HOUR BEHIND".into(),
        };
        assert!(!passed(&log(vec![lower])));
    }

    #[test]
    fn typing_counts_only_while_it_is_the_phones_last_action() {
        let args = json!({"text": "sydney", "env": "phone"});
        let on = |env: &str, action: Action| AgentEvent::Action {
            env: env.into(),
            action,
        };
        let typed = on(
            "phone",
            Action::TypeText {
                text: "New name: Sydney".into(),
            },
        );
        let tap = on("phone", Action::click(5, 5));
        let judged = |events: Vec<AgentEvent>| {
            judge_log("crab_last_typed", args.clone(), &[], &AgentLog { events }).unwrap()
        };
        assert!(judged(vec![typed.clone()]).passed);
        // The desktop's actions and the agent's own are not the phone's.
        assert!(
            judged(vec![
                typed.clone(),
                on("desktop", Action::click(1, 1)),
                AgentEvent::Wait
            ])
            .passed
        );
        let v = judged(vec![typed, tap]);
        assert!(
            !v.passed && v.feedback.contains("was not typing"),
            "{}",
            v.feedback
        );
        let v = judged(vec![AgentEvent::Wait]);
        assert!(
            !v.passed && v.feedback.contains("has done nothing on phone"),
            "{}",
            v.feedback
        );
    }
}

//! Every checkpoint function of the Linux library judged against real state on real local
//! desktops, the way the runner judges it: a task, its graph, an evaluator step over live
//! environments (one probe batch per environment). Each function has cases the state makes
//! pass and cases it makes fail, and each verdict's feedback must name what was observed.
//! The state is made by setup requests, by real apps (zenity, gtk3-widget-factory,
//! ImageMagick, gsettings) and by agent actions; several cases flip when the state changes.
//! Then the evaluator's own semantics against live desktops: one round trip per environment
//! for an 11-node graph, a cascade within one step, and the check before the first action.

use pincer::env::Environment;
use pincer::eval::functions::{Library, Reads};
use pincer::eval::graph::{Envs, Evaluator};
use pincer::eval::{AgentEvent, AgentLog};
use pincer_shared::Action;
use pincer_shared::Platform;
use pincer_shared::key::parse_combo;
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::setup::{ExecRequest, WindowOp};
use pincer_tests::cases::{
    Case, Counted, envs, fail, graph, judge, judge_log, pass, task, uncovered,
};
use pincer_tests::{Sandbox, eventually, process_running, wait_for_node};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How long an app may take to show up or go away on a busy 2-core machine.
const APP_WAIT: Duration = Duration::from_secs(60);

fn argv(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs a program on the guest and insists it succeeds.
async fn run(env: &Environment, args: &[&str]) -> String {
    let out = env
        .exec(ExecRequest::new(args.iter().copied()))
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The active window's title and process, once `pred` holds for them.
async fn wait_active(env: &Environment, pred: impl Fn(&str, &str) -> bool) -> (String, String) {
    eventually(APP_WAIT, || async {
        match env.probe(Probe::ActiveWindow).await.ok()? {
            ProbeReply::ActiveWindow(Some(w)) => {
                let process = w.process_name.unwrap_or_default();
                pred(&w.title, &process).then_some((w.title, process))
            }
            _ => None,
        }
    })
    .await
    .expect("the expected window becomes active")
}

async fn clipboard(env: &Environment) -> Option<String> {
    match env.probe(Probe::Clipboard).await.ok()? {
        ProbeReply::Clipboard(text) => text,
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Files: existence, content, patterns, copies, images; combinators over them
// ---------------------------------------------------------------------------------------

/// Cases while `~/notes/a.txt` holds "Hello Pincer\n", `~/notes/report.txt` was written by
/// a shell pipeline, `~/dst` holds a good copy of `a.ods` and a short copy of `b.ods`,
/// `~/dst2` a full copy, ImageMagick saved the 800x600 screen as `~/shot.png` and
/// `~/shot.jpg`, `~/notes/link.txt` links to `a.txt`, `~/notes-link` to `~/notes`,
/// `~/notes/dangling.txt` to nothing, `~/twins/one.bin` and `two.bin` have the same size
/// and other bytes, and `~/big.txt` is 17,000,006 bytes of "x" ending in "needle".
fn file_cases() -> Vec<Case> {
    let a = "~/notes/a.txt";
    let missing = "~/notes/missing.txt";
    let (link, dir_link, dangling) = ("~/notes/link.txt", "~/notes-link", "~/notes/dangling.txt");
    vec![
        // Symbolic links are followed.
        pass(
            "file_exists",
            json!({"path": link}),
            &[
                link,
                "file ~/notes/link.txt exists (a symbolic link to a file)",
            ],
        ),
        fail(
            "file_exists",
            json!({"path": dir_link}),
            &[dir_link, "symbolic link to a directory, not a file"],
        ),
        fail(
            "file_exists",
            json!({"path": dangling}),
            &[dangling, "dangling symbolic link, not a file"],
        ),
        pass(
            "dir_exists",
            json!({"path": dir_link}),
            &["directory ~/notes-link exists (a symbolic link to a directory)"],
        ),
        fail(
            "dir_exists",
            json!({"path": link}),
            &[link, "is a symbolic link to a file, not a directory"],
        ),
        fail(
            "dir_exists",
            json!({"path": dangling}),
            &[dangling, "dangling symbolic link, not a directory"],
        ),
        pass(
            "file_contains",
            json!({"path": link, "text": "Pincer"}),
            &[link, "Pincer"],
        ),
        fail(
            "file_contains",
            json!({"path": dir_link, "text": "x"}),
            &[dir_link, "symbolic link to a directory"],
        ),
        // A file larger than a check reads is not judged on its first 16 MiB: "xxx" is
        // there, "needle" only past the limit.
        fail(
            "file_contains",
            json!({"path": "~/big.txt", "text": "xxx"}),
            &["~/big.txt is 17000006 bytes", "16 MiB", "not judged"],
        ),
        fail(
            "file_contains",
            json!({"path": "~/big.txt", "text": "needle"}),
            &["~/big.txt is 17000006 bytes", "not judged"],
        ),
        fail(
            "file_matches",
            json!({"path": "~/big.txt", "regex": "^x+"}),
            &["~/big.txt is 17000006 bytes", "not judged"],
        ),
        pass("file_exists", json!({"path": a}), &[a, "13 bytes"]),
        fail(
            "file_exists",
            json!({"path": missing}),
            &["file ~/notes/missing.txt does not exist"],
        ),
        fail(
            "file_exists",
            json!({"path": "~/notes"}),
            &["~/notes exists but is a directory, not a file"],
        ),
        pass(
            "file_absent",
            json!({"path": "~/notes/draft.txt"}),
            &["no file or directory exists at ~/notes/draft.txt"],
        ),
        pass(
            "file_absent",
            json!({"path": missing}),
            &["no file or directory exists at ~/notes/missing.txt"],
        ),
        fail(
            "file_absent",
            json!({"path": a}),
            &["~/notes/a.txt exists (a file of 13 bytes), expected nothing there"],
        ),
        fail(
            "file_absent",
            json!({"path": "~/notes"}),
            &["~/notes exists (a directory), expected nothing there"],
        ),
        pass(
            "dir_exists",
            json!({"path": "~/notes"}),
            &["directory ~/notes exists"],
        ),
        fail(
            "dir_exists",
            json!({"path": a}),
            &[a, "a file, not a directory"],
        ),
        fail(
            "dir_exists",
            json!({"path": "~/nowhere"}),
            &["~/nowhere", "does not exist"],
        ),
        pass(
            "file_contains",
            json!({"path": a, "text": "Pincer"}),
            &[a, "Pincer"],
        ),
        pass(
            "file_contains",
            json!({"path": a, "text": "hello PINCER", "ignore_case": true}),
            &[a],
        ),
        fail(
            "file_contains",
            json!({"path": a, "text": "hello PINCER"}),
            &[a, "Hello Pincer"],
        ),
        fail(
            "file_contains",
            json!({"path": a, "text": "goodbye"}),
            &[a, "Hello Pincer", "goodbye"],
        ),
        fail(
            "file_contains",
            json!({"path": missing, "text": "x"}),
            &[missing, "does not exist"],
        ),
        // A directory where a file should be is the agent's doing, not a broken probe.
        fail(
            "file_contains",
            json!({"path": "~/notes", "text": "x"}),
            &["~/notes", "directory"],
        ),
        pass(
            "file_equals",
            json!({"path": a, "content": "Hello Pincer"}),
            &[a, "Hello Pincer"],
        ),
        fail(
            "file_equals",
            json!({"path": a, "content": "Hello Pincer", "trim": false}),
            &[a, "'Hello Pincer⏎'"],
        ),
        fail(
            "file_equals",
            json!({"path": a, "content": "Hello"}),
            &[a, "'Hello Pincer⏎'", "equal to 'Hello'"],
        ),
        fail(
            "file_equals",
            json!({"path": "~/notes", "content": "x"}),
            &["~/notes", "directory"],
        ),
        pass(
            "file_matches",
            json!({"path": "~/notes/report.txt", "regex": r"total: \d+"}),
            &["~/notes/report.txt", "'total: 10'"],
        ),
        // `$` holds before the final newline, as in Python.
        pass(
            "file_matches",
            json!({"path": "~/notes/report.txt", "regex": r"^total: 10$"}),
            &["'total: 10'"],
        ),
        fail(
            "file_matches",
            json!({"path": "~/notes/report.txt", "regex": r"total: \d{3}"}),
            &["~/notes/report.txt", "total: 10"],
        ),
        fail(
            "file_matches",
            json!({"path": missing, "regex": "."}),
            &[missing, "does not exist"],
        ),
        pass(
            "file_text",
            json!({"path": a, "text": {"equals": "hello pincer", "ignore_case": true}}),
            &[a, "(equal to 'hello pincer' (ignoring case))"],
        ),
        // The same file with its final newline counted is not "Hello Pincer".
        fail(
            "file_text",
            json!({"path": a, "text": {"equals": "Hello Pincer", "trim": false}}),
            &[a, "'Hello Pincer⏎'", "equal to 'Hello Pincer'"],
        ),
        pass(
            "file_text",
            json!({"path": "~/notes/report.txt", "text": {"regex": r"^total: \d+$"}}),
            &["'total: 10'"],
        ),
        fail(
            "file_text",
            json!({"path": "~/notes/report.txt", "text": {"digits": "100"}}),
            &["~/notes/report.txt", "with the digits 100"],
        ),
        pass(
            "files_copied",
            json!({"source_dir": "~/src", "target_dir": "~/dst2", "extension": "ods"}),
            &["all 2 .ods files of ~/src are in ~/dst2"],
        ),
        fail(
            "files_copied",
            json!({"source_dir": "~/src", "target_dir": "~/dst", "extension": ".ODS"}),
            &["1 of 2 .ods files of ~/src is in ~/dst; missing or of another size: 'b.ods'"],
        ),
        fail(
            "files_copied",
            json!({"source_dir": "~/src", "target_dir": "~/nowhere", "extension": "ods"}),
            &["~/nowhere", "does not exist"],
        ),
        fail(
            "files_copied",
            json!({"source_dir": "~/src", "target_dir": "~/dst2", "extension": "xlsx"}),
            &["~/src holds no .xlsx files"],
        ),
        pass(
            "dir_listing",
            json!({"path": "~/dst2", "names": ["b.ods", "a.ods"]}),
            &["directory ~/dst2 holds exactly 'b.ods', 'a.ods'"],
        ),
        fail(
            "dir_listing",
            json!({"path": "~/src", "names": ["a.ods", "b.ods"]}),
            &["directory ~/src should hold exactly 'a.ods', 'b.ods': also holds 'readme.txt'"],
        ),
        fail(
            "dir_listing",
            json!({"path": "~/dst2", "names": ["a.ods", "b.ods", "c.ods"]}),
            &["directory ~/dst2 should hold exactly 'a.ods', 'b.ods', 'c.ods': missing 'c.ods'"],
        ),
        fail(
            "dir_listing",
            json!({"path": "~/nowhere", "names": []}),
            &["directory ~/nowhere does not exist"],
        ),
        pass(
            "same_content",
            json!({"path": "~/src/b.ods", "copy": "~/dst2/b.ods"}),
            &["file ~/dst2/b.ods has the same 8 bytes as ~/src/b.ods"],
        ),
        fail(
            "same_content",
            json!({"path": "~/src/b.ods", "copy": "~/dst/b.ods"}),
            &["file ~/dst/b.ods has 3 bytes, ~/src/b.ods has 8"],
        ),
        fail(
            "same_content",
            json!({"path": "~/src/a.ods", "copy": "~/src/b.ods"}),
            &["file ~/src/b.ods has 8 bytes, ~/src/a.ods has 7"],
        ),
        fail(
            "same_content",
            json!({"path": "~/twins/one.bin", "copy": "~/twins/two.bin"}),
            &[
                "file ~/twins/two.bin has the same size as ~/twins/one.bin (11 bytes) but different content",
            ],
        ),
        fail(
            "same_content",
            json!({"path": "~/src/a.ods", "copy": "~/notes"}),
            &["~/notes is a directory, not a file"],
        ),
        pass(
            "image_file",
            json!({"path": "~/shot.png", "width": 800, "height": 600, "format": "png"}),
            &["image ~/shot.png is 800x600 png"],
        ),
        pass(
            "image_file",
            json!({"path": "~/shot.jpg", "width": 800, "format": "jpg"}),
            &["image ~/shot.jpg is 800x600 jpeg"],
        ),
        fail(
            "image_file",
            json!({"path": "~/shot.png", "width": 1024, "format": "png"}),
            &["image ~/shot.png is 800x600 png, expected png of width 1024"],
        ),
        fail(
            "image_file",
            json!({"path": "~/shot.png", "format": "jpeg"}),
            &["image ~/shot.png is 800x600 png, expected jpeg"],
        ),
        fail(
            "image_file",
            json!({"path": a}),
            &["file ~/notes/a.txt is not an image pincer can read"],
        ),
        fail(
            "image_file",
            json!({"path": "~/none.png"}),
            &["image ~/none.png does not exist"],
        ),
        pass(
            "not",
            json!({"check": "file_exists", "args": {"path": missing}}),
            &["file_exists does not hold, as required: file ~/notes/missing.txt does not exist"],
        ),
        fail(
            "not",
            json!({"check": "file_exists", "args": {"path": a}}),
            &["file_exists holds but must not: file ~/notes/a.txt exists (13 bytes)"],
        ),
        pass(
            "all_of",
            json!({"checks": [
                {"check": "file_exists", "args": {"path": a}},
                {"check": "file_contains", "args": {"path": a, "text": "Pincer"}}
            ]}),
            &[
                "all 2 checks hold: file ~/notes/a.txt exists (13 bytes); ",
                "(containing 'Pincer')",
            ],
        ),
        fail(
            "all_of",
            json!({"checks": [
                {"check": "file_exists", "args": {"path": a}},
                {"check": "file_contains", "args": {"path": a, "text": "goodbye"}}
            ]}),
            &[
                "1 of 2 checks fails: file ~/notes/a.txt reads 'Hello Pincer⏎', expected text containing 'goodbye'",
            ],
        ),
        pass(
            "any_of",
            json!({"checks": [
                {"check": "file_exists", "args": {"path": missing}},
                {"check": "dir_exists", "args": {"path": "~/notes"}}
            ]}),
            &["1 of 2 checks holds: directory ~/notes exists"],
        ),
        fail(
            "any_of",
            json!({"checks": [
                {"check": "file_exists", "args": {"path": missing}},
                {"check": "file_contains", "args": {"path": a, "text": "goodbye"}}
            ]}),
            &[
                "none of the 2 checks holds: file ~/notes/missing.txt does not exist; ",
                "reads 'Hello Pincer",
            ],
        ),
    ]
}

/// Cases after `~/notes/a.txt` was removed, `b.ods` copied properly and Mousepad saved
/// "Dear pincer," (no final newline) as `~/notes/draft.txt`: the same checkpoints flip.
fn file_cases_after() -> Vec<Case> {
    let a = "~/notes/a.txt";
    let draft = "~/notes/draft.txt";
    vec![
        fail(
            "file_absent",
            json!({"path": draft}),
            &["~/notes/draft.txt exists (a file of 12 bytes), expected nothing there"],
        ),
        pass(
            "file_equals",
            json!({"path": draft, "content": "Dear pincer,\n"}),
            &[draft, "'Dear pincer,'"],
        ),
        fail(
            "file_equals",
            json!({"path": draft, "content": "Dear pincer,\n", "trim": false}),
            &[
                draft,
                "reads 'Dear pincer,', expected text equal to 'Dear pincer,⏎'",
            ],
        ),
        pass(
            "file_contains",
            json!({"path": draft, "text": "pincer"}),
            &[draft],
        ),
        fail("file_exists", json!({"path": a}), &[a, "does not exist"]),
        fail(
            "file_exists",
            json!({"path": "~/notes/link.txt"}),
            &["~/notes/link.txt is a dangling symbolic link"],
        ),
        pass(
            "file_absent",
            json!({"path": a}),
            &["no file or directory exists at ~/notes/a.txt"],
        ),
        fail(
            "file_contains",
            json!({"path": a, "text": "Pincer"}),
            &[a, "does not exist"],
        ),
        pass(
            "files_copied",
            json!({"source_dir": "~/src", "target_dir": "~/dst", "extension": ".ODS"}),
            &["all 2 .ods files of ~/src are in ~/dst"],
        ),
        pass(
            "not",
            json!({"check": "file_exists", "args": {"path": a}}),
            &["file_exists does not hold, as required: file ~/notes/a.txt does not exist"],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_functions_judge_real_files() {
    let sb = Sandbox::new();
    let d = sb.desktop("files", "800x600", &[]);
    let env = d.connect().await;
    env.write_file("~/notes/a.txt", b"Hello Pincer\n", 0o644)
        .await
        .unwrap();
    run(
        &env,
        &[
            "sh",
            "-c",
            "seq 1 4 | awk '{s += $1} END {print \"total: \" s}' > ~/notes/report.txt",
        ],
    )
    .await;
    env.write_file("~/src/a.ods", b"sheet a", 0o644)
        .await
        .unwrap();
    env.write_file("~/src/b.ods", b"sheet bb", 0o644)
        .await
        .unwrap();
    env.write_file("~/src/readme.txt", b"not a sheet", 0o644)
        .await
        .unwrap();
    // Same size, other bytes: a copy in name and size only.
    env.write_file("~/twins/one.bin", b"telescope 1", 0o644)
        .await
        .unwrap();
    env.write_file("~/twins/two.bin", b"telescope 2", 0o644)
        .await
        .unwrap();
    let copies = concat!(
        "mkdir ~/dst ~/dst2 && cp ~/src/a.ods ~/dst/",
        // Same name, different size: not a copy.
        " && head -c 3 ~/src/b.ods > ~/dst/b.ods",
        " && cp ~/src/*.ods ~/dst2/",
    );
    run(&env, &["sh", "-c", copies]).await;
    let links = concat!(
        "ln -s ~/notes/a.txt ~/notes/link.txt && ln -s ~/notes ~/notes-link",
        " && ln -s ~/nowhere.txt ~/notes/dangling.txt",
        " && head -c 17000000 /dev/zero | tr '\\0' x > ~/big.txt && printf needle >> ~/big.txt",
    );
    run(&env, &["sh", "-c", links]).await;
    // ImageMagick grabs the real screen and converts it.
    run(
        &env,
        &[
            "sh",
            "-c",
            "import -window root ~/shot.png && convert ~/shot.png ~/shot.jpg",
        ],
    )
    .await;

    let envs = envs(vec![("desktop", env)]);
    judge(&envs, Some("desktop"), &file_cases(), &AgentLog::default()).await;

    let env = &envs.0["desktop"];
    env.remove("~/notes/a.txt").await.unwrap();
    run(env, &["sh", "-c", "cp -f ~/src/b.ods ~/dst/b.ods"]).await;
    // An editor writes a new file the way an agent would: type, then save.
    env.launch(
        argv(&["sh", "-c", "exec mousepad ~/notes/draft.txt"]),
        vec![],
    )
    .await
    .unwrap();
    wait_active(env, |title, _| title.contains("draft.txt - Mousepad")).await;
    env.act(Action::TypeText {
        text: "Dear pincer,".into(),
    })
    .await
    .unwrap();
    wait_active(env, |title, _| title.starts_with('*')).await;
    env.act(Action::Hotkey {
        keys: parse_combo("ctrl+s").unwrap(),
    })
    .await
    .unwrap();
    // Mousepad drops the title's '*' once the file is written.
    wait_active(env, |title, _| title.starts_with('/')).await;
    judge(
        &envs,
        Some("desktop"),
        &file_cases_after(),
        &AgentLog::default(),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// A live session: processes, windows, clipboard, settings, commands, the UI tree
// ---------------------------------------------------------------------------------------

const FACTORY: &str = "gtk3-widget-factory";

fn color_scheme(value: &str) -> Value {
    json!({"schema": "org.gnome.desktop.interface", "key": "color-scheme", "value": value})
}

fn active_title() -> Value {
    json!(["xdotool", "getactivewindow", "getwindowname"])
}

fn typed_entry() -> Value {
    json!({"selector": {"role": "text", "text_contains": "typed by pincer"}, "app": "zenity"})
}

/// Cases while zenity (pid `zenity`) asks "Name?" in the active window "pincer checks",
/// the clipboard holds "order 42 shipped", and gsettings set a dark color scheme and a
/// theme name with an apostrophe (which `gsettings get` prints in double quotes).
fn session_cases(zenity: u32) -> Vec<Case> {
    let zen = "'pincer checks' (zenity)";
    let theme =
        |v: &str| json!({"schema": "org.gnome.desktop.interface", "key": "gtk-theme", "value": v});
    vec![
        pass(
            "process_running",
            json!({"name": "zenity"}),
            &["process 'zenity' is running"],
        )
        .saying(format!("pid {zenity}")),
        fail(
            "process_running",
            json!({"name": FACTORY}),
            &["no process 'gtk3-widget-factory' is running, expected one"],
        ),
        pass(
            "process_not_running",
            json!({"name": FACTORY}),
            &["no process 'gtk3-widget-factory'"],
        ),
        fail(
            "process_not_running",
            json!({"name": "zenity"}),
            &["process 'zenity' is running", "), expected none"],
        )
        .saying(format!("pid {zenity}")),
        pass(
            "window_title_contains",
            json!({"text": "pincer checks"}),
            &[zen],
        ),
        pass(
            "window_title_contains",
            json!({"text": "PINCER", "ignore_case": true}),
            &[zen],
        ),
        fail(
            "window_title_contains",
            json!({"text": "PINCER"}),
            &[zen, "'PINCER'"],
        ),
        pass(
            "window_title",
            json!({"text": {"equals": "PINCER CHECKS", "ignore_case": true}}),
            &[zen],
        ),
        fail(
            "window_title",
            json!({"text": {"regex": "^checks"}}),
            &[zen, "matching /^checks/"],
        ),
        pass("window_process_is", json!({"name": "zenity"}), &[zen]),
        fail(
            "window_process_is",
            json!({"name": FACTORY}),
            &[zen, "expected a window of process 'gtk3-widget-factory'"],
        ),
        pass(
            "window_exists",
            json!({"title_contains": "pincer checks"}),
            &[zen, "is open"],
        ),
        pass(
            "window_exists",
            json!({"title": {"regex": "^pincer"}}),
            &[zen, "is open"],
        ),
        fail(
            "window_exists",
            json!({"title_contains": "widget"}),
            &[
                "no window has a title containing 'widget'",
                "'pincer checks'",
            ],
        ),
        pass(
            "clipboard_contains",
            json!({"text": "42"}),
            &["'order 42 shipped'"],
        ),
        pass(
            "clipboard_contains",
            json!({"text": "ORDER 42", "ignore_case": true}),
            &["'order 42 shipped'"],
        ),
        fail(
            "clipboard_contains",
            json!({"text": "43"}),
            &["'order 42 shipped'", "'43'"],
        ),
        pass(
            "clipboard_text",
            json!({"text": {"digits": "42"}}),
            &["'order 42 shipped'", "with the digits 42"],
        ),
        fail(
            "clipboard_text",
            json!({"text": {"equals": "order 42"}}),
            &["'order 42 shipped'", "equal to 'order 42'"],
        ),
        pass(
            "clipboard_matches",
            json!({"regex": r"^order \d+ shipped$"}),
            &["'order 42 shipped'"],
        ),
        fail(
            "clipboard_matches",
            json!({"regex": r"^\d+$"}),
            &["'order 42 shipped'", r"/^\d+$/"],
        ),
        pass(
            "gsettings_equals",
            color_scheme("prefer-dark"),
            &["color-scheme is 'prefer-dark'"],
        ),
        pass(
            "gsettings_equals",
            color_scheme("'prefer-dark'"),
            &["color-scheme is 'prefer-dark'"],
        ),
        fail(
            "gsettings_equals",
            color_scheme("default"),
            &[
                "setting org.gnome.desktop.interface color-scheme is 'prefer-dark', expected 'default'",
            ],
        ),
        pass(
            "gsettings_equals",
            theme("Bob's"),
            &["gtk-theme is \"Bob's\""],
        ),
        fail(
            "gsettings_equals",
            theme("Bob"),
            &["gtk-theme is \"Bob's\", expected 'Bob'"],
        ),
        fail(
            "gsettings_equals",
            json!({"schema": "org.gnome.desktop.interface", "key": "no-such-key", "value": "1"}),
            &["setting org.gnome.desktop.interface no-such-key does not exist"],
        ),
        pass(
            "command_output",
            json!({"argv": active_title(), "text": {"equals": "pincer checks"}}),
            &["printed 'pincer checks", "' (equal to 'pincer checks')"],
        ),
        fail(
            "command_output",
            json!({"argv": active_title(), "text": {"contains": "widget"}}),
            &["printed 'pincer checks", "containing 'widget'"],
        ),
        pass(
            "command_output_matches",
            json!({"argv": active_title(), "regex": "^pincer checks$"}),
            &["printed 'pincer checks' (matching /^pincer checks$/)"],
        ),
        fail(
            "command_output_matches",
            json!({"argv": active_title(), "regex": "widget"}),
            &["printed 'pincer checks", "exit code 0", "/widget/"],
        ),
        fail(
            "command_output_matches",
            json!({"argv": ["cat", "/nonexistent/pincer"], "regex": "."}),
            &["printed nothing (exit code 1", "No such file or directory"],
        ),
        pass(
            "ui_node_exists",
            json!({"selector": {"role": "text", "states": ["editable", "focused"]}, "app": "zenity"}),
            &["found text", " at "],
        ),
        pass(
            "ui_node_exists",
            json!({"selector": {"role": "push button", "name": "OK", "inside": {"role": "dialog", "name": "pincer checks"}}}),
            &[
                "found push button 'OK' at ",
                "(1 node matches push button named 'OK'",
            ],
        ),
        fail(
            "ui_node_exists",
            json!({"selector": {"role": "push button", "name": "Delete"}}),
            &["no node of the ", "matches push button named 'Delete'"],
        ),
        fail(
            "ui_node_exists",
            json!({"selector": {"role": "push button"}, "app": "zenity", "count": 3}),
            &[
                "2 of ",
                "nodes in application 'zenity' match push button, fewer than the 3 required",
            ],
        ),
        fail(
            "ui_node_exists",
            typed_entry(),
            &[
                "no node of the ",
                "in application 'zenity' matches text with text containing 'typed by pincer'",
            ],
        ),
        fail(
            "ui_node_exists",
            json!({"selector": {"role": "push button"}, "app": FACTORY}),
            &[
                "no application 'gtk3-widget-factory' is in the UI tree, so no node matches push button",
            ],
        ),
    ]
}

/// Cases after the agent typed "typed by pincer" into zenity's entry and copied it (so
/// zenity owns the clipboard), the color scheme was reset, and gtk3-widget-factory (pid
/// `factory`, whose 19-character name the kernel cuts to 15) opened in front.
fn session_cases_later(factory: u32) -> Vec<Case> {
    vec![
        pass(
            "ui_node_exists",
            typed_entry(),
            &["found text", "'typed by pincer'"],
        ),
        pass(
            "clipboard_contains",
            json!({"text": "typed by pincer"}),
            &["'typed by pincer'"],
        ),
        fail(
            "clipboard_contains",
            json!({"text": "42"}),
            &["'typed by pincer'"],
        ),
        pass(
            "gsettings_equals",
            color_scheme("default"),
            &["color-scheme is 'default'"],
        ),
        fail(
            "gsettings_equals",
            color_scheme("prefer-dark"),
            &["color-scheme is 'default', expected 'prefer-dark'"],
        ),
        fail(
            "window_title_contains",
            json!({"text": "pincer checks"}),
            &["'gtk3-widget-factory' ("],
        ),
        pass(
            "window_process_is",
            json!({"name": FACTORY}),
            &["'gtk3-widget-factory' (gtk3-widget-factory)"],
        ),
        fail(
            "window_process_is",
            json!({"name": "zenity"}),
            &["'gtk3-widget-factory' (gtk3-widget-factory)"],
        ),
        pass(
            "window_exists",
            json!({"title_contains": "pincer checks"}),
            &["'pincer checks' (zenity)"],
        ),
        pass("process_running", json!({"name": FACTORY}), &[]).saying(format!("pid {factory}")),
        fail("process_not_running", json!({"name": FACTORY}), &[]).saying(format!("pid {factory}")),
        pass(
            "command_output_matches",
            json!({"argv": active_title(), "regex": "^gtk3-widget-factory"}),
            &["printed 'gtk3-widget-factory' (matching /^gtk3-widget-factory/)"],
        ),
    ]
}

/// Cases after zenity's window was closed: zenity is gone, and with it the clipboard it
/// owned (there is no clipboard manager).
fn session_cases_closed() -> Vec<Case> {
    vec![
        fail(
            "process_running",
            json!({"name": "zenity"}),
            &["no process 'zenity' is running"],
        ),
        pass(
            "process_not_running",
            json!({"name": "zenity"}),
            &["no process 'zenity' is running"],
        ),
        fail(
            "window_exists",
            json!({"title_contains": "pincer checks"}),
            &[
                "no window has a title containing 'pincer checks'",
                "'gtk3-widget-factory'",
            ],
        ),
        fail(
            "clipboard_contains",
            json!({"text": "typed by pincer"}),
            &["the clipboard holds no text, expected text containing 'typed by pincer'"],
        ),
        fail(
            "clipboard_matches",
            json!({"regex": "."}),
            &["the clipboard holds no text"],
        ),
        fail(
            "ui_node_exists",
            typed_entry(),
            &[
                "no application 'zenity' is in the UI tree, so no node matches text with text containing",
            ],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_functions_follow_a_live_desktop() {
    let sb = Sandbox::new();
    let d = sb.desktop("session", "1280x800", &[]);
    let env = d.connect().await;
    let zenity = env
        .launch(
            argv(&[
                "zenity",
                "--entry",
                "--title",
                "pincer checks",
                "--text",
                "Name?",
            ]),
            vec![],
        )
        .await
        .unwrap();
    let is_entry = |n: &pincer_shared::tree::UiNode| n.role == "text" && n.has_state("focused");
    // Active first, so that the window manager has placed the window the bounds are in.
    wait_active(&env, |title, _| title == "pincer checks").await;
    let tree = wait_for_node(&env, "zenity", is_entry)
        .await
        .expect("zenity's entry appears in the tree");
    env.set_clipboard("order 42 shipped").await.unwrap();
    let interface = "org.gnome.desktop.interface";
    run(
        &env,
        &["gsettings", "set", interface, "color-scheme", "prefer-dark"],
    )
    .await;
    run(&env, &["gsettings", "set", interface, "gtk-theme", "Bob's"]).await;
    let envs = envs(vec![("desktop", env)]);
    judge(
        &envs,
        Some("desktop"),
        &session_cases(zenity),
        &AgentLog::default(),
    )
    .await;

    // The agent types into the entry and copies what it typed; another app opens in front.
    let env = &envs.0["desktop"];
    let at = tree.root.find(is_entry).unwrap().bounds.unwrap().center();
    env.act(Action::click(at.x, at.y)).await.unwrap();
    env.act(Action::TypeText {
        text: "typed by pincer".into(),
    })
    .await
    .unwrap();
    for combo in ["ctrl+a", "ctrl+c"] {
        env.act(Action::Hotkey {
            keys: parse_combo(combo).unwrap(),
        })
        .await
        .unwrap();
    }
    let copied = eventually(APP_WAIT, || async {
        (clipboard(env).await.as_deref() == Some("typed by pincer")).then_some(())
    })
    .await;
    assert!(
        copied.is_some(),
        "zenity never put the typed text on the clipboard"
    );
    run(env, &["gsettings", "reset", interface, "color-scheme"]).await;
    let factory = env.launch(argv(&[FACTORY]), vec![]).await.unwrap();
    wait_active(env, |title, _| title == FACTORY).await;
    judge(
        &envs,
        Some("desktop"),
        &session_cases_later(factory),
        &AgentLog::default(),
    )
    .await;

    let window = env
        .windows()
        .await
        .unwrap()
        .into_iter()
        .find(|w| w.title == "pincer checks")
        .expect("zenity's window is listed");
    env.window(window.id, WindowOp::Close).await.unwrap();
    let gone = eventually(APP_WAIT, || async {
        (!process_running(env, "zenity").await).then_some(())
    })
    .await;
    assert!(
        gone.is_some(),
        "zenity still runs after its window was closed"
    );
    // The X server drops a dead client's selection only once it notices the client is gone;
    // a read just before that is sent to the dead owner and times out.
    let cleared = eventually(APP_WAIT, || async {
        matches!(
            env.probe(Probe::Clipboard).await,
            Ok(ProbeReply::Clipboard(None))
        )
        .then_some(())
    })
    .await;
    assert!(
        cleared.is_some(),
        "the clipboard still has an owner after zenity exited"
    );
    judge(
        &envs,
        Some("desktop"),
        &session_cases_closed(),
        &AgentLog::default(),
    )
    .await;
}

// ---------------------------------------------------------------------------------------
// The agent's own log: answers and typed text (no machine)
// ---------------------------------------------------------------------------------------

fn typed(env: &str, text: &str) -> AgentEvent {
    AgentEvent::Action {
        env: env.into(),
        action: Action::TypeText { text: text.into() },
    }
}

fn answered(text: &str) -> AgentEvent {
    AgentEvent::Answer { text: text.into() }
}

/// A run that typed on two environments and answered twice, the last time " 42 ".
fn busy_log() -> AgentLog {
    AgentLog {
        events: vec![
            AgentEvent::Action {
                env: "desktop".into(),
                action: Action::click(10, 10),
            },
            typed("desktop", "Hello World"),
            answered("Dortmund"),
            typed("phone", "secret code"),
            answered(" 42 "),
        ],
    }
}

fn busy_log_cases() -> Vec<Case> {
    vec![
        pass(
            "answer_contains",
            json!({"text": "42"}),
            &["the agent's answer reads ' 42 '"],
        ),
        // Only the last answer counts.
        fail(
            "answer_contains",
            json!({"text": "Dortmund"}),
            &["' 42 '", "containing 'Dortmund'"],
        ),
        pass(
            "answer_equals",
            json!({"text": "42"}),
            &["the agent's answer reads ' 42 '"],
        ),
        fail(
            "answer_equals",
            json!({"text": "4"}),
            &["' 42 '", "equal to '4'"],
        ),
        pass(
            "answer",
            json!({"text": {"regex": "^4[0-9]$", "trim": true}}),
            &["reads '42'", "matching /^4[0-9]$/"],
        ),
        // Without trimming, the spaces around the answer count.
        fail(
            "answer",
            json!({"text": {"equals": "42", "trim": false}}),
            &["' 42 '", "equal to '42'"],
        ),
        pass(
            "typed",
            json!({"text": {"equals": "secret code"}, "env": "phone"}),
            &["the agent typed 'secret code'"],
        ),
        fail(
            "typed",
            json!({"text": {"equals": "Hello"}}),
            &["'Hello World'", "none equal to 'Hello'"],
        ),
        pass(
            "typed_contains",
            json!({"text": "Hello World"}),
            &["the agent typed 'Hello World'"],
        ),
        // Case counts unless ignore_case, as for every other function.
        fail(
            "typed_contains",
            json!({"text": "hello world"}),
            &[
                "'Hello World'",
                "'secret code'",
                "none containing 'hello world'",
            ],
        ),
        pass(
            "typed_contains",
            json!({"text": "hello world", "ignore_case": true}),
            &["the agent typed 'Hello World'"],
        ),
        pass(
            "typed_contains",
            json!({"text": "SECRET", "env": "phone", "ignore_case": true}),
            &["'secret code'"],
        ),
        fail(
            "typed_contains",
            json!({"text": "SECRET", "env": "phone"}),
            &["'secret code'", "none containing 'SECRET'"],
        ),
        fail(
            "typed_contains",
            json!({"text": "Hello", "env": "phone"}),
            &["'secret code'"],
        ),
        pass(
            "not",
            json!({"check": "answer_equals", "args": {"text": "43"}}),
            &[
                "answer_equals does not hold, as required: the agent's answer reads ' 42 ', expected text equal to '43'",
            ],
        ),
        fail(
            "any_of",
            json!({"checks": [
                {"check": "answer_equals", "args": {"text": "43"}},
                {"check": "typed_contains", "args": {"text": "password"}}
            ]}),
            &[
                "none of the 2 checks holds: the agent's answer reads ' 42 ', expected text equal to '43'; ",
                "none containing 'password'",
            ],
        ),
    ]
}

fn one_answer_cases() -> Vec<Case> {
    vec![
        pass(
            "answer_contains",
            json!({"text": "dortmund", "ignore_case": true}),
            &["'Borussia Dortmund'"],
        ),
        fail(
            "answer_contains",
            json!({"text": "dortmund"}),
            &["'Borussia Dortmund'"],
        ),
        pass(
            "answer_equals",
            json!({"text": "borussia dortmund", "ignore_case": true}),
            &["'Borussia Dortmund'"],
        ),
        fail(
            "answer_equals",
            json!({"text": "Dortmund"}),
            &["'Borussia Dortmund'"],
        ),
    ]
}

/// A run whose agent ended by saying the task cannot be done (OSWorld's right answer to its
/// infeasible tasks).
fn gave_up() -> AgentLog {
    AgentLog {
        events: vec![
            typed("desktop", "settings"),
            AgentEvent::Infeasible {
                reason: "there is no such setting".into(),
            },
        ],
    }
}

fn gave_up_cases() -> Vec<Case> {
    vec![pass(
        "agent_said_infeasible",
        json!({}),
        &["the agent called the task infeasible: there is no such setting"],
    )]
}

/// Saying it and then doing something else is not the agent's last word.
fn gave_up_then_answered() -> AgentLog {
    let mut log = gave_up();
    log.events.push(answered("42"));
    log
}

fn gave_up_then_answered_cases() -> Vec<Case> {
    vec![fail(
        "agent_said_infeasible",
        json!({}),
        &["the agent did not end by calling the task infeasible"],
    )]
}

fn empty_log_cases() -> Vec<Case> {
    vec![
        fail(
            "answer_contains",
            json!({"text": "42"}),
            &["the agent has not submitted an answer, expected one containing '42'"],
        ),
        fail(
            "answer_equals",
            json!({"text": "42"}),
            &["has not submitted an answer"],
        ),
        fail(
            "typed_contains",
            json!({"text": "x"}),
            &["the agent has typed nothing, expected text containing 'x'"],
        ),
        pass(
            "all_of",
            json!({"checks": [
                {"check": "not", "args": {"check": "answer_contains", "args": {"text": "42"}}},
                {"check": "not", "args": {"check": "typed_contains", "args": {"text": "x"}}}
            ]}),
            &[
                "all 2 checks hold: answer_contains does not hold, as required: the agent has not submitted an answer",
                "; typed_contains does not hold, as required: the agent has typed nothing",
            ],
        ),
    ]
}

#[tokio::test]
async fn agent_log_functions_judge_what_the_agent_did() {
    let none = Envs::default();
    judge_log(&busy_log_cases(), &busy_log()).await;
    let one = AgentLog {
        events: vec![answered("Borussia Dortmund")],
    };
    judge(&none, None, &one_answer_cases(), &one).await;
    judge(&none, None, &empty_log_cases(), &AgentLog::default()).await;
    judge(&none, None, &gave_up_cases(), &gave_up()).await;
    judge(
        &none,
        None,
        &gave_up_then_answered_cases(),
        &gave_up_then_answered(),
    )
    .await;
}

/// Document and media functions whose passing and failing cases live in
/// `tests/checks_crab.rs` (which checks their coverage the same way).
const COVERED_IN_CHECKS_CRAB: &[&str] = &[
    "clipboard_in_document",
    "crab_clipboard_in_file",
    "crab_files_copied",
    "crab_last_typed",
    "crab_process_open",
    "crab_submitted",
    "document_contains",
    "document_text",
    "document_type",
    "image_brighter",
    "image_not_brighter",
    "spreadsheet_cell",
    "spreadsheet_row",
    "wallpaper_is",
];

#[test]
fn every_linux_function_has_a_passing_and_a_failing_case() {
    let all: Vec<Case> = [
        file_cases(),
        file_cases_after(),
        session_cases(1),
        session_cases_later(1),
        session_cases_closed(),
        busy_log_cases(),
        one_answer_cases(),
        empty_log_cases(),
        gave_up_cases(),
        gave_up_then_answered_cases(),
    ]
    .concat();
    let lib = Library::standard();
    let on_linux = lib
        .iter()
        .filter(|d| !COVERED_IN_CHECKS_CRAB.contains(&d.name))
        .filter(|d| match d.reads {
            Reads::Env(platforms) => platforms.contains(&Platform::Linux),
            Reads::Agent | Reads::Inner => true,
        })
        .map(|d| d.name);
    let missing = uncovered(&all, on_linux);
    assert!(
        missing.is_empty(),
        "every checkpoint function needs a positive and a negative case against real state \
         in tests/tests/checks.rs:\n{}",
        missing.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// The evaluator's semantics against live desktops
// ---------------------------------------------------------------------------------------

fn node(id: &str, env: &str, check: &str, args: Value, after: &[&str]) -> Value {
    json!({"id": id, "env": env, "check": check, "args": args, "after": after})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eleven_node_graph_over_two_desktops_costs_one_round_trip_per_desktop() {
    let sb = Sandbox::new();
    let (l, r) = (
        sb.desktop("left", "800x600", &["--no-wm"]),
        sb.desktop("right", "800x600", &["--no-wm"]),
    );
    let (left, right) = tokio::join!(l.connect(), r.connect());
    let envs = envs(vec![("left", left), ("right", right)]);
    // Depth one at most: successors are read speculatively with their predecessors, even
    // across environments. Commands and GSettings are read only when their node is ready,
    // so those nodes are sources here.
    let t = task(
        &["left", "right"],
        vec![
            node("in-dir", "left", "dir_exists", json!({"path": "~/in"}), &[]),
            node(
                "in-data",
                "left",
                "file_contains",
                json!({"path": "~/in/data.csv", "text": "1,2"}),
                &["in-dir"],
            ),
            node(
                "ticket",
                "left",
                "clipboard_contains",
                json!({"text": "PIN-7"}),
                &[],
            ),
            node(
                "rows",
                "left",
                "command_output_matches",
                json!({"argv": ["sh", "-c", "wc -l < ~/in/data.csv"], "regex": "^2$"}),
                &[],
            ),
            node(
                "agent",
                "left",
                "process_running",
                json!({"name": "pincer-agent"}),
                &[],
            ),
            node(
                "no-draft",
                "left",
                "not",
                json!({"check": "file_exists", "args": {"path": "~/in/draft.tmp"}}),
                &[],
            ),
            node(
                "out-dir",
                "right",
                "dir_exists",
                json!({"path": "~/out"}),
                &[],
            ),
            node(
                "result",
                "right",
                "file_equals",
                json!({"path": "~/out/result.txt", "content": "2 rows"}),
                &["out-dir"],
            ),
            node(
                "link",
                "right",
                "clipboard_matches",
                json!({"regex": "^https://"}),
                &["agent"],
            ),
            node(
                "scheme",
                "right",
                "gsettings_equals",
                color_scheme("prefer-light"),
                &[],
            ),
            node(
                "both",
                "right",
                "all_of",
                json!({"checks": [
                    {"check": "file_exists", "args": {"path": "~/out/result.txt"}},
                    {"check": "process_not_running", "args": {"name": "zenity"}}
                ]}),
                &["in-dir", "out-dir"],
            ),
        ],
    );
    let g = graph(&t);
    assert_eq!(g.len(), 11);
    let wire = Counted::new(&envs);
    let mut ev = Evaluator::new(g.clone());

    // Nothing set up: only the agent process and the absent draft hold, and "link" (on the
    // other desktop), made ready by "agent", is judged from the speculative read.
    let r1 = ev.step(1, &wire, &AgentLog::default()).await.unwrap();
    assert_eq!(r1.passed, vec!["agent", "no-draft"]);
    assert_eq!(r1.checked, 8, "seven sources and the cascaded 'link'");
    assert_eq!(r1.round_trips, 2);
    assert_eq!(
        wire.batches(),
        BTreeMap::from([("left".into(), 1), ("right".into(), 1)])
    );

    let (left, right) = (&envs.0["left"], &envs.0["right"]);
    left.write_file("~/in/data.csv", b"a,b\n1,2\n", 0o644)
        .await
        .unwrap();
    left.set_clipboard("ticket PIN-7").await.unwrap();
    right
        .write_file("~/out/result.txt", b"2 rows\n", 0o644)
        .await
        .unwrap();
    right
        .set_clipboard("https://example.org/report")
        .await
        .unwrap();
    run(
        right,
        &[
            "gsettings",
            "set",
            "org.gnome.desktop.interface",
            "color-scheme",
            "prefer-light",
        ],
    )
    .await;

    let r2 = ev.step(2, &wire, &AgentLog::default()).await.unwrap();
    let passed: BTreeSet<&str> = r2.passed.iter().map(String::as_str).collect();
    assert_eq!(
        passed,
        BTreeSet::from([
            "in-dir", "in-data", "ticket", "rows", "out-dir", "result", "link", "scheme", "both"
        ]),
        "{:#?}",
        ev.progress()
    );
    assert!(ev.is_success());
    assert_eq!(ev.counts(), (11, 11));
    assert_eq!(
        r2.round_trips, 2,
        "one batch per desktop for nine checkpoints"
    );
    assert_eq!(
        wire.batches(),
        BTreeMap::from([("left".into(), 2), ("right".into(), 2)])
    );

    // Checking everything at once (as `pincer task check` does) is one batch per desktop too.
    let all = g.check_all(&wire, &AgentLog::default()).await.unwrap();
    assert_eq!(all.len(), 11);
    for (id, v) in &all {
        let v = v.as_ref().unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(v.passed, "{id}: {}", v.feedback);
    }
    assert_eq!(
        wire.batches(),
        BTreeMap::from([("left".into(), 3), ("right".into(), 3)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cascade_passes_in_the_step_its_state_becomes_true() {
    let sb = Sandbox::new();
    let d = sb.desktop("cascade", "1024x768", &[]);
    let envs = envs(vec![("desktop", d.connect().await)]);
    let env = &envs.0["desktop"];
    let t = task(
        &["desktop"],
        vec![
            node(
                "saved",
                "desktop",
                "file_exists",
                json!({"path": "~/c/a.txt"}),
                &[],
            ),
            node(
                "shown",
                "desktop",
                "window_exists",
                json!({"title_contains": "cascade"}),
                &["saved"],
            ),
            node(
                "copied",
                "desktop",
                "clipboard_contains",
                json!({"text": "done"}),
                &["shown"],
            ),
        ],
    );
    let wire = Counted::new(&envs);
    let mut ev = Evaluator::new(graph(&t));
    let log = AgentLog::default();
    let r = ev.step(1, &wire, &log).await.unwrap();
    assert!(r.passed.is_empty());
    assert_eq!(r.checked, 1, "only the source is ready");
    assert_eq!(ev.ready_ids(), vec!["saved"]);

    env.write_file("~/c/a.txt", b"saved", 0o644).await.unwrap();
    env.launch(
        argv(&["zenity", "--info", "--title", "cascade", "--text", "hi"]),
        vec![],
    )
    .await
    .unwrap();
    env.set_clipboard("all done").await.unwrap();
    // Wait through a direct probe: the evaluator must see the state only once, complete.
    let shown = eventually(APP_WAIT, || async {
        env.windows()
            .await
            .ok()?
            .iter()
            .any(|w| w.title == "cascade")
            .then_some(())
    })
    .await;
    assert!(shown.is_some(), "zenity's window never appeared");

    let r = ev.step(2, &wire, &log).await.unwrap();
    assert_eq!(r.passed, vec!["saved", "shown", "copied"]);
    assert!(ev.is_success());
    assert!(
        ev.progress().iter().all(|p| p.passed_at == Some(2)),
        "{:#?}",
        ev.progress()
    );
    // "shown" was read with "saved"; "copied", two levels down, took one more batch.
    assert_eq!(r.round_trips, 2);
    assert_eq!(wire.batches()["desktop"], 3);
    let feedback: Vec<String> = ev
        .progress()
        .into_iter()
        .filter_map(|p| p.feedback)
        .collect();
    assert!(feedback[0].contains("~/c/a.txt"), "{feedback:?}");
    assert!(feedback[1].contains("'cascade' (zenity)"), "{feedback:?}");
    assert!(feedback[2].contains("'all done'"), "{feedback:?}");

    // Passed checkpoints are latched: undoing the state changes nothing and reads nothing.
    env.remove("~/c/a.txt").await.unwrap();
    let r = ev.step(3, &wire, &log).await.unwrap();
    assert_eq!((r.checked, r.round_trips), (0, 0));
    assert!(ev.is_success());
    assert_eq!(wire.batches()["desktop"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_true_before_the_first_action_is_reported_as_broken_setup() {
    let sb = Sandbox::new();
    let d = sb.desktop("initial", "800x600", &["--no-wm"]);
    let envs = envs(vec![("desktop", d.connect().await)]);
    let env = &envs.0["desktop"];
    // A setup that left the answer in place: the report the agent should write exists.
    env.write_file("~/report.txt", b"total: 10\n", 0o644)
        .await
        .unwrap();
    env.write_file("~/todo.txt", b"pending\n", 0o644)
        .await
        .unwrap();
    env.set_clipboard("total: 10").await.unwrap();
    let t = task(
        &["desktop"],
        vec![
            node(
                "report",
                "desktop",
                "file_matches",
                json!({"path": "~/report.txt", "regex": r"total: \d+"}),
                &[],
            ),
            node(
                "todo",
                "desktop",
                "file_contains",
                json!({"path": "~/todo.txt", "text": "done"}),
                &[],
            ),
            // True as well, but not ready: only ready checkpoints count before the start.
            node(
                "shared",
                "desktop",
                "clipboard_contains",
                json!({"text": "total"}),
                &["todo"],
            ),
        ],
    );
    let wire = Counted::new(&envs);
    let mut ev = Evaluator::new(graph(&t));
    let log = AgentLog::default();
    let broken = ev.initial_check(&wire, &log).await.unwrap();
    let ids: Vec<&str> = broken.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, vec!["report"]);
    assert!(broken[0].1.passed);
    assert!(
        broken[0].1.feedback.contains("~/report.txt")
            && broken[0].1.feedback.contains("'total: 10'"),
        "{}",
        broken[0].1.feedback
    );
    assert_eq!(wire.batches()["desktop"], 1);
    // Nothing was latched: the first step checks "report" again and it passes then.
    assert!(
        ev.progress()
            .iter()
            .all(|p| p.passed_at.is_none() && p.checks == 0)
    );
    let r = ev.step(1, &wire, &log).await.unwrap();
    assert_eq!(r.passed, vec!["report"]);
    assert_eq!(ev.progress()[0].passed_at, Some(1));

    // A fixed setup passes the check before the start.
    env.remove("~/report.txt").await.unwrap();
    let fresh = Evaluator::new(graph(&t));
    assert!(fresh.initial_check(&wire, &log).await.unwrap().is_empty());
}

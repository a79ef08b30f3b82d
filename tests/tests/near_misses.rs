//! Bundled tasks against end states that are almost right, built on a real desktop: each
//! task is set up as a run sets it up, the near miss is made with a shell (as an agent at a
//! terminal could), and `pincer task check --no-setup` must find the checkpoint that it
//! misses. A route other than the oracle's (a shell instead of the GUI) must pass them all.

use pincer_tests::Sandbox;

/// Sets the task up, makes an end state with `script`, and returns what each checkpoint
/// says about it (`PASS id: ...` / `fail id ...` lines).
fn end_state(sb: &Sandbox, task: &str, script: &str) -> String {
    sb.pincer_ok(&["task", "check", task, "--tasks", "demo"]);
    sb.pincer_ok(&["exec", "--", "sh", "-c", script]);
    sb.pincer_ok(&["task", "check", task, "--tasks", "demo", "--no-setup"])
}

/// The checkpoints the check printed as failing.
fn failing(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("fail "))
        .map(|l| l.split([' ', ':']).next().unwrap_or_default().to_owned())
        .collect()
}

/// Each near miss fails the named checkpoint; the other route passes every checkpoint
/// except those named in `unjudged` (an answer nobody submitted).
fn judge(sb: &Sandbox, task: &str, misses: &[(&str, &str)], route: &str, unjudged: &[&str]) {
    for (script, caught_by) in misses {
        let out = end_state(sb, task, script);
        assert!(
            failing(&out).iter().any(|f| f == caught_by),
            "{task}: `{script}` should fail {caught_by}:\n{out}"
        );
    }
    let out = end_state(sb, task, route);
    assert_eq!(failing(&out), unjudged, "{task}: `{route}`:\n{out}");
}

#[test]
fn near_misses_of_the_file_tasks_are_caught_and_other_routes_pass() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("near", "1024x768", &[]);

    judge(
        &sb,
        "files-archive-report",
        &[
            // A copy of the draft left in the archive as well.
            (
                "mv ~/inbox/report-draft.txt ~/archive/report-final.txt && cp ~/archive/report-final.txt ~/archive/report-draft.txt",
                "archive-exact",
            ),
            // Copied, not moved.
            (
                "cp ~/inbox/report-draft.txt ~/archive/report-final.txt",
                "draft-gone",
            ),
            // Another file moved along.
            (
                "mv ~/inbox/report-draft.txt ~/archive/report-final.txt && mv ~/inbox/notes.txt ~/archive/",
                "inbox-exact",
            ),
        ],
        "mv ~/inbox/report-draft.txt ~/archive/report-final.txt",
        &[],
    );

    judge(
        &sb,
        "terminal-largest-file",
        &[
            // The original deleted and an empty file of its name made.
            (
                "rm ~/data/files/telescope.bin && touch ~/data/largest/telescope.bin",
                "same-file",
            ),
            // Every file copied, the largest removed.
            (
                "cp ~/data/files/* ~/data/largest/ && rm ~/data/files/telescope.bin",
                "only-it-moved",
            ),
            // The wrong file moved.
            ("mv ~/data/files/zebra.csv ~/data/largest/", "moved"),
        ],
        "mv ~/data/files/telescope.bin ~/data/largest/",
        &["answer"],
    );

    judge(
        &sb,
        "terminal-copy-sheets",
        &[
            // A file of the right name and size with other bytes.
            (
                "mkdir ~/sheets && printf 'spreadsheet ONE' > ~/sheets/q1.ods && cp ~/Documents/q2.ods ~/sheets/",
                "q1-same",
            ),
            // Everything copied, not only the sheets.
            ("cp -r ~/Documents ~/sheets", "only-sheets"),
            // One sheet of two.
            (
                "mkdir ~/sheets && cp ~/Documents/q1.ods ~/sheets/",
                "copied",
            ),
        ],
        "mkdir ~/sheets && cp ~/Documents/*.ods ~/sheets/",
        &[],
    );
}

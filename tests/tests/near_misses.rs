//! Bundled tasks against end states that are almost right, built on a real desktop: each
//! task is set up as a run sets it up, the near miss is made with a shell (as an agent at a
//! terminal could), and `pincer task check --no-setup` must find the checkpoint that it
//! misses. A route other than the oracle's (a shell instead of the GUI) must pass them all.

use pincer_tests::Sandbox;

/// The two desktops: `near` for the role `desktop`, `near2` for `desktop2`.
const BINDS: [&str; 4] = ["--bind", "desktop=near", "--bind", "desktop2=near2"];

/// Sets the task up, makes an end state with `script` on the environment `env`, and
/// returns what each checkpoint says about it (`PASS id: ...` / `fail id ...` lines).
fn end_state(sb: &Sandbox, task: &str, env: &str, script: &str) -> String {
    let check = |extra: &[&str]| {
        let mut args = vec!["task", "check", task, "--tasks", "demo"];
        // A task binds only its own roles.
        let roles = if task.starts_with("cross-") { 4 } else { 2 };
        args.extend_from_slice(&BINDS[..roles]);
        args.extend_from_slice(extra);
        sb.pincer_ok(&args)
    };
    check(&[]);
    sb.pincer_ok(&["exec", "--env", env, "--", "sh", "-c", script]);
    check(&["--no-setup"])
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
    judge_on(sb, "near", task, misses, route, unjudged);
}

/// [`judge`], with the end states made on `env`.
fn judge_on(
    sb: &Sandbox,
    env: &str,
    task: &str,
    misses: &[(&str, &str)],
    route: &str,
    unjudged: &[&str],
) {
    for (script, caught_by) in misses {
        let out = end_state(sb, task, env, script);
        assert!(
            failing(&out).iter().any(|f| f == caught_by),
            "{task}: `{script}` should fail {caught_by}:\n{out}"
        );
    }
    let out = end_state(sb, task, env, route);
    assert_eq!(failing(&out), unjudged, "{task}: `{route}`:\n{out}");
}

#[test]
fn near_misses_of_twelve_demo_tasks_are_caught_and_other_routes_pass() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("near", "1024x768", &[]);
    let _desktop2 = sb.desktop("near2", "1024x768", &[]);

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

    judge(
        &sb,
        "editor-fix-typo",
        &[
            // One letter too many, the lines merged, the text twice.
            (
                "printf 'Hello worldd\\nsecond line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
            (
                "printf 'Hello world second line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
            (
                "printf 'Hello world\\nsecond line stays\\nHello world\\nsecond line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
        ],
        // Windows line ends and no final newline are the same text.
        "printf 'Hello world\\r\\nsecond line stays' > ~/notes/draft.txt",
        &[],
    );

    judge(
        &sb,
        "editor-write-note",
        &[
            ("printf 'buy milk\\n' > ~/notes/todo.txt", "content"),
            ("printf 'buy milk and eggs\\n' > ~/todo.txt", "saved"),
            (
                "printf 'buy milk and eggs\\nbuy milk and eggs\\n' > ~/notes/todo.txt",
                "content",
            ),
        ],
        // Saved without Mousepad: everything but the editor's title, which the task asks
        // for ("in the Mousepad text editor").
        "printf 'buy milk and eggs\\n' > ~/notes/todo.txt",
        &["title"],
    );

    judge_on(
        &sb,
        "near2",
        "cross-sheet-price",
        &[
            ("echo 142.50 > ~/order.txt", "price"),
            (
                "printf 'pears,3.10\\napples,42.50\\nplums,7.25\\n' > ~/order.txt",
                "price",
            ),
            ("echo 42.05 > ~/order.txt", "price"),
        ],
        "printf '42.5' > ~/order.txt",
        &[],
    );

    // Spreadsheets written by LibreOffice itself (a CSV converted headless, in a profile of
    // its own so the Calc the setup opened is left alone).
    let sheet = |csv: &str| {
        format!(
            "cd ~/sheets && printf '{csv}' > b.csv && soffice -env:UserInstallation=file://$HOME/.lo-convert --headless --norestore --convert-to ods b.csv >/dev/null 2>&1 && mv b.ods budget.ods && rm b.csv"
        )
    };
    judge(
        &sb,
        "sheet-budget",
        &[
            // The right row in the wrong place, another amount, the label in other case.
            (sheet(",\\n,\\nRent,1200\\n").as_str(), "label"),
            (sheet("Rent,12000\\n").as_str(), "amount"),
            (sheet("rent,1200\\n").as_str(), "label"),
        ],
        sheet("Rent,1200\\n").as_str(),
        &[],
    );

    let writer = |script: &str| {
        format!(
            "cd ~/letters && printf 'Dear Ada, thank you for the engine.\\n' > a.txt && {script} && rm -f a.txt"
        )
    };
    let convert = "soffice -env:UserInstallation=file://$HOME/.lo-convert --headless --norestore --convert-to";
    judge(
        &sb,
        "writer-letter",
        &[
            // Plain text, and a Word file, under the OpenDocument name.
            (writer("cp a.txt ada.odt").as_str(), "is-odt"),
            (
                writer(&format!("{convert} docx:'MS Word 2007 XML' a.txt >/dev/null 2>&1 && mv a.docx ada.odt"))
                    .as_str(),
                "is-odt",
            ),
            // The right kind with other words.
            (
                format!("cd ~/letters && printf 'Dear Bob\\n' > a.txt && {convert} odt a.txt >/dev/null 2>&1 && mv a.odt ada.odt")
                    .as_str(),
                "text",
            ),
        ],
        writer(&format!("{convert} odt a.txt >/dev/null 2>&1 && mv a.odt ada.odt")).as_str(),
        &[],
    );

    let mouse = |left: &str, ms: &str| {
        format!(
            "gsettings set org.gnome.desktop.peripherals.mouse left-handed {left} && gsettings set org.gnome.desktop.peripherals.mouse double-click {ms}"
        )
    };
    judge(
        &sb,
        "settings-left-handed-mouse",
        &[
            (mouse("true", "400").as_str(), "double-click"),
            (mouse("false", "600").as_str(), "left-handed"),
            (mouse("true", "60").as_str(), "double-click"),
        ],
        mouse("true", "600").as_str(),
        &[],
    );

    let look = |scheme: &str, theme: &str| {
        format!(
            "gsettings set org.gnome.desktop.interface color-scheme {scheme} && gsettings set org.gnome.desktop.interface gtk-theme {theme}"
        )
    };
    judge(
        &sb,
        "settings-dark-mode",
        &[
            (look("prefer-dark", "Adwaita").as_str(), "theme"),
            (look("default", "Adwaita-dark").as_str(), "scheme"),
            (look("prefer-dark", "adwaita-dark").as_str(), "theme"),
        ],
        look("prefer-dark", "Adwaita-dark").as_str(),
        &[],
    );

    judge(
        &sb,
        "terminal-make-project",
        &[
            // The file one level up, a word that only contains "fast", a directory named README.
            (
                "mkdir -p ~/projects/pincer && echo fast > ~/projects/README",
                "readme",
            ),
            (
                "mkdir -p ~/projects/pincer && echo breakfast > ~/projects/pincer/README",
                "readme",
            ),
            ("mkdir -p ~/projects/pincer/README", "readme"),
        ],
        "mkdir -p ~/projects/pincer && printf 'Fast, sound.' > ~/projects/pincer/README",
        &[],
    );

    judge(
        &sb,
        "terminal-count-lines",
        &[
            ("echo 37 lines > ~/data/count.txt", "count"),
            ("echo 36 > ~/data/count.txt", "count"),
            ("echo 37 > ~/count.txt", "count-file"),
        ],
        // The answer is the agent's to submit; nobody did here.
        "wc -l < ~/data/events.log > ~/data/count.txt",
        &["answer"],
    );
}

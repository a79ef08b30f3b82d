//! Bundled tasks against end states that are almost right, built on a real desktop: each
//! task is set up as a run sets it up, the near miss is made as an agent could make it (a
//! shell, keys typed into the app, files LibreOffice wrote, another clipboard owner), and
//! `pincer task check --no-setup` must find the checkpoint that it misses. A route other
//! than the oracle's (`pincer_tests::routes`) must pass them all.

use pincer_tests::Sandbox;
use pincer_tests::routes::{self, CONVERT, Hand, Route, keys, shell};

/// The environment bound to a role: `near` for `desktop`, `near2` for `desktop2`.
fn env_of(role: &str) -> String {
    match role {
        "desktop" => "near".into(),
        "desktop2" => "near2".into(),
        other => panic!("no environment for role {other}"),
    }
}

/// `pincer task check TASK` with the task's roles bound, plus `extra`.
fn check(sb: &Sandbox, task: &str, extra: &[&str]) -> String {
    let mut args = vec!["task", "check", task, "--tasks", "demo"];
    let roles: &[&str] = if task.starts_with("cross-") {
        &["--bind", "desktop=near", "--bind", "desktop2=near2"]
    } else {
        &["--bind", "desktop=near"]
    };
    args.extend_from_slice(roles);
    args.extend_from_slice(extra);
    sb.pincer_ok(&args)
}

/// Checks after the end state was made, judging `answer` as the submitted answer.
fn check_end(sb: &Sandbox, task: &str, answer: Option<&str>) -> String {
    let mut extra = vec!["--no-setup"];
    if let Some(a) = answer {
        extra.extend(["--answer", a]);
    }
    check(sb, task, &extra)
}

/// The checkpoints a check printed as failing.
fn failing(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("fail "))
        .map(|l| l.split([' ', ':']).next().unwrap_or_default().to_owned())
        .collect()
}

/// An end state that is almost right, and the checkpoint that must catch it.
#[derive(Debug)]
struct Miss {
    /// Where it is made (a role).
    role: &'static str,
    /// How.
    hand: Hand,
    /// The answer given, for tasks that ask one.
    answer: Option<&'static str>,
    /// The checkpoint that must fail.
    caught: &'static str,
}

/// A near miss made with a shell on `desktop`.
fn miss(script: impl Into<String>, caught: &'static str) -> Miss {
    by(shell(script), caught)
}

/// A near miss made by `hand` on `desktop`.
fn by(hand: Hand, caught: &'static str) -> Miss {
    Miss {
        role: "desktop",
        hand,
        answer: None,
        caught,
    }
}

impl Miss {
    fn on(mut self, role: &'static str) -> Self {
        self.role = role;
        self
    }

    fn answering(mut self, answer: &'static str) -> Self {
        self.answer = Some(answer);
        self
    }
}

/// Judges tasks on the two desktops, remembering which.
struct Judge<'a> {
    sb: &'a Sandbox,
    judged: Vec<String>,
}

impl Judge<'_> {
    /// Each near miss fails its checkpoint, and the task's route passes every checkpoint.
    fn task(&mut self, task: &str, misses: Vec<Miss>) {
        judge(self.sb, task, &misses);
        self.judged.push(task.to_owned());
    }
}

fn judge(sb: &Sandbox, task: &str, misses: &[Miss]) {
    assert!(misses.len() >= 3, "{task}: at least three near misses");
    for m in misses {
        check(sb, task, &[]);
        m.hand.perform(sb, &env_of(m.role));
        let out = check_end(sb, task, m.answer);
        assert!(
            failing(&out).iter().any(|f| f == m.caught),
            "{task}: {m:?} should fail {}:\n{out}",
            m.caught
        );
    }
    let route = routes::demo()
        .into_iter()
        .find(|r| r.task == task)
        .unwrap_or_else(|| panic!("no route for {task}"));
    passes(sb, &route);
}

/// The route passes every checkpoint of its task.
fn passes(sb: &Sandbox, route: &Route) {
    check(sb, route.task, &[]);
    route.perform(sb, &env_of);
    let out = check_end(sb, route.task, route.answer);
    assert_eq!(failing(&out), Vec::<String>::new(), "{route:?}:\n{out}");
}

#[test]
fn near_misses_of_every_demo_task_are_caught_and_other_routes_pass() {
    let sb = Sandbox::new();
    let _desktop = sb.desktop("near", "1024x768", &[]);
    let _desktop2 = sb.desktop("near2", "1024x768", &[]);
    let mut judge = Judge {
        sb: &sb,
        judged: Vec::new(),
    };

    judge.task(
        "calculator-multiply",
        vec![
            // Another product on the display, a right answer from elsewhere, a wrong answer
            // after the right product.
            by(keys("1234*65="), "shown").answering("69104"),
            by(keys("1234+56="), "shown").answering("1290"),
            by(keys("1234*56="), "answer").answering("69014"),
            by(keys("1234*56="), "answer").answering("6910"),
        ],
    );

    judge.task(
        "cross-copy-access-code",
        vec![
            // The whole line, a character short, the right file on the wrong desktop.
            miss("echo 'Access code: 7F3K-91' > ~/received.txt", "only-code").on("desktop2"),
            miss("echo 7F3K-9 > ~/received.txt", "code").on("desktop2"),
            miss("echo 7F3K-91 > ~/received.txt", "file"),
        ],
    );

    judge.task(
        "cross-sync-color-scheme",
        vec![
            // Half of it, the look of another theme, the source desktop changed instead.
            miss(
                "gsettings set org.gnome.desktop.interface color-scheme prefer-dark",
                "theme",
            )
            .on("desktop2"),
            miss(
                "gsettings set org.gnome.desktop.interface color-scheme prefer-dark && gsettings set org.gnome.desktop.interface gtk-theme HighContrastInverse",
                "theme",
            )
            .on("desktop2"),
            miss(
                "gsettings set org.gnome.desktop.interface gtk-theme HighContrast",
                "scheme",
            ),
        ],
    );

    let clip = |text: &str| {
        shell(format!(
            "printf '{text}' | xclip -selection clipboard >/dev/null 2>&1"
        ))
    };
    judge.task(
        "editor-copy-order-number",
        vec![
            // Part of the code, the line before with it, the code in other case.
            by(clip("PX-4471"), "has-code"),
            by(clip("Your order:\\nPX-4471-Q\\n"), "exact"),
            by(clip("PX-4471-Q Thank you!"), "exact"),
            by(clip("px-4471-q"), "has-code"),
        ],
    );

    judge.task(
        "files-archive-report",
        vec![
            // A copy of the draft left in the archive as well.
            miss(
                "mv ~/inbox/report-draft.txt ~/archive/report-final.txt && cp ~/archive/report-final.txt ~/archive/report-draft.txt",
                "archive-exact",
            ),
            // Copied, not moved.
            miss(
                "cp ~/inbox/report-draft.txt ~/archive/report-final.txt",
                "draft-gone",
            ),
            // Another file moved along.
            miss(
                "mv ~/inbox/report-draft.txt ~/archive/report-final.txt && mv ~/inbox/notes.txt ~/archive/",
                "inbox-exact",
            ),
        ],
    );

    judge.task(
        "terminal-largest-file",
        vec![
            // The original deleted and an empty file of its name made.
            miss(
                "rm ~/data/files/telescope.bin && touch ~/data/largest/telescope.bin",
                "same-file",
            )
            .answering("telescope.bin"),
            // Every file copied, the largest removed.
            miss(
                "cp ~/data/files/* ~/data/largest/ && rm ~/data/files/telescope.bin",
                "only-it-moved",
            )
            .answering("telescope.bin"),
            // The wrong file moved.
            miss("mv ~/data/files/zebra.csv ~/data/largest/", "moved").answering("zebra.csv"),
            // The right file moved, the answer a path.
            miss("mv ~/data/files/telescope.bin ~/data/largest/", "answer")
                .answering("~/data/files/telescope.bin"),
        ],
    );

    judge.task(
        "terminal-copy-sheets",
        vec![
            // A file of the right name and size with other bytes.
            miss(
                "mkdir ~/sheets && printf 'spreadsheet ONE' > ~/sheets/q1.ods && cp ~/Documents/q2.ods ~/sheets/",
                "q1-same",
            ),
            // Everything copied, not only the sheets.
            miss("cp -r ~/Documents ~/sheets", "only-sheets"),
            // One sheet of two.
            miss("mkdir ~/sheets && cp ~/Documents/q1.ods ~/sheets/", "copied"),
        ],
    );

    judge.task(
        "editor-fix-typo",
        vec![
            // One letter too many, the lines merged, the text twice.
            miss(
                "printf 'Hello worldd\\nsecond line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
            miss(
                "printf 'Hello world second line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
            miss(
                "printf 'Hello world\\nsecond line stays\\nHello world\\nsecond line stays\\n' > ~/notes/draft.txt",
                "exact",
            ),
            // Fixed, and the second line deleted.
            miss("printf 'Hello world\\n' > ~/notes/draft.txt", "rest-kept"),
        ],
    );

    judge.task(
        "editor-write-note",
        vec![
            miss("printf 'buy milk\\n' > ~/notes/todo.txt", "content"),
            miss("printf 'buy milk and eggs\\n' > ~/todo.txt", "saved"),
            miss(
                "printf 'buy milk and eggs\\nbuy milk and eggs\\n' > ~/notes/todo.txt",
                "content",
            ),
            // Saved, but not in the editor the task names.
            miss("printf 'buy milk and eggs\\n' > ~/notes/todo.txt", "title"),
        ],
    );

    judge.task(
        "cross-sheet-price",
        vec![
            miss("echo 142.50 > ~/order.txt", "price").on("desktop2"),
            miss(
                "printf 'pears,3.10\\napples,42.50\\nplums,7.25\\n' > ~/order.txt",
                "price",
            )
            .on("desktop2"),
            miss("echo 42.05 > ~/order.txt", "price").on("desktop2"),
            // The price written on the desktop that shows the sheet.
            miss("echo 42.50 > ~/order.txt", "file"),
        ],
    );

    // Spreadsheets written by LibreOffice itself, from a CSV file.
    let sheet = |csv: &str| {
        format!(
            "cd ~/sheets && printf '{csv}' > b.csv && {CONVERT} ods b.csv >/dev/null 2>&1 && mv b.ods budget.ods && rm b.csv"
        )
    };
    judge.task(
        "sheet-budget",
        vec![
            // The right row in the wrong place, another amount, the label in other case.
            miss(sheet(",\\n,\\nRent,1200\\n"), "label"),
            miss(sheet("Rent,12000\\n"), "amount"),
            miss(sheet("rent,1200\\n"), "label"),
            // The amount as text, not a number.
            miss(sheet("Rent,\"1200 EUR\"\\n"), "amount"),
        ],
    );

    let writer = |script: &str| {
        format!(
            "cd ~/letters && printf 'Dear Ada, thank you for the engine.\\n' > a.txt && {script} && rm -f a.txt"
        )
    };
    judge.task(
        "writer-letter",
        vec![
            // Plain text, and a Word file, under the OpenDocument name.
            miss(writer("cp a.txt ada.odt"), "is-odt"),
            miss(
                writer(&format!(
                    "{CONVERT} docx:'MS Word 2007 XML' a.txt >/dev/null 2>&1 && mv a.docx ada.odt"
                )),
                "is-odt",
            ),
            // The right kind with other words.
            miss(
                format!(
                    "cd ~/letters && printf 'Dear Bob\\n' > a.txt && {CONVERT} odt a.txt >/dev/null 2>&1 && mv a.odt ada.odt"
                ),
                "text",
            ),
        ],
    );

    let mouse = |left: &str, ms: &str| {
        format!(
            "gsettings set org.gnome.desktop.peripherals.mouse left-handed {left} && gsettings set org.gnome.desktop.peripherals.mouse double-click {ms}"
        )
    };
    judge.task(
        "settings-left-handed-mouse",
        vec![
            miss(mouse("true", "400"), "double-click"),
            miss(mouse("false", "600"), "left-handed"),
            miss(mouse("true", "60"), "double-click"),
        ],
    );

    let look = |scheme: &str, theme: &str| {
        format!(
            "gsettings set org.gnome.desktop.interface color-scheme {scheme} && gsettings set org.gnome.desktop.interface gtk-theme {theme}"
        )
    };
    judge.task(
        "settings-dark-mode",
        vec![
            miss(look("prefer-dark", "Adwaita"), "theme"),
            miss(look("default", "Adwaita-dark"), "scheme"),
            miss(look("prefer-dark", "adwaita-dark"), "theme"),
        ],
    );

    judge.task(
        "terminal-make-project",
        vec![
            // The file one level up, a word that only contains "fast", a directory named README.
            miss(
                "mkdir -p ~/projects/pincer && echo fast > ~/projects/README",
                "readme",
            ),
            miss(
                "mkdir -p ~/projects/pincer && echo breakfast > ~/projects/pincer/README",
                "readme",
            ),
            miss("mkdir -p ~/projects/pincer/README", "readme"),
        ],
    );

    judge.task(
        "terminal-count-lines",
        vec![
            miss("echo 37 lines > ~/data/count.txt", "count").answering("37"),
            miss("echo 36 > ~/data/count.txt", "count").answering("36"),
            miss("echo 37 > ~/count.txt", "count-file").answering("37"),
            miss("echo 37 > ~/data/count.txt", "answer").answering("37 lines"),
        ],
    );

    // Every bundled demo task, no more and no fewer.
    let mut bundled: Vec<String> = pincer::task::load_path("demo")
        .unwrap()
        .tasks
        .into_iter()
        .map(|(t, _)| t.id)
        .collect();
    bundled.sort();
    judge.judged.sort();
    assert_eq!(judge.judged, bundled);
}

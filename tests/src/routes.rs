//! A way to solve each bundled `demo` task other than its oracle's, as a person at the
//! desktop (or an agent at a terminal) could: shell commands instead of the GUI, keys typed
//! instead of buttons clicked, an app opened on a file written elsewhere. `near_misses.rs`
//! proves that each route passes every checkpoint of its task; `human.rs` that the human
//! agent scores each one a success.

use crate::Sandbox;
use std::time::{Duration, Instant};

/// One thing a person's hands do on an environment.
#[derive(Debug, Clone)]
pub enum Hand {
    /// A shell command line, run to its end (`pincer exec -- sh -c`).
    Shell(String),
    /// Text typed on the keyboard into the focused window (`pincer act type`).
    Keys(String),
    /// A program started, then waited for until the active window's title contains `title`.
    Open {
        /// The program and its arguments.
        argv: &'static [&'static str],
        /// What the title of its window contains.
        title: &'static str,
    },
}

/// A solution of one task: what the hands do on which role, and the answer given, if the
/// task asks a question.
#[derive(Debug, Clone)]
pub struct Route {
    /// The task id.
    pub task: &'static str,
    /// (role, what is done there), in order.
    pub steps: Vec<(&'static str, Hand)>,
    /// The answer submitted at the end.
    pub answer: Option<&'static str>,
}

/// LibreOffice converting a file headless, in a profile of its own so that the Calc or
/// Writer a task's setup opened is left alone.
pub const CONVERT: &str =
    "soffice -env:UserInstallation=file://$HOME/.lo-convert --headless --norestore --convert-to";

impl Route {
    fn new(task: &'static str, steps: Vec<(&'static str, Hand)>) -> Self {
        Self {
            task,
            steps,
            answer: None,
        }
    }

    fn answering(mut self, answer: &'static str) -> Self {
        self.answer = Some(answer);
        self
    }

    /// Does the steps, with `env_of` naming the environment bound to each role.
    pub fn perform(&self, sb: &Sandbox, env_of: &dyn Fn(&str) -> String) {
        for (role, hand) in &self.steps {
            hand.perform(sb, &env_of(role));
        }
    }
}

impl Hand {
    /// Does it on the environment `env`.
    pub fn perform(&self, sb: &Sandbox, env: &str) {
        match self {
            Self::Shell(script) => {
                sb.pincer_ok(&["exec", "--env", env, "--", "sh", "-c", script]);
            }
            Self::Keys(text) => {
                sb.pincer_ok(&["act", "--env", env, "type", text]);
            }
            Self::Open { argv, title } => {
                let mut args = vec!["launch", "--env", env, "--"];
                args.extend_from_slice(argv);
                sb.pincer_ok(&args);
                wait_for_title(sb, env, title);
            }
        }
    }
}

/// A shell command line.
pub fn shell(script: impl Into<String>) -> Hand {
    Hand::Shell(script.into())
}

/// Text typed on the keyboard.
pub fn keys(text: impl Into<String>) -> Hand {
    Hand::Keys(text.into())
}

/// Waits until the active window's title on `env` contains `title`.
fn wait_for_title(sb: &Sandbox, env: &str, title: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = sb.pincer_ok(&["probe", "--env", env, "window"]);
        if out.contains(title) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no active window titled '{title}' on {env}:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every `demo` task's route, in task id order.
pub fn demo() -> Vec<Route> {
    use Hand::Open;
    vec![
        // Typed on the keyboard instead of clicked on the buttons.
        Route::new("calculator-multiply", vec![("desktop", keys("1234*56="))]).answering("69104"),
        // No final newline.
        Route::new(
            "cross-copy-access-code",
            vec![("desktop2", shell("printf '7F3K-91' > ~/received.txt"))],
        ),
        // One trailing zero fewer than the sheet shows.
        Route::new(
            "cross-sheet-price",
            vec![("desktop2", shell("printf '42.5' > ~/order.txt"))],
        ),
        // The dconf database written directly, not through GSettings.
        Route::new(
            "cross-sync-color-scheme",
            vec![(
                "desktop2",
                shell(
                    "dconf write /org/gnome/desktop/interface/color-scheme \"'prefer-dark'\" && dconf write /org/gnome/desktop/interface/gtk-theme \"'HighContrast'\"",
                ),
            )],
        ),
        // Another program owns the clipboard, with a newline after the code.
        Route::new(
            "editor-copy-order-number",
            vec![(
                "desktop",
                shell("printf 'PX-4471-Q\\n' | xclip -selection clipboard >/dev/null 2>&1"),
            )],
        ),
        // Windows line ends and no final newline.
        Route::new(
            "editor-fix-typo",
            vec![(
                "desktop",
                shell("printf 'Hello world\\r\\nsecond line stays' > ~/notes/draft.txt"),
            )],
        ),
        // Written at a shell, then opened in Mousepad.
        Route::new(
            "editor-write-note",
            vec![
                (
                    "desktop",
                    shell("printf 'buy milk and eggs\\n' > ~/notes/todo.txt"),
                ),
                (
                    "desktop",
                    Open {
                        argv: &["mousepad", "~/notes/todo.txt"],
                        title: "todo.txt",
                    },
                ),
            ],
        ),
        Route::new(
            "files-archive-report",
            vec![(
                "desktop",
                shell("mv ~/inbox/report-draft.txt ~/archive/report-final.txt"),
            )],
        ),
        Route::new(
            "settings-dark-mode",
            vec![(
                "desktop",
                shell(
                    "gsettings set org.gnome.desktop.interface color-scheme prefer-dark && gsettings set org.gnome.desktop.interface gtk-theme Adwaita-dark",
                ),
            )],
        ),
        Route::new(
            "settings-left-handed-mouse",
            vec![(
                "desktop",
                shell(
                    "gsettings set org.gnome.desktop.peripherals.mouse left-handed true && gsettings set org.gnome.desktop.peripherals.mouse double-click 600",
                ),
            )],
        ),
        // A sheet LibreOffice wrote from a CSV file.
        Route::new(
            "sheet-budget",
            vec![(
                "desktop",
                shell(format!(
                    "cd ~/sheets && printf 'Rent,1200\\n' > b.csv && {CONVERT} ods b.csv >/dev/null 2>&1 && mv b.ods budget.ods && rm b.csv"
                )),
            )],
        ),
        Route::new(
            "terminal-copy-sheets",
            vec![(
                "desktop",
                shell("mkdir ~/sheets && cp ~/Documents/*.ods ~/sheets/"),
            )],
        ),
        Route::new(
            "terminal-count-lines",
            vec![(
                "desktop",
                shell("wc -l < ~/data/events.log > ~/data/count.txt"),
            )],
        )
        .answering("37"),
        Route::new(
            "terminal-largest-file",
            vec![(
                "desktop",
                shell("mv \"$(ls -S ~/data/files/* | head -n 1)\" ~/data/largest/"),
            )],
        )
        .answering("telescope.bin"),
        Route::new(
            "terminal-make-project",
            vec![(
                "desktop",
                shell(
                    "mkdir -p ~/projects/pincer && printf 'Fast, sound.' > ~/projects/pincer/README",
                ),
            )],
        ),
        // A letter LibreOffice converted from plain text.
        Route::new(
            "writer-letter",
            vec![(
                "desktop",
                shell(format!(
                    "cd ~/letters && printf 'Dear Ada, thank you for the engine.\\n' > a.txt && {CONVERT} odt a.txt >/dev/null 2>&1 && mv a.odt ada.odt && rm -f a.txt"
                )),
            )],
        ),
    ]
}

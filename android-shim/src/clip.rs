//! The phone's clipboard, written for typing: the text `input text` cannot type (anything
//! but printable ASCII) is put on the clipboard by a small helper and pasted into the focused
//! field. The helper is a dex (`dex/Clip.smali`, assembled by smali into
//! `dex/pincer-clip.dex` and built into the shim) that `app_process`, present on every
//! Android, runs as the shell user: it reads the text on its standard input and sets it as
//! the primary clip through the clipboard service, as scrcpy and uiautomator2 do. Typing
//! this way replaces what the clipboard held.

use crate::commands::{Feed, run_blocking_fed};
use pincer_shared::WireError;
use std::path::PathBuf;
use std::time::Duration;

/// The helper, as smali assembled it from `dex/Clip.smali` (a test checks they agree).
const DEX: &[u8] = include_bytes!("../dex/pincer-clip.dex");
/// Its class with `main`.
const CLASS: &str = "org.pincer.Clip";
/// The helper's file in the shim's work directory.
const FILE_NAME: &str = "pincer-clip.dex";
/// `app_process` starts a Java runtime: about a second on a slow emulator.
const CLIP_TIME: Duration = Duration::from_secs(20);

/// Sets the phone's clipboard through the helper.
#[derive(Debug)]
pub(crate) struct Clipboard {
    /// Where the helper is written.
    dex: PathBuf,
    /// Whether it was written by this shim (once; again after a failure, in case it went).
    written: bool,
}

impl Clipboard {
    /// The helper kept in `work_dir`, written on first use.
    pub(crate) fn new(work_dir: PathBuf) -> Self {
        Self {
            dex: work_dir.join(FILE_NAME),
            written: false,
        }
    }

    /// Makes `text` the phone's primary clip.
    pub(crate) fn set(&mut self, text: &str) -> Result<(), WireError> {
        if !self.written {
            self.write().map_err(|e| WireError::Io {
                message: format!(
                    "writing the clipboard helper {} (for text `input text` cannot type): {e}",
                    self.dex.display()
                ),
            })?;
            self.written = true;
        }
        let classpath = self.dex.display().to_string();
        let feed = Feed {
            env: &[("CLASSPATH", &classpath)],
            stdin: text.as_bytes(),
        };
        run_blocking_fed(&["app_process", "/", CLASS], feed, CLIP_TIME)
            .map(drop)
            .map_err(|e| {
                self.written = false;
                explained(e)
            })
    }

    /// Writes the helper beside its place and renames it there, so that `app_process` never
    /// reads half of one; read-only, as Android 14 wants code it loads to be.
    fn write(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        if let Some(dir) = self.dex.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let part = self.dex.with_extension("dex.part");
        let _ = std::fs::remove_file(&part);
        std::fs::write(&part, DEX)?;
        std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o444))?;
        std::fs::rename(&part, &self.dex)
    }
}

/// A failure of `app_process`, saying what it was for and what to do.
fn explained(e: WireError) -> WireError {
    const WHY: &str = "text that Android's `input text` cannot type (not printable ASCII) is put on the clipboard by `app_process` and pasted";
    match e {
        WireError::Unsupported { what } => WireError::Unsupported {
            what: format!("{what}: {WHY}; type printable ASCII only on this device"),
        },
        WireError::Io { message } => WireError::Io {
            message: format!(
                "{message} ({WHY}; `pincer android doctor` checks the phone, or type printable ASCII only)"
            ),
        },
        other => other,
    }
}

//! The probe class: read-only questions about a guest's state, for evaluators and the
//! harness. Replies are inline in the header; a [`Batch`](crate::Request::Batch) carries many
//! probes in one round trip.

use crate::observe::{Rect, TreeRequest};
use crate::setup::ExecOutput;
use crate::tree::UiTree;
use serde::{Deserialize, Serialize};

/// A read-only question about the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Probe {
    /// Metadata of a path; a missing path is an answer (`exists: false`), not an error.
    Stat {
        /// Absolute path (or relative to the guest's home).
        path: String,
    },
    /// Up to `max_len` bytes of a file, inline (capped at [`MAX_INLINE_FILE`](crate::limits::MAX_INLINE_FILE)).
    ReadFile {
        /// The file.
        path: String,
        /// Most bytes to return.
        max_len: u64,
    },
    /// Entries of a directory.
    ListDir {
        /// The directory.
        path: String,
    },
    /// Running processes.
    Processes,
    /// The active window: the one the window manager marks active (`_NET_ACTIVE_WINDOW`),
    /// else the top-level window holding input focus.
    ActiveWindow,
    /// Every top-level window the window manager manages (or, without one, every mapped
    /// top-level window), bottom to top.
    Windows,
    /// Text on the clipboard.
    Clipboard,
    /// Output of a command run for the harness. Runs a program, so a guest started
    /// read-only refuses it like the setup class.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Kill the command after this long.
        timeout_ms: u64,
        /// Keep at most this many bytes of stdout and of stderr.
        max_output: u64,
    },
    /// A value from the guest's environment variables (the agent's own).
    EnvVar {
        /// Variable name.
        name: String,
    },
    /// The accessibility tree, inline (for checkpoints in a batch).
    UiTree(TreeRequest),
    /// One of the platform's settings, as its own tool prints it: GSettings on Linux
    /// (`gsettings get SCHEMA KEY`), Android's tables (`settings get NAMESPACE KEY`, the
    /// schema `system`, `secure` or `global`). Runs only that fixed program with checked
    /// names, so read-only guests allow it. (Its place among the variants is its number on
    /// the wire: it was `Gsettings`.)
    Setting {
        /// Schema ("org.gnome.desktop.interface"), or Android's table ("secure").
        schema: String,
        /// Key ("color-scheme", "bluetooth_name").
        key: String,
    },
    /// Android's state (protocol v2): a setting, content rows, the app in front, the
    /// packages, a property, the battery or the radios. Runs only Android's own command for
    /// it, with checked arguments, so read-only guests allow it.
    Android(crate::android::AndroidQuery),
}

/// What a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (not followed).
    Symlink,
    /// Anything else (socket, device, fifo).
    Other,
}

/// Metadata of a path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// The path as asked.
    pub path: String,
    /// Whether anything is there.
    pub exists: bool,
    /// What it is (when it exists); a symbolic link is [`FileKind::Symlink`].
    pub kind: Option<FileKind>,
    /// For a symbolic link, what it resolves to (`None`: dangling, or not a link).
    pub target: Option<FileKind>,
    /// Size in bytes.
    pub size: u64,
    /// Unix permission bits.
    pub mode: u32,
    /// Modification time, milliseconds since the Unix epoch.
    pub modified_ms: i64,
}

/// File bytes returned inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileContent {
    /// The path as asked.
    pub path: String,
    /// The bytes (at most the requested length).
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
    /// Size of the whole file.
    pub total_size: u64,
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    /// File name within the directory.
    pub name: String,
    /// What it is.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
}

/// A running process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Short name (`comm`).
    pub name: String,
    /// Command line.
    pub cmdline: Vec<String>,
    /// Owner's user id.
    pub uid: u32,
}

/// The active window (see [`Probe::ActiveWindow`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowInfo {
    /// Window-system id.
    pub id: u64,
    /// Title.
    pub title: String,
    /// Owning process, when the window says.
    pub pid: Option<u32>,
    /// Name of the owning process.
    pub process_name: Option<String>,
    /// Window class (X11 `WM_CLASS` class part).
    pub class: Option<String>,
    /// Window instance (X11 `WM_CLASS` instance part).
    pub instance: Option<String>,
    /// Position and size on screen.
    pub bounds: Option<Rect>,
}

/// The answer to one probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProbeReply {
    /// For [`Probe::Stat`].
    Stat(FileStat),
    /// For [`Probe::ReadFile`]; `None` when the file does not exist.
    File(Option<FileContent>),
    /// For [`Probe::ListDir`]; `None` when the directory does not exist.
    Dir(Option<Vec<DirEntry>>),
    /// For [`Probe::Processes`].
    Processes(Vec<ProcessInfo>),
    /// For [`Probe::ActiveWindow`]; `None` when no window has focus.
    ActiveWindow(Option<WindowInfo>),
    /// For [`Probe::Windows`].
    Windows(Vec<WindowInfo>),
    /// For [`Probe::Clipboard`]; `None` when the clipboard holds no text.
    Clipboard(Option<String>),
    /// For [`Probe::Command`].
    Command(ExecOutput),
    /// For [`Probe::EnvVar`].
    EnvVar(Option<String>),
    /// For [`Probe::UiTree`]. Boxed (the wire format is the same) so that the many small
    /// replies of a batch are not each the size of a tree.
    UiTree(Box<UiTree>),
    /// For [`Probe::Setting`]; `None` when the schema or key does not exist (or, on
    /// Android, the key is unset).
    Setting(Option<String>),
    /// For [`Probe::Android`].
    Android(crate::android::AndroidAnswer),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_probe_keeps_its_wire_bytes() {
        // postcard writes the variant index first: `Setting` was `Gsettings` at index 10, and
        // guests and hosts of either name read each other.
        let probe = Probe::Setting {
            schema: "s".into(),
            key: "k".into(),
        };
        assert_eq!(postcard::to_stdvec(&probe).unwrap(), [10, 1, b's', 1, b'k']);
        let reply = ProbeReply::Setting(Some("v".into()));
        assert_eq!(postcard::to_stdvec(&reply).unwrap(), [10, 1, 1, b'v']);
    }
}

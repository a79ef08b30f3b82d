//! The setup class: privileged writes and program execution, for task setup and teardown.
//! A guest started read-only refuses all of it.

use serde::{Deserialize, Serialize};

/// A privileged change to the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Setup {
    /// Write the bulk body to a file.
    WriteFile {
        /// Destination.
        path: String,
        /// Unix permission bits for a new file.
        mode: u32,
        /// Create missing parent directories.
        create_dirs: bool,
        /// Append instead of replacing.
        append: bool,
    },
    /// Remove a file or directory; a missing path is not an error.
    Remove {
        /// What to remove.
        path: String,
        /// Remove directories with their contents.
        recursive: bool,
    },
    /// Create a directory and its parents.
    MakeDir {
        /// The directory.
        path: String,
    },
    /// Run a program to completion.
    Exec(ExecRequest),
    /// Start a program and return at once; it outlives the request.
    Launch {
        /// Program and arguments.
        argv: Vec<String>,
        /// Working directory (`None`: the agent's).
        cwd: Option<String>,
        /// Extra environment variables.
        env: Vec<(String, String)>,
    },
    /// Put text on the clipboard.
    SetClipboard {
        /// The text.
        text: String,
    },
    /// Change a top-level window (ids from the `Windows` probe).
    Window {
        /// Window-system id.
        id: u64,
        /// What to do with it.
        op: WindowOp,
    },
    /// Change an Android device's state (protocol v2): start or stop an app, clear its
    /// data, put a setting, insert or delete content rows.
    Android(crate::android::AndroidSetup),
}

/// Window-manager operations for task setup (bring an app forward, give it the screen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowOp {
    /// Raise it and give it input focus.
    Activate,
    /// Fill the screen (work area).
    Maximize,
    /// Undo maximize.
    Restore,
    /// Iconify it.
    Minimize,
    /// Ask it to close, as the window's close button does.
    Close,
    /// Move and resize it to this rectangle (outer frame, screen pixels).
    Geometry(crate::observe::Rect),
}

/// A program to run to completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; no shell unless you run one (`["sh", "-c", "..."]`).
    pub argv: Vec<String>,
    /// Working directory (`None`: the agent's).
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Bytes fed to stdin (then closed).
    #[serde(with = "serde_bytes")]
    pub stdin: Vec<u8>,
    /// Kill the process group after this long.
    pub timeout_ms: u64,
    /// Keep at most this many bytes of stdout and of stderr each, and at most
    /// [`MAX_EXEC_OUTPUT`](crate::limits::MAX_EXEC_OUTPUT) of both together.
    pub max_output: u64,
}

impl ExecRequest {
    /// A request with a 30 s timeout and 1 MiB of output.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            env: Vec::new(),
            stdin: Vec::new(),
            timeout_ms: 30_000,
            max_output: 1024 * 1024,
        }
    }
}

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    /// Exited with this code.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    /// Ran past its timeout and was killed.
    TimedOut,
}

impl ExitStatus {
    /// Exited with code 0.
    pub fn success(self) -> bool {
        self == Self::Exited(0)
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(c) => write!(f, "exit code {c}"),
            Self::Signaled(s) => write!(f, "killed by signal {s}"),
            Self::TimedOut => f.write_str("timed out"),
        }
    }
}

/// Output of a finished program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// How it ended.
    pub status: ExitStatus,
    /// Standard output (possibly cut at the limit).
    #[serde(with = "serde_bytes")]
    pub stdout: Vec<u8>,
    /// Standard error (possibly cut at the limit).
    #[serde(with = "serde_bytes")]
    pub stderr: Vec<u8>,
    /// Whether either stream was cut.
    pub truncated: bool,
    /// Wall time in milliseconds.
    pub elapsed_ms: u64,
}

//! Android's own commands, run by name through `PATH` (`screencap`, `input`, `uiautomator`,
//! `settings`, `content`, `dumpsys`, `am`, `pm`, `getprop`, `wm`, `cmd`, `app_process`),
//! with arguments as separate words and never through a shell, with a timeout, and with
//! errors that name the command; a command may be given environment variables and bytes on
//! its standard input. On a phone `PATH` leads to `/system/bin`; in tests a directory of
//! stand-ins put first on `PATH` replaces the device.

use pincer_guest_core::exec;
use pincer_shared::WireError;
use pincer_shared::setup::{ExecOutput, ExecRequest, ExitStatus};
use std::time::Duration;

/// Most bytes kept of a command's output: a raw 4K screen is 33 MiB.
const MAX_OUTPUT: u64 = 64 << 20;

/// What a command printed.
#[derive(Debug, Clone)]
pub(crate) struct Ran {
    /// Standard output.
    pub(crate) stdout: Vec<u8>,
    /// Standard error.
    pub(crate) stderr: Vec<u8>,
}

impl Ran {
    /// Standard output as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// Standard error as text.
    pub(crate) fn err(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// What a command gets besides its arguments.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Feed<'a> {
    /// Environment variables added to the shim's.
    pub(crate) env: &'a [(&'a str, &'a str)],
    /// Bytes on its standard input (none: it reads `/dev/null`).
    pub(crate) stdin: &'a [u8],
}

fn request(argv: &[&str], feed: Feed<'_>, timeout: Duration) -> ExecRequest {
    let mut req = ExecRequest::new(argv.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
    req.env = feed
        .env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    req.stdin = feed.stdin.to_vec();
    req.timeout_ms = timeout.as_millis() as u64;
    req.max_output = MAX_OUTPUT;
    req
}

/// Names the command in an error: a missing command, a timeout, a failure.
fn judged(argv: &[&str], out: Result<ExecOutput, WireError>) -> Result<Ran, WireError> {
    let command = argv.first().copied().unwrap_or_default();
    let out = out.map_err(|e| match e {
        WireError::NotFound { .. } => WireError::Unsupported {
            what: format!("`{command}` is not on this device's PATH"),
        },
        other => other,
    })?;
    match out.status {
        ExitStatus::Exited(0) => Ok(Ran {
            stdout: out.stdout,
            stderr: out.stderr,
        }),
        ExitStatus::TimedOut => Err(WireError::Io {
            message: format!("`{}` did not finish within its time", argv.join(" ")),
        }),
        other => Err(WireError::Io {
            message: format!(
                "`{}` failed ({other}): {}",
                argv.join(" "),
                String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(500)
                    .collect::<String>()
            ),
        }),
    }
}

/// Runs a command to its end; a status other than 0 is an error naming it.
pub(crate) async fn run(argv: &[&str], timeout: Duration) -> Result<Ran, WireError> {
    judged(
        argv,
        exec::run(&request(argv, Feed::default(), timeout)).await,
    )
}

/// [`run`], waited for: from a blocking thread (the capabilities that run one call at a
/// time), or as the guest starts.
pub(crate) fn run_blocking(argv: &[&str], timeout: Duration) -> Result<Ran, WireError> {
    run_blocking_fed(argv, Feed::default(), timeout)
}

/// [`run_blocking`] with environment variables and standard input.
pub(crate) fn run_blocking_fed(
    argv: &[&str],
    feed: Feed<'_>,
    timeout: Duration,
) -> Result<Ran, WireError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| WireError::Internal {
        message: "no async runtime to run commands on".into(),
    })?;
    let req = request(argv, feed, timeout);
    // A thread driving the runtime may not block on it (the guest starting up, which makes
    // the input devices, is one): the command is waited for on a thread of its own.
    let ran = std::thread::scope(|s| {
        s.spawn(|| handle.block_on(exec::run(&req)))
            .join()
            .unwrap_or_else(|_| {
                Err(WireError::Internal {
                    message: format!("running {argv:?} panicked"),
                })
            })
    });
    judged(argv, ran)
}

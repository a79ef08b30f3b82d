//! Running programs for the harness: to completion with a timeout and capped output
//! (`Exec`, command probes), or detached (`Launch`). Each program gets its own process
//! group so a timeout kills everything it started, not just the direct child.

use crate::budget::Budget;
use pincer_shared::WireError;
use pincer_shared::limits::{MAX_EXEC_OUTPUT, MAX_EXEC_TIMEOUT_MS};
use pincer_shared::setup::{ExecOutput, ExecRequest, ExitStatus};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// Expands a leading `~` in arguments to the agent user's home, as a shell would, so task
/// files can say `mousepad ~/notes/a.txt` whatever the home directory is.
fn expand(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| {
            if a == "~" || a.starts_with("~/") {
                crate::fs::resolve(a).display().to_string()
            } else {
                a.clone()
            }
        })
        .collect()
}

/// Runs a program to completion, killing its process group after the timeout.
pub async fn run(req: &ExecRequest) -> Result<ExecOutput, WireError> {
    run_as(req, None, true).await
}

/// As [`run`], as user and group `user` (uid, gid) when given (the guest must be root);
/// supplementary groups are dropped with them. `expand_home`: a leading `~` in arguments is
/// the agent user's home (not for API tools, whose arguments carry the agent's values).
pub(crate) async fn run_as(
    req: &ExecRequest,
    user: Option<(u32, u32)>,
    expand_home: bool,
) -> Result<ExecOutput, WireError> {
    let (program, args) = req
        .argv
        .split_first()
        .ok_or_else(|| WireError::InvalidArgument {
            message: "exec needs a program: argv is empty".into(),
        })?;
    if req.timeout_ms == 0 || req.timeout_ms > MAX_EXEC_TIMEOUT_MS {
        return Err(WireError::InvalidArgument {
            message: format!(
                "timeout of {} ms is out of range: use 1..={MAX_EXEC_TIMEOUT_MS}",
                req.timeout_ms
            ),
        });
    }
    let args = if expand_home {
        expand(args)
    } else {
        args.to_vec()
    };
    let cap = req.max_output.min(MAX_EXEC_OUTPUT);
    let mut cmd = Command::new(program);
    cmd.args(&args)
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(if req.stdin.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &req.cwd {
        cmd.current_dir(crate::fs::resolve(cwd));
    }
    if let Some((uid, gid)) = user {
        cmd.uid(uid).gid(gid);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, &e))?;
    let pgid = child.id();

    if let Some(mut stdin) = child.stdin.take() {
        let input = req.stdin.clone();
        // Fed from a task so a child that does not read stdin cannot block us.
        tokio::spawn(async move {
            let _ = stdin.write_all(&input).await;
        });
    }
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let mut reader = tokio::spawn(async move {
        // What stdout and stderr may keep together, so that one exec's reply always fits in a
        // response header (each stream alone may keep up to the request's `max_output`).
        let both = Budget::new(MAX_EXEC_OUTPUT);
        tokio::join!(
            read_capped(stdout, cap, &both),
            read_capped(stderr, cap, &both)
        )
    });

    let status =
        match tokio::time::timeout(Duration::from_millis(req.timeout_ms), child.wait()).await {
            Ok(Ok(st)) => exit_status(st),
            Ok(Err(e)) => {
                return Err(WireError::Io {
                    message: format!("waiting for {program}: {e}"),
                });
            }
            Err(_) => {
                kill_group(pgid);
                let _ = child.wait().await;
                ExitStatus::TimedOut
            }
        };
    // A backgrounded grandchild may still hold the pipes open: give it a moment, then kill
    // the group; a process that left the group (setsid) is abandoned with its output cut.
    let grace = Duration::from_millis(250);
    let ((out, out_cut), (err, err_cut)) = match tokio::time::timeout(grace, &mut reader).await {
        Ok(r) => r.unwrap_or_default(),
        Err(_) => {
            kill_group(pgid);
            match tokio::time::timeout(grace, &mut reader).await {
                Ok(r) => r.unwrap_or_default(),
                Err(_) => {
                    reader.abort();
                    ((Vec::new(), true), (Vec::new(), true))
                }
            }
        }
    };
    Ok(ExecOutput {
        status,
        stdout: out,
        stderr: err,
        truncated: out_cut || err_cut,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

/// Starts a program detached from the agent (its own process group, stdio to /dev/null) and
/// returns its pid. It stays in the agent's session on purpose: `pincer desktop down` stops
/// a desktop by session, and apps the harness launched must go with it. A reaper task
/// collects its exit status so it never lingers as a zombie.
pub(crate) fn launch(
    argv: &[String],
    cwd: Option<&str>,
    env: &[(String, String)],
) -> Result<u32, WireError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| WireError::InvalidArgument {
            message: "launch needs a program: argv is empty".into(),
        })?;
    let args = expand(args);
    let mut cmd = Command::new(program);
    cmd.args(&args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some(cwd) = cwd {
        cmd.current_dir(crate::fs::resolve(cwd));
    }
    let mut child = cmd.spawn().map_err(|e| spawn_error(program, &e))?;
    let pid = child.id().unwrap_or(0);
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(pid)
}

fn spawn_error(program: &str, e: &std::io::Error) -> WireError {
    match e.kind() {
        std::io::ErrorKind::NotFound => WireError::NotFound {
            path: format!("{program} (program not found on the guest's PATH)"),
        },
        std::io::ErrorKind::PermissionDenied => WireError::PermissionDenied {
            path: program.to_owned(),
        },
        _ => WireError::Io {
            message: format!("cannot start {program}: {e}"),
        },
    }
}

fn kill_group(pgid: Option<u32>) {
    if let Some(pgid) = pgid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: a plain syscall; the group was created for this child.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
}

fn exit_status(st: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => ExitStatus::Exited(c),
        (None, Some(s)) => ExitStatus::Signaled(s),
        (None, None) => ExitStatus::Exited(-1),
    }
}

/// Reads a stream to its end, keeping the first `cap` bytes as long as the shared budget
/// lasts; the rest is drained so the child never blocks on a full pipe.
async fn read_capped<R: AsyncRead + Unpin>(
    r: Option<R>,
    cap: u64,
    budget: &Budget,
) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let Some(mut r) = r else {
        return (kept, false);
    };
    let mut cut = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len() as u64).min(n as u64);
                let keep = budget.take(room) as usize;
                if keep < n {
                    cut = true;
                }
                kept.extend_from_slice(&buf[..keep]);
            }
        }
    }
    (kept, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(argv: &[&str]) -> ExecRequest {
        ExecRequest::new(argv.iter().copied())
    }

    #[tokio::test]
    async fn home_relative_arguments_are_expanded() {
        let home = std::env::var("HOME").unwrap();
        let out = run(&req(&["echo", "~/x", "a~/b", "~"])).await.unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            format!("{home}/x a~/b {home}\n")
        );
    }

    #[tokio::test]
    async fn captures_output_status_and_stdin() {
        let mut r = req(&["sh", "-c", "cat; echo err >&2; exit 3"]);
        r.stdin = b"from stdin".to_vec();
        let out = run(&r).await.unwrap();
        assert_eq!(out.status, ExitStatus::Exited(3));
        assert_eq!(out.stdout, b"from stdin");
        assert_eq!(out.stderr, b"err\n");
        assert!(!out.truncated);
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        let script = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let mut r = req(&["sh", "-c", &script]);
        r.timeout_ms = 300;
        let out = run(&r).await.unwrap();
        assert_eq!(out.status, ExitStatus::TimedOut);
        assert!(out.elapsed_ms < 5_000, "took {} ms", out.elapsed_ms);
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists(), "a grandchild outlived the timeout");
    }

    #[tokio::test]
    async fn output_is_capped_and_flagged() {
        let mut r = req(&["sh", "-c", "head -c 100000 /dev/zero"]);
        r.max_output = 1000;
        let out = run(&r).await.unwrap();
        assert_eq!(out.stdout.len(), 1000);
        assert!(out.truncated);
        assert!(out.status.success());
    }

    #[tokio::test]
    async fn stdout_and_stderr_together_fit_in_one_reply() {
        let mb = 1024 * 1024;
        let script = format!(
            "head -c {} /dev/zero; head -c {} /dev/zero >&2",
            40 * mb,
            40 * mb
        );
        let mut r = req(&["sh", "-c", &script]);
        r.max_output = MAX_EXEC_OUTPUT;
        let out = run(&r).await.unwrap();
        assert!(out.truncated);
        assert_eq!(
            (out.stdout.len() + out.stderr.len()) as u64,
            MAX_EXEC_OUTPUT,
            "stdout {} + stderr {}",
            out.stdout.len(),
            out.stderr.len()
        );
        let reply = pincer_shared::Response::Exec(out);
        pincer_shared::codec::encode(&reply, 0, pincer_shared::limits::MAX_RESPONSE_HEADER)
            .expect("the reply fits in a response header");
    }

    #[tokio::test]
    async fn bad_requests_are_typed_errors() {
        assert!(matches!(
            run(&req(&[])).await,
            Err(WireError::InvalidArgument { .. })
        ));
        assert!(matches!(
            run(&req(&["/nonexistent/program"])).await,
            Err(WireError::NotFound { .. })
        ));
        let mut r = req(&["true"]);
        r.timeout_ms = 0;
        assert!(matches!(
            run(&r).await,
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[tokio::test]
    async fn launch_returns_at_once_and_detaches() {
        let started = Instant::now();
        let pid = launch(&["sleep".into(), "5".into()], None, &[]).unwrap();
        assert!(started.elapsed() < Duration::from_secs(2));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // Field 5 of /proc/pid/stat is the process group; a detached child leads its own.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let pgrp: u32 = after.split(' ').nth(2).unwrap().parse().unwrap();
        assert_eq!(pgrp, pid);
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
}

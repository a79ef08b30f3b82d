//! API tools run in a sandbox: a task's declared program, its placeholders filled with the
//! agent's checked arguments, under bubblewrap (`bwrap`) with every namespace unshared (no
//! network at all: a fresh network namespace has only a loopback nobody listens on), a
//! minimal read-only system, a private `/tmp`, only the paths the declaration names, an
//! empty environment but for the declared variables, and no capabilities. The user inside
//! is 65534 (nobody); a guest running as root also drops to 65534 before bwrap starts, so
//! the tool is a separate unprivileged user outside the sandbox too. Output and time are
//! bounded as for `Exec`.

use crate::exec;
use pincer_shared::WireError;
use pincer_shared::setup::{ExecOutput, ExecRequest};
use pincer_shared::tool::{MAX_TOOL_OUTPUT, ToolCall};
use std::path::Path;

/// The user and group tools run as.
const NOBODY: u32 = 65534;

/// The bwrap command line that runs `argv` (already filled and checked) as `call` allows.
pub(crate) fn command_line(call: &ToolCall, argv: Vec<String>) -> Vec<String> {
    let mut c = pincer_shared::tool::sandbox_root();
    let s = &call.spec.sandbox;
    for p in &s.read {
        c.extend(["--ro-bind".into(), p.clone(), p.clone()]);
    }
    for p in &s.write {
        c.extend(["--bind".into(), p.clone(), p.clone()]);
    }
    c.extend([
        "--setenv".into(),
        "PATH".into(),
        "/usr/bin:/bin".into(),
        "--setenv".into(),
        "HOME".into(),
        "/tmp".into(),
    ]);
    for (k, v) in &s.env {
        c.extend(["--setenv".into(), k.clone(), v.clone()]);
    }
    c.extend(["--chdir".into(), "/tmp".into(), "--".into()]);
    c.extend(argv);
    c
}

/// Runs one tool call: the arguments are checked before anything starts (a typed
/// `InvalidArgument` naming the parameter), then the program runs sandboxed.
pub(crate) async fn run(call: &ToolCall) -> Result<ExecOutput, WireError> {
    let argv = call
        .argv()
        .map_err(|message| WireError::InvalidArgument { message })?;
    for p in call
        .spec
        .sandbox
        .read
        .iter()
        .chain(&call.spec.sandbox.write)
    {
        if !Path::new(p).exists() {
            return Err(WireError::InvalidArgument {
                message: format!(
                    "tool {}: sandbox path {p} does not exist on this guest",
                    call.spec.name
                ),
            });
        }
    }
    let mut req = ExecRequest::new(command_line(call, argv));
    req.timeout_ms = call.spec.timeout_ms;
    req.max_output = MAX_TOOL_OUTPUT;
    // SAFETY: geteuid has no preconditions.
    let user = (unsafe { libc::geteuid() } == 0).then_some((NOBODY, NOBODY));
    exec::run_as(&req, user, false).await.map_err(|e| match e {
        WireError::NotFound { .. } => WireError::Unsupported {
            what: "API tools: bubblewrap (bwrap) is not installed on this guest; \
                   install it (Debian: apt install bubblewrap)"
                .into(),
        },
        e => e,
    })
}

#[cfg(test)]
mod tests {
    use crate::body::Reply;
    use crate::testutil::{Fake, config};
    use crate::{Config, Guest, RequestBody};
    use pincer_shared::setup::{ExecOutput, ExitStatus};
    use pincer_shared::tool::{ParamKind, Sandbox, ToolCall, ToolParam, ToolSpec, ToolValue};
    use pincer_shared::{Request, RequestClass, Response, WireError};
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn guest(read_only: bool, allow_tools: bool) -> Guest<Fake> {
        let config = Config {
            allow_tools,
            ..config(read_only)
        };
        Guest::new(config, &Fake::default())
    }

    /// A directory the tool's user may write (it is 65534 when the tests run as root).
    fn shared_dir() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        d
    }

    fn tool(argv: &[&str], sandbox: Sandbox) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: "a test tool".into(),
            params: vec![ToolParam {
                name: "name".into(),
                description: String::new(),
                kind: ParamKind::String,
                required: false,
                max_len: Some(32),
                one_of: vec![],
                charset: Some("-_.".into()),
                min: None,
                max: None,
            }],
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            sandbox,
            timeout_ms: 10_000,
        }
    }

    async fn call(
        g: &Guest<Fake>,
        spec: ToolSpec,
        args: &[(&str, &str)],
    ) -> Result<ExecOutput, WireError> {
        let args = args
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ToolValue::String((*v).to_owned())))
            .collect();
        let req = Request::Tool(Box::new(ToolCall { spec, args }));
        match g.handle(req, RequestBody::none()).await {
            Reply::Msg(Response::Exec(out)) => Ok(out),
            Reply::Msg(Response::Error(e)) => Err(e),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[tokio::test]
    async fn tools_need_the_opt_in_and_a_writable_guest_and_run_nothing_otherwise() {
        let dir = shared_dir();
        let d = dir.path().display().to_string();
        let spec = tool(
            &["/usr/bin/touch", &format!("{d}/{{name}}")],
            Sandbox {
                write: vec![d.clone()],
                ..Sandbox::default()
            },
        );
        for (g, says) in [
            (guest(false, false), "--allow-tools"),
            (guest(true, true), "--read-only"),
        ] {
            match call(&g, spec.clone(), &[("name", "made")]).await {
                Err(WireError::Forbidden {
                    class: RequestClass::Tool,
                    reason,
                }) => {
                    assert!(reason.contains(says), "{reason} should name {says}");
                }
                other => panic!("expected a refusal naming {says}, got {other:?}"),
            }
            assert!(!dir.path().join("made").exists());
            assert!(!g.info().await.capabilities.contains(&"tools".to_owned()));
        }
        let g = guest(false, true);
        assert!(g.info().await.capabilities.contains(&"tools".to_owned()));
        let out = call(&g, spec, &[("name", "made")]).await.unwrap();
        assert_eq!(out.status, ExitStatus::Exited(0), "{}", text(&out.stderr));
        let made = std::fs::metadata(dir.path().join("made")).unwrap();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(made.uid(), 65534, "a root guest runs tools as nobody");
        }
    }

    #[tokio::test]
    async fn arguments_outside_the_schema_are_refused_before_anything_runs() {
        let dir = shared_dir();
        let d = dir.path().display().to_string();
        let spec = tool(
            &["/usr/bin/touch", &format!("{d}/{{name}}")],
            Sandbox {
                write: vec![d.clone()],
                ..Sandbox::default()
            },
        );
        let g = guest(false, true);
        for (args, says) in [
            (vec![("name", "../../etc/x")], "may not contain '/'"),
            (vec![("name", "x"), ("argv", "id")], "no parameter `argv`"),
            (vec![("name", &*"x".repeat(33))], "at most 32"),
        ] {
            match call(&g, spec.clone(), &args).await {
                Err(WireError::InvalidArgument { message }) => {
                    assert!(message.contains(says), "{message} should say {says}");
                }
                other => panic!("expected InvalidArgument, got {other:?}"),
            }
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn tools_see_only_their_declared_paths() {
        let secret = tempfile::tempdir().unwrap();
        let token = secret.path().join("token");
        std::fs::write(&token, "s3cret").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(secret.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let readable = tempfile::tempdir().unwrap();
        std::fs::set_permissions(readable.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(readable.path().join("ok"), "fine").unwrap();
        let r = readable.path().display().to_string();
        let g = guest(false, true);
        let sandbox = Sandbox {
            read: vec![r.clone()],
            ..Sandbox::default()
        };
        // The declared path reads.
        let out = call(
            &g,
            tool(&["/usr/bin/cat", &format!("{r}/ok")], sandbox.clone()),
            &[],
        )
        .await
        .unwrap();
        assert_eq!(text(&out.stdout), "fine");
        // A file the guest itself could read, outside the sandbox: absent there.
        let t = token.display().to_string();
        for path in [t.as_str(), "/root", "/home", "/etc/shadow", "/var"] {
            let out = call(&g, tool(&["/usr/bin/ls", "-d", path], sandbox.clone()), &[])
                .await
                .unwrap();
            assert_ne!(
                out.status,
                ExitStatus::Exited(0),
                "{path} is visible in the sandbox"
            );
        }
        let out = call(&g, tool(&["/usr/bin/cat", &t], sandbox.clone()), &[])
            .await
            .unwrap();
        assert_ne!(out.status, ExitStatus::Exited(0));
        assert!(!text(&out.stdout).contains("s3cret"));
        // Read paths are read-only.
        let out = call(
            &g,
            tool(&["/usr/bin/touch", &format!("{r}/new")], sandbox.clone()),
            &[],
        )
        .await
        .unwrap();
        assert_ne!(out.status, ExitStatus::Exited(0));
        assert!(!readable.path().join("new").exists());
        // Values reach the program as given: `~` is not the guest's home.
        let mut echo = tool(&["/usr/bin/echo", "{name}"], sandbox.clone());
        echo.params[0].charset = None;
        let out = call(&g, echo, &[("name", "~/x")]).await.unwrap();
        assert_eq!(text(&out.stdout), "~/x\n");
        // The user inside is nobody, and the environment holds nothing of the guest's.
        let out = call(&g, tool(&["/usr/bin/sh", "-c", "id -u; env"], sandbox), &[])
            .await
            .unwrap();
        let said = text(&out.stdout);
        assert!(said.starts_with("65534\n"), "{said}");
        assert!(!said.contains("CARGO"), "{said}");
    }

    #[tokio::test]
    async fn tools_reach_no_network_and_stop_at_their_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let g = guest(false, true);
        let url = format!("http://127.0.0.1:{port}/");
        let out = call(
            &g,
            tool(
                &["/usr/bin/curl", "-sS", "--max-time", "3", &url],
                Sandbox::default(),
            ),
            &[],
        )
        .await
        .unwrap();
        assert_ne!(out.status, ExitStatus::Exited(0));
        assert!(
            text(&out.stderr).contains("127.0.0.1"),
            "{}",
            text(&out.stderr)
        );
        assert!(
            listener.accept().is_err(),
            "the sandbox reached the host's loopback"
        );
        // The same request from outside the sandbox does arrive (the listener works).
        let _ = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(listener.accept().is_ok());
        let mut slow = tool(&["/usr/bin/sleep", "30"], Sandbox::default());
        slow.timeout_ms = 300;
        let out = call(&g, slow, &[]).await.unwrap();
        assert_eq!(out.status, ExitStatus::TimedOut);
    }
}

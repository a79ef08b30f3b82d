//! QMP, QEMU's machine protocol, spoken directly: JSON objects, one per line, on a unix
//! socket. The greeting is read, capabilities negotiated, then each command gets its
//! `return` or `error`; asynchronous events in between are set aside.

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// What went wrong talking to QEMU.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QmpError {
    /// The socket cannot be reached or broke.
    #[error("QMP socket {path}: {source}")]
    Io {
        /// The socket.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// QEMU closed the connection (it exited).
    #[error("QEMU closed its QMP socket {0} (it has exited)")]
    Closed(String),
    /// A line that is not QMP.
    #[error("QMP socket {path}: not QMP: {line}")]
    Protocol {
        /// The socket.
        path: String,
        /// What arrived.
        line: String,
    },
    /// QEMU refused a command.
    #[error("QEMU refused {command}: {class}: {desc}")]
    Refused {
        /// The command.
        command: String,
        /// QMP's error class.
        class: String,
        /// Its description.
        desc: String,
    },
    /// No answer in time.
    #[error("QEMU did not answer {0} in time")]
    Timeout(String),
}

/// A QMP connection.
#[derive(Debug)]
pub struct Qmp {
    path: String,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    /// Events that arrived while waiting for replies, oldest first.
    pub events: Vec<Value>,
}

/// How long one command may take (migrations are polled, not awaited).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

impl Qmp {
    /// Connects, reads the greeting and negotiates capabilities.
    pub async fn connect(path: &Path) -> Result<Self, QmpError> {
        let name = path.display().to_string();
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| QmpError::Io {
                path: name.clone(),
                source,
            })?;
        let (r, w) = stream.into_split();
        let mut qmp = Self {
            path: name,
            reader: BufReader::new(r),
            writer: w,
            events: Vec::new(),
        };
        let greeting = qmp.read().await?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Protocol {
                path: qmp.path.clone(),
                line: greeting.to_string(),
            });
        }
        qmp.execute("qmp_capabilities", json!({})).await?;
        Ok(qmp)
    }

    async fn read(&mut self) -> Result<Value, QmpError> {
        let mut line = String::new();
        let n = tokio::time::timeout(REPLY_TIMEOUT, self.reader.read_line(&mut line))
            .await
            .map_err(|_| QmpError::Timeout("a reply".into()))?
            .map_err(|source| QmpError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Err(QmpError::Closed(self.path.clone()));
        }
        serde_json::from_str(&line).map_err(|_| QmpError::Protocol {
            path: self.path.clone(),
            line: line.trim().chars().take(200).collect(),
        })
    }

    /// Runs a command and returns its `return` value.
    pub async fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        let mut msg = json!({ "execute": command });
        if arguments.as_object().is_some_and(|o| !o.is_empty()) {
            msg["arguments"] = arguments;
        }
        let mut line = msg.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|source| QmpError::Io {
                path: self.path.clone(),
                source,
            })?;
        loop {
            let v = self.read().await?;
            if let Some(r) = v.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = v.get("error") {
                return Err(QmpError::Refused {
                    command: command.into(),
                    class: e["class"].as_str().unwrap_or("?").into(),
                    desc: e["desc"].as_str().unwrap_or("?").into(),
                });
            }
            if v.get("event").is_some() {
                self.events.push(v);
                continue;
            }
            return Err(QmpError::Protocol {
                path: self.path.clone(),
                line: v.to_string(),
            });
        }
    }

    /// Leaves guest RAM kept in a shared memory backend out of migrations: saving writes
    /// only the machine state, and restoring maps the RAM file instead of reading it.
    pub async fn ignore_shared_ram(&mut self) -> Result<(), QmpError> {
        self.execute(
            "migrate-set-capabilities",
            json!({"capabilities": [{"capability": "x-ignore-shared", "state": true}]}),
        )
        .await
        .map(drop)
    }

    /// Waits until the migration in progress (in or out) has completed.
    pub async fn wait_migration(&mut self, within: Duration) -> Result<(), QmpError> {
        let until = tokio::time::Instant::now() + within;
        loop {
            let st = self.execute("query-migrate", json!({})).await?;
            match st["status"].as_str().unwrap_or("") {
                "completed" => return Ok(()),
                "failed" | "cancelled" => {
                    return Err(QmpError::Refused {
                        command: "migrate".into(),
                        class: st["status"].as_str().unwrap_or("failed").into(),
                        desc: st["error-desc"]
                            .as_str()
                            .unwrap_or("the migration failed")
                            .into(),
                    });
                }
                _ => {}
            }
            if tokio::time::Instant::now() > until {
                return Err(QmpError::Timeout("the migration".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A stand-in for QEMU's QMP server (a real QEMU is started in the VM tests): greets,
    /// accepts capabilities, sends an event before one reply, refuses one command.
    async fn fake_qemu(path: &Path) {
        let listener = UnixListener::bind(path).unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut lines = BufReader::new(r).lines();
            w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n")
                .await
                .unwrap();
            while let Ok(Some(l)) = lines.next_line().await {
                let v: Value = serde_json::from_str(&l).unwrap();
                let reply = match v["execute"].as_str().unwrap() {
                    "qmp_capabilities" => "{\"return\": {}}\n".to_owned(),
                    "query-status" => "{\"event\": \"RESUME\", \"data\": {}}\n{\"return\": {\"status\": \"running\"}}\n".to_owned(),
                    "query-migrate" => "{\"return\": {\"status\": \"completed\"}}\n".to_owned(),
                    _ => "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope has not been found\"}}\n".to_owned(),
                };
                w.write_all(reply.as_bytes()).await.unwrap();
            }
        });
    }

    #[tokio::test]
    async fn commands_get_their_replies_and_events_are_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        fake_qemu(&path).await;
        let mut q = Qmp::connect(&path).await.unwrap();
        let st = q.execute("query-status", json!({})).await.unwrap();
        assert_eq!(st["status"], "running");
        assert_eq!(q.events.len(), 1);
        q.wait_migration(Duration::from_secs(1)).await.unwrap();
        let e = q.execute("nope", json!({})).await.unwrap_err().to_string();
        assert!(e.contains("QEMU refused nope: CommandNotFound"), "{e}");
    }

    #[tokio::test]
    async fn a_missing_socket_is_named() {
        let e = Qmp::connect(Path::new("/nonexistent/qmp.sock"))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/qmp.sock"), "{e}");
    }
}

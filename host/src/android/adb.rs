//! The adb server's protocol, spoken directly (as QMP is): the server that `adb
//! start-server` runs on the host (TCP 127.0.0.1:5037, or `ADB_SERVER_SOCKET` /
//! `ANDROID_ADB_SERVER_PORT`) relays to devices over USB or Wi-Fi. A request is four hex
//! digits of length and the text (`host:devices-l`); the server answers `OKAY` or `FAIL`
//! and a length-prefixed message. After `host:transport:SERIAL` the connection belongs to
//! that device: `shell,v2,raw:CMD` streams packets (id, length, data) ending with the exit
//! status, and `sync:` moves files (`SEND path,mode`, `DATA`, `DONE mtime`).

use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// What went wrong talking to the adb server or a device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdbError {
    /// Nothing answers where the server should be.
    #[error(
        "no adb server at {addr} ({source}): install adb (apt install adb) and run `adb start-server`, or set ADB_SERVER_SOCKET"
    )]
    NoServer {
        /// Where it was looked for.
        addr: String,
        /// Why it could not be reached.
        #[source]
        source: std::io::Error,
    },
    /// The server refused a request (an unknown serial, an offline device).
    #[error("adb refused {request}: {message}")]
    Refused {
        /// The request.
        request: String,
        /// What the server said.
        message: String,
    },
    /// The connection broke or said something that is not adb.
    #[error("adb {request}: {message}")]
    Protocol {
        /// The request.
        request: String,
        /// What went wrong.
        message: String,
    },
    /// No answer in time.
    #[error("adb {0}: no answer in time")]
    Timeout(String),
}

/// A device as `host:devices-l` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// Its serial (`emulator-5554`, `R58M12345`, `192.168.1.7:5555`).
    pub serial: String,
    /// `device`, `offline`, `unauthorized`, ...
    pub state: String,
    /// `product:`, `model:`, `device:`, `transport_id:` and the like.
    pub details: Vec<(String, String)>,
}

impl Device {
    /// A detail by key (`model`).
    pub fn detail(&self, key: &str) -> Option<&str> {
        self.details
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What a shell command printed and how it ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShellOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Exit status.
    pub status: u8,
}

impl ShellOutput {
    /// Standard output as text, trimmed.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_owned()
    }
}

/// Where the adb server listens: `ADB_SERVER_SOCKET=tcp:HOST:PORT`, else
/// `ANDROID_ADB_SERVER_PORT`, else 127.0.0.1:5037.
pub fn server_addr() -> String {
    if let Ok(s) = std::env::var("ADB_SERVER_SOCKET")
        && let Some(addr) = s.strip_prefix("tcp:")
    {
        return addr.to_owned();
    }
    let port = std::env::var("ANDROID_ADB_SERVER_PORT")
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .unwrap_or(5037);
    format!("127.0.0.1:{port}")
}

/// How long one request may take (a push of a few MiB over USB included).
const TIMEOUT: Duration = Duration::from_secs(60);

/// The adb server.
#[derive(Debug, Clone)]
pub struct Adb {
    addr: String,
    /// Start it with `adb start-server` when nothing answers (the server adb itself
    /// would use, not one named by `ADB_SERVER_SOCKET`).
    may_start: bool,
}

impl Default for Adb {
    fn default() -> Self {
        Self {
            addr: server_addr(),
            may_start: std::env::var_os("ADB_SERVER_SOCKET").is_none(),
        }
    }
}

/// One connection to the server.
struct Conn {
    stream: TcpStream,
    request: String,
}

impl Conn {
    fn protocol(&self, message: impl Into<String>) -> AdbError {
        AdbError::Protocol {
            request: self.request.clone(),
            message: message.into(),
        }
    }

    async fn send(&mut self, request: &str) -> Result<(), AdbError> {
        self.request = request.chars().take(120).collect();
        if request.len() > 0xffff {
            return Err(self.protocol("the request is too long"));
        }
        let msg = format!("{:04x}{request}", request.len());
        self.stream
            .write_all(msg.as_bytes())
            .await
            .map_err(|e| self.protocol(e.to_string()))
    }

    async fn exact(&mut self, n: usize) -> Result<Vec<u8>, AdbError> {
        let mut buf = vec![0u8; n];
        self.stream
            .read_exact(&mut buf)
            .await
            .map_err(|e| self.protocol(format!("the server closed the connection ({e})")))?;
        Ok(buf)
    }

    /// A 4-hex-digit length and that many bytes.
    async fn counted(&mut self) -> Result<Vec<u8>, AdbError> {
        let len = self.exact(4).await?;
        let len = std::str::from_utf8(&len)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| self.protocol(format!("a bad length {len:?}")))?;
        self.exact(len).await
    }

    /// `OKAY`, or the server's `FAIL` message as an error.
    async fn status(&mut self) -> Result<(), AdbError> {
        match &self.exact(4).await?[..] {
            b"OKAY" => Ok(()),
            b"FAIL" => {
                let message = String::from_utf8_lossy(&self.counted().await?).into_owned();
                Err(AdbError::Refused {
                    request: self.request.clone(),
                    message,
                })
            }
            other => Err(self.protocol(format!("expected OKAY or FAIL, got {other:?}"))),
        }
    }

    async fn rest(&mut self) -> Result<Vec<u8>, AdbError> {
        let mut out = Vec::new();
        self.stream
            .read_to_end(&mut out)
            .await
            .map_err(|e| self.protocol(e.to_string()))?;
        Ok(out)
    }
}

impl Adb {
    /// The server at `addr` (`HOST:PORT`).
    pub fn at(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            may_start: false,
        }
    }

    /// Where it is.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn dial(&self) -> Result<TcpStream, AdbError> {
        tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&self.addr))
            .await
            .map_err(|_| AdbError::Timeout(format!("connecting to {}", self.addr)))?
            .map_err(|source| AdbError::NoServer {
                addr: self.addr.clone(),
                source,
            })
    }

    async fn connect(&self) -> Result<Conn, AdbError> {
        let stream = match self.dial().await {
            Err(AdbError::NoServer { source, .. })
                if self.may_start && source.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                // As adb does: start the server (it reads ANDROID_ADB_SERVER_PORT too).
                tracing::info!("no adb server at {}: running `adb start-server`", self.addr);
                match tokio::process::Command::new("adb")
                    .arg("start-server")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .await
                {
                    Ok(status) if status.success() => self.dial().await?,
                    _ => {
                        return Err(AdbError::NoServer {
                            addr: self.addr.clone(),
                            source,
                        });
                    }
                }
            }
            other => other?,
        };
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            request: String::new(),
        })
    }

    /// A `host:` request answered with one counted message.
    async fn host(&self, request: &str) -> Result<Vec<u8>, AdbError> {
        let run = async {
            let mut c = self.connect().await?;
            c.send(request).await?;
            c.status().await?;
            c.counted().await
        };
        tokio::time::timeout(TIMEOUT, run)
            .await
            .map_err(|_| AdbError::Timeout(request.into()))?
    }

    /// A connection switched to the device `serial`.
    async fn device(&self, serial: &str) -> Result<Conn, AdbError> {
        let mut c = self.connect().await?;
        c.send(&format!("host:transport:{serial}")).await?;
        c.status().await?;
        Ok(c)
    }

    /// The server's protocol version.
    pub async fn version(&self) -> Result<u32, AdbError> {
        let v = self.host("host:version").await?;
        let text = String::from_utf8_lossy(&v);
        u32::from_str_radix(text.trim(), 16).map_err(|_| AdbError::Protocol {
            request: "host:version".into(),
            message: format!("not a version: {text}"),
        })
    }

    /// The devices the server sees.
    pub async fn devices(&self) -> Result<Vec<Device>, AdbError> {
        let text = String::from_utf8_lossy(&self.host("host:devices-l").await?).into_owned();
        Ok(parse_devices(&text))
    }

    /// Runs `command` in the device's shell (shell protocol v2: stdout, stderr and the
    /// exit status apart).
    pub async fn shell(&self, serial: &str, command: &str) -> Result<ShellOutput, AdbError> {
        let run = async {
            let mut c = self.device(serial).await?;
            c.send(&format!("shell,v2,raw:{command}")).await?;
            c.status().await?;
            let mut out = ShellOutput::default();
            loop {
                let head = match c.exact(5).await {
                    Ok(h) => h,
                    // Servers that end the stream without an exit packet: done.
                    Err(_) => return Ok(out),
                };
                let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
                if len > 64 << 20 {
                    return Err(c.protocol(format!("a shell packet of {len} bytes")));
                }
                let data = c.exact(len).await?;
                match head[0] {
                    1 => out.stdout.extend_from_slice(&data),
                    2 => out.stderr.extend_from_slice(&data),
                    3 => {
                        out.status = data.first().copied().unwrap_or(0);
                        return Ok(out);
                    }
                    _ => {}
                }
            }
        };
        tokio::time::timeout(TIMEOUT, run)
            .await
            .map_err(|_| AdbError::Timeout(format!("shell {command}")))?
    }

    /// A system property (`getprop NAME`).
    pub async fn getprop(&self, serial: &str, name: &str) -> Result<String, AdbError> {
        Ok(self.shell(serial, &format!("getprop {name}")).await?.text())
    }

    /// Copies `bytes` to `path` on the device with permission bits `mode`.
    pub async fn push(
        &self,
        serial: &str,
        bytes: &[u8],
        path: &str,
        mode: u32,
    ) -> Result<(), AdbError> {
        let run = async {
            let mut c = self.device(serial).await?;
            c.send("sync:").await?;
            c.status().await?;
            let target = format!("{path},{}", mode | 0o100_000);
            let mut msg = Vec::with_capacity(bytes.len() + 64);
            msg.extend_from_slice(b"SEND");
            msg.extend_from_slice(&(target.len() as u32).to_le_bytes());
            msg.extend_from_slice(target.as_bytes());
            for chunk in bytes.chunks(64 * 1024) {
                msg.extend_from_slice(b"DATA");
                msg.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
                msg.extend_from_slice(chunk);
            }
            let mtime = crate::clock::unix_secs() as u32;
            msg.extend_from_slice(b"DONE");
            msg.extend_from_slice(&mtime.to_le_bytes());
            c.stream
                .write_all(&msg)
                .await
                .map_err(|e| c.protocol(e.to_string()))?;
            let head = c.exact(8).await?;
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
            match &head[..4] {
                b"OKAY" => Ok(()),
                b"FAIL" => {
                    let message =
                        String::from_utf8_lossy(&c.exact(len.min(4096)).await?).into_owned();
                    Err(AdbError::Refused {
                        request: format!("push {path}"),
                        message,
                    })
                }
                other => Err(c.protocol(format!("expected OKAY or FAIL, got {other:?}"))),
            }
        };
        tokio::time::timeout(TIMEOUT, run)
            .await
            .map_err(|_| AdbError::Timeout(format!("push {path}")))?
    }

    /// Forwards a TCP port of the host's loopback to `remote` on the device; `local` 0
    /// lets the server pick. Returns the host port.
    pub async fn forward(&self, serial: &str, local: u16, remote: u16) -> Result<u16, AdbError> {
        let request = format!("host-serial:{serial}:forward:tcp:{local};tcp:{remote}");
        let run = async {
            let mut c = self.connect().await?;
            c.send(&request).await?;
            // One OKAY for the server, one for the forward.
            c.status().await?;
            c.status().await?;
            if local != 0 {
                return Ok(local);
            }
            let port = c.counted().await?;
            String::from_utf8_lossy(&port)
                .trim()
                .parse()
                .map_err(|_| c.protocol(format!("not a port: {port:?}")))
        };
        tokio::time::timeout(TIMEOUT, run)
            .await
            .map_err(|_| AdbError::Timeout(request.clone()))?
    }

    /// Removes a forward made by [`Adb::forward`].
    pub async fn remove_forward(&self, serial: &str, local: u16) -> Result<(), AdbError> {
        let request = format!("host-serial:{serial}:killforward:tcp:{local}");
        let mut c = self.connect().await?;
        c.send(&request).await?;
        c.status().await?;
        let _ = c.status().await;
        let _ = c.rest().await;
        Ok(())
    }
}

/// Parses `host:devices-l` output.
pub fn parse_devices(text: &str) -> Vec<Device> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let serial = words.next()?.to_owned();
            let state = words.next()?.to_owned();
            let details = words
                .filter_map(|w| {
                    let (k, v) = w.split_once(':')?;
                    Some((k.to_owned(), v.to_owned()))
                })
                .collect();
            Some(Device {
                serial,
                state,
                details,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists_are_parsed_with_their_details() {
        let text = "emulator-5554          device product:sdk_gphone64_arm64 model:sdk_gphone64_arm64 device:emu64a transport_id:1\nR58M123   unauthorized usb:1-1 transport_id:2\n\n";
        let d = parse_devices(text);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].serial, "emulator-5554");
        assert_eq!(d[0].state, "device");
        assert_eq!(d[0].detail("model"), Some("sdk_gphone64_arm64"));
        assert_eq!(d[1].state, "unauthorized");
        assert_eq!(d[1].detail("model"), None);
    }

    #[tokio::test]
    async fn no_server_says_what_to_do() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = Adb::at(format!("127.0.0.1:{port}"))
            .devices()
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("apt install adb") && e.contains("adb start-server"),
            "{e}"
        );
    }
}

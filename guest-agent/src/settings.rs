//! GSettings values, read for the settings probe (`Probe::Setting`) by running
//! `gsettings get`: the desktop's own tool knows every schema, backend and relocatable path,
//! and a read is rare enough that a program per read costs nothing that matters.

use pincer_guest_core::exec;
use pincer_guest_core::platform::Settings;
use pincer_shared::WireError;
use pincer_shared::setup::ExecRequest;

/// The desktop's GSettings.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Gsettings;

impl Settings for Gsettings {
    /// `gsettings get SCHEMA KEY`: the value as printed, or `None` for an unknown schema or
    /// key.
    async fn get(&self, schema: &str, key: &str) -> Result<Option<String>, WireError> {
        if !settings_name(schema) || !settings_name(key) {
            return Err(WireError::InvalidArgument {
                message: format!(
                    "'{schema}' '{key}' is not a GSettings schema and key (letters, digits, '.', '-', '_')"
                ),
            });
        }
        let mut req = ExecRequest::new(["gsettings", "get", schema, key]);
        req.timeout_ms = 10_000;
        req.max_output = 64 * 1024;
        let out = exec::run(&req).await?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            Ok(Some(
                String::from_utf8_lossy(&out.stdout).trim_end().to_owned(),
            ))
        } else if stderr.contains("No such schema") || stderr.contains("No such key") {
            Ok(None)
        } else {
            Err(WireError::Io {
                message: format!(
                    "gsettings get {schema} {key}: {} ({})",
                    stderr.trim(),
                    out.status
                ),
            })
        }
    }
}

/// Whether a GSettings schema or key name is plain enough to pass to `gsettings`
/// (letters, digits, '.', '-', '_', and '/' for relocatable paths).
fn settings_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 256
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | ':'))
}

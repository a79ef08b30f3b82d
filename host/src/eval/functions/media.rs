//! Pictures and the desktop: mean brightness of two image files compared (decoded on the
//! host, pure Rust), and the GNOME desktop wallpaper.

use super::{ANY, LINUX, Library, Reads, clip};
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use crate::picture::{self, PictureError};
use pincer_shared::WireError;
use pincer_shared::limits::MAX_INLINE_FILE;
use pincer_shared::probe::{FileKind, Probe, ProbeReply};
use schemars::JsonSchema;
use serde::Deserialize;

/// CRAB's brightness of an image: the mean over pixels of the Euclidean norm of the
/// (R, G, B) vector divided by √3, so a grey pixel of value v counts v. Alpha is dropped
/// without compositing and 16-bit samples are scaled to 8 bits, as OpenCV's `imread` does.
pub(crate) fn brightness(bytes: &[u8]) -> Result<f64, PictureError> {
    let img = picture::decode(bytes)?;
    let n = u64::from(img.width) * u64::from(img.height);
    let sum: f64 = img
        .pixels
        .chunks_exact(3)
        .map(|p| {
            let [r, g, b] = [p[0], p[1], p[2]].map(f64::from);
            (r * r + g * g + b * b).sqrt()
        })
        .sum();
    Ok(sum / n as f64 / 3f64.sqrt())
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct BrightnessArgs {
    /// The image before the edit (PNG or JPEG).
    before: String,
    /// The image after the edit (PNG or JPEG).
    after: String,
}

/// Which way the comparison must go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// `after` strictly brighter than `before`.
    Brighter,
    /// `after` not brighter than `before` (darker or the same).
    NotBrighter,
}

/// Two images' brightness compared.
#[derive(Debug)]
struct Brightness {
    a: BrightnessArgs,
    want: Want,
}

/// The brightness of the image in a read-file reply, or the failing verdict of why there
/// is none.
fn image_brightness(r: &ProbeResult, path: &str) -> Result<Result<f64, Verdict>, EvalError> {
    Ok(match reply(r, "read file")? {
        ProbeReply::File(None) => Err(format!("image {path} does not exist")),
        ProbeReply::File(Some(f)) if f.total_size > f.bytes.len() as u64 => Err(format!(
            "image {path} is {} bytes, more than the {} MiB pincer reads for a check: it was not judged",
            f.total_size,
            MAX_INLINE_FILE / (1024 * 1024)
        )),
        ProbeReply::File(Some(f)) => brightness(&f.bytes)
            .map_err(|e| format!("file {path} is not an image pincer can decode: {e}")),
        other => return Err(unexpected("read file", other)),
    }
    .map_err(Verdict::fail))
}

impl Check for Brightness {
    fn probes(&self) -> Vec<Probe> {
        [&self.a.before, &self.a.after]
            .map(|p| Probe::ReadFile {
                path: p.clone(),
                max_len: MAX_INLINE_FILE,
            })
            .into()
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let (b, a) = (&self.a.before, &self.a.after);
        // An unreadable image fails either way: a half-written file must not count as "not
        // brighter".
        let before = match image_brightness(r[0], b)? {
            Ok(v) => v,
            Err(why) => return Ok(why),
        };
        let after = match image_brightness(r[1], a)? {
            Ok(v) => v,
            Err(why) => return Ok(why),
        };
        let seen = format!("image {a} has brightness {after:.2}, {b} has {before:.2}");
        let brighter = after > before;
        Ok(match self.want {
            Want::Brighter => Verdict::when(
                brighter,
                format!("{seen}: brighter"),
                format!("{seen}, expected {a} to be brighter"),
            ),
            Want::NotBrighter => Verdict::when(
                !brighter,
                format!("{seen}: not brighter"),
                format!("{seen}, expected {a} to be darker or the same"),
            ),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WallpaperArgs {
    /// The picture that must be the wallpaper (`~` is the environment user's home).
    path: String,
}

/// GSettings schema and key of the GNOME wallpaper (the light-style one, as CRAB reads).
const BACKGROUND: (&str, &str) = ("org.gnome.desktop.background", "picture-uri");

/// Prints `photo <sha256>` and `wallpaper <sha256>` (or `missing`) for the picture given
/// as `$1` and the file the wallpaper URI names. `gio` (GLib's tool, shipped with
/// `gsettings`) resolves the URI, percent-encoding included.
const HASH_SCRIPT: &str = r#"cd "$HOME" 2>/dev/null
p=$1
case $p in "~/"*) p=$HOME/${p#"~/"} ;; "~") p=$HOME ;; esac
if [ -f "$p" ]; then echo "photo $(sha256sum < "$p" | cut -c1-64)"; else echo "photo missing"; fi
u=$(gsettings get org.gnome.desktop.background picture-uri) || exit 0
u=${u#\'}; u=${u%\'}
if [ -n "$u" ] && gio info -- "$u" >/dev/null 2>&1; then
  echo "wallpaper $(gio cat -- "$u" | sha256sum | cut -c1-64)"
else
  echo "wallpaper missing"
fi"#;

/// The desktop wallpaper is a picture: the wallpaper URI names it, or names a file with
/// the same bytes (GNOME's wallpaper portal copies the picture to
/// `~/.local/share/backgrounds`).
#[derive(Debug)]
struct Wallpaper {
    path: String,
}

/// The local path a `file://` URI names (percent-decoded), if it is one.
fn file_uri_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    // `file://host/path` names a host; only the local forms are paths here.
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(v) = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// `path` with `~` and a relative start resolved against `home`, and `.`/`..`-free
/// duplicate slashes removed, for comparing with a URI's path.
fn absolute(path: &str, home: Option<&str>) -> String {
    let joined = match (path.strip_prefix('~'), home) {
        (Some(rest), Some(h)) if rest.is_empty() || rest.starts_with('/') => format!("{h}{rest}"),
        _ if !path.starts_with('/') && home.is_some() => {
            format!("{}/{path}", home.unwrap_or_default())
        }
        _ => path.to_owned(),
    };
    let mut out = String::with_capacity(joined.len());
    for part in joined.split('/').filter(|p| !p.is_empty() && *p != ".") {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() { "/".into() } else { out }
}

/// The `photo` and `wallpaper` hashes from [`HASH_SCRIPT`]'s output.
fn hashes(stdout: &str) -> (Option<&str>, Option<&str>) {
    let get = |key: &str| {
        stdout.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
        })
    };
    (get("photo"), get("wallpaper"))
}

impl Check for Wallpaper {
    fn probes(&self) -> Vec<Probe> {
        vec![
            Probe::Setting {
                schema: BACKGROUND.0.into(),
                key: BACKGROUND.1.into(),
            },
            Probe::EnvVar {
                name: "HOME".into(),
            },
            Probe::Stat {
                path: self.path.clone(),
            },
            Probe::Command {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    HASH_SCRIPT.into(),
                    "sh".into(),
                    self.path.clone(),
                ],
                timeout_ms: 20_000,
                max_output: 4096,
            },
        ]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.path;
        let uri = match reply(r[0], "gsettings")? {
            ProbeReply::Setting(Some(v)) => v.trim().trim_matches('\'').to_owned(),
            ProbeReply::Setting(None) => {
                return Ok(Verdict::fail(format!(
                    "setting {} {} does not exist (no GNOME schemas installed)",
                    BACKGROUND.0, BACKGROUND.1
                )));
            }
            other => return Err(unexpected("gsettings", other)),
        };
        let home = match reply(r[1], "env var")? {
            ProbeReply::EnvVar(h) => h.clone(),
            other => return Err(unexpected("env var", other)),
        };
        match reply(r[2], "stat")? {
            ProbeReply::Stat(s) if s.exists && s.kind == Some(FileKind::File) => {}
            ProbeReply::Stat(_) => {
                return Ok(Verdict::fail(format!("image {p} does not exist")));
            }
            other => return Err(unexpected("stat", other)),
        }
        if uri.is_empty() {
            return Ok(Verdict::fail(format!("no wallpaper is set, expected {p}")));
        }
        let Some(wall) = file_uri_path(&uri) else {
            return Ok(Verdict::fail(format!(
                "the wallpaper is '{}', not a local file, expected {p}",
                clip(&uri, 80)
            )));
        };
        let want = absolute(p, home.as_deref());
        if absolute(&wall, None) == want {
            return Ok(Verdict::pass(format!("the wallpaper is {p} ({uri})")));
        }
        // Different paths: the wallpaper may be a copy of the picture.
        let out = match r[3] {
            Ok(ProbeReply::Command(o)) => o,
            Ok(other) => return Err(unexpected("command", other)),
            Err(e @ (WireError::Forbidden { .. } | WireError::Unsupported { .. })) => {
                return Ok(Verdict::fail(format!(
                    "the wallpaper is {wall}, not {p}; its content could not be compared ({e})"
                )));
            }
            Err(e) => {
                return Err(EvalError::Probe {
                    probe: "wallpaper hash command".into(),
                    error: e.clone(),
                });
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        Ok(match hashes(&stdout) {
            (Some(a), Some(b)) if a == b => Verdict::pass(format!(
                "the wallpaper {wall} is a byte-identical copy of {p}"
            )),
            (_, None) => Verdict::fail(format!(
                "the wallpaper is {wall}, which is not {p} and cannot be read"
            )),
            _ => Verdict::fail(format!(
                "the wallpaper is {wall}, a different picture from {p}"
            )),
        })
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "image_brighter",
        "The `after` image is brighter than the `before` image (mean RGB norm, as CRAB measures; PNG or JPEG).",
        Reads::Env(ANY),
        r#"{"before": "~/Pictures/cat.png", "after": "~/Pictures/cat_bright.png"}"#,
        |a: BrightnessArgs, _| {
            Ok(Brightness {
                a,
                want: Want::Brighter,
            })
        },
    );
    lib.add(
        "image_not_brighter",
        "The `after` image is darker than or as bright as the `before` image; fails while either cannot be decoded.",
        Reads::Env(ANY),
        r#"{"before": "~/Pictures/cat.png", "after": "~/Pictures/cat_dark.png"}"#,
        |a: BrightnessArgs, _| {
            Ok(Brightness {
                a,
                want: Want::NotBrighter,
            })
        },
    );
    lib.add(
        "wallpaper_is",
        "The GNOME desktop wallpaper (org.gnome.desktop.background picture-uri) is the picture, or a byte-identical copy of it.",
        Reads::Env(LINUX),
        r#"{"path": "~/Pictures/beach.jpg"}"#,
        |a: WallpaperArgs, _| {
            if a.path.trim().is_empty() {
                return Err("`path` is empty".into());
            }
            Ok(Wallpaper { path: a.path })
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::picture::png_rgba as png;

    #[test]
    fn brightness_is_the_mean_rgb_norm_over_root_three() {
        assert!(
            (brightness(&png(4, 4, |_, _| [100, 100, 100, 255])).unwrap() - 100.0).abs() < 1e-9
        );
        // Pure red 255: |(255,0,0)| / √3.
        let red = brightness(&png(2, 2, |_, _| [255, 0, 0, 255])).unwrap();
        assert!((red - 255.0 / 3f64.sqrt()).abs() < 1e-9, "{red}");
        // Half black, half white.
        let half = brightness(&png(2, 2, |x, _| if x == 0 { [0; 4] } else { [255; 4] })).unwrap();
        assert!((half - 127.5).abs() < 1e-9, "{half}");
        // Alpha is dropped, not composited.
        let clear = brightness(&png(2, 2, |_, _| [200, 200, 200, 0])).unwrap();
        assert!((clear - 200.0).abs() < 1e-9, "{clear}");
    }

    #[test]
    fn jpeg_decodes_and_junk_is_refused() {
        let b = brightness(&picture::jpeg_grey(16, 16, 180)).unwrap();
        assert!((b - 180.0).abs() < 2.0, "{b}");
        assert!(brightness(b"not an image").is_err());
        let mut cut = png(8, 8, |_, _| [1, 2, 3, 255]);
        cut.truncate(cut.len() / 2);
        assert!(brightness(&cut).is_err());
    }

    #[test]
    fn file_uris_become_paths() {
        assert_eq!(
            file_uri_path("file:///home/u/My%20Pictures/caf%C3%A9.png").as_deref(),
            Some("/home/u/My Pictures/café.png")
        );
        assert_eq!(
            file_uri_path("file://localhost/a.png").as_deref(),
            Some("/a.png")
        );
        assert_eq!(file_uri_path("file://server/a.png"), None);
        assert_eq!(file_uri_path("https://x/a.png"), None);
        assert_eq!(absolute("~/P/a.png", Some("/home/u/")), "/home/u/P/a.png");
        assert_eq!(absolute("P/./a.png", Some("/home/u")), "/home/u/P/a.png");
        assert_eq!(absolute("//home//u/a.png", None), "/home/u/a.png");
    }

    #[test]
    fn hash_lines_are_read_strictly() {
        let h = "a".repeat(64);
        let out = format!("photo {h}\nwallpaper missing\n");
        assert_eq!(hashes(&out), (Some(h.as_str()), None));
        assert_eq!(hashes("photo abc\n"), (None, None));
    }
}

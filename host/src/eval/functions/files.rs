//! Files and directories: existence, content, patterns, copies and images.

use super::{ANY, LINUX, Library, Reads, a, count, judge_text, quoted};
use crate::eval::text::TextMatch;
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use pincer_shared::WireError;
use pincer_shared::limits::MAX_INLINE_FILE;
use pincer_shared::probe::{FileContent, FileKind, Probe, ProbeReply};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    /// The path (`~` is the environment user's home).
    path: String,
}

/// Existence of a path of a kind, following a symbolic link (the guest's stat says what a
/// link resolves to).
#[derive(Debug)]
struct Exists {
    path: String,
    kind: FileKind,
}

impl Exists {
    fn what(&self) -> &'static str {
        if self.kind == FileKind::Dir {
            "directory"
        } else {
            "file"
        }
    }
}

impl Check for Exists {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Stat {
            path: self.path.clone(),
        }]
    }

    fn passes(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<bool, EvalError> {
        let s = match reply(r[0], "stat")? {
            ProbeReply::Stat(s) => s,
            other => return Err(unexpected("stat", other)),
        };
        Ok(s.exists
            && match s.kind {
                Some(FileKind::Symlink) => s.target == Some(self.kind),
                k => k == Some(self.kind),
            })
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let (p, what) = (&self.path, self.what());
        let s = match reply(r[0], "stat")? {
            ProbeReply::Stat(s) => s,
            other => return Err(unexpected("stat", other)),
        };
        Ok(match (s.exists, s.kind, s.target) {
            (false, _, _) => Verdict::fail(format!("{what} {p} does not exist")),
            (true, Some(FileKind::Symlink), None) => {
                Verdict::fail(format!("{p} is a dangling symbolic link, not {}", a(what)))
            }
            (true, Some(FileKind::Symlink), Some(t)) => Verdict::when(
                t == self.kind,
                format!("{what} {p} exists (a symbolic link to {})", a(what)),
                format!(
                    "{p} is a symbolic link to {}, not {}",
                    a(kind_name(t)),
                    a(what)
                ),
            ),
            // A directory's size says nothing about it.
            (true, Some(FileKind::Dir), _) if self.kind == FileKind::Dir => {
                Verdict::pass(format!("directory {p} exists"))
            }
            (true, Some(k), _) if k == self.kind => {
                Verdict::pass(format!("{what} {p} exists ({})", count(s.size, "byte")))
            }
            (true, Some(k), _) => Verdict::fail(format!(
                "{p} exists but is {}, not {}",
                a(kind_name(k)),
                a(what)
            )),
            (true, None, _) => Verdict::fail(format!(
                "{p} exists but the guest cannot tell what it is, expected {}",
                a(what)
            )),
        })
    }
}

/// What a kind of file is called in feedback.
fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Other => "special file (device, FIFO or socket)",
    }
}

/// The probes that read a file's content: its stat first, so that a directory (or a
/// device) where the file should be is judged as the agent's doing instead of failing the
/// read, which the guest refuses for anything but a file.
fn read_probes(path: &str, max_len: u64) -> Vec<Probe> {
    vec![
        Probe::Stat { path: path.into() },
        Probe::ReadFile {
            path: path.into(),
            max_len,
        },
    ]
}

/// The content read by [`read_probes`], or the failing verdict of what was there instead
/// (`what`: "file", "image").
fn read<'a>(
    path: &str,
    r: &[&'a ProbeResult],
    what: &str,
) -> Result<Result<&'a FileContent, Verdict>, EvalError> {
    let s = match reply(r[0], "stat")? {
        ProbeReply::Stat(s) => s,
        other => return Err(unexpected("stat", other)),
    };
    let instead = |seen: &str| {
        Ok(Err(Verdict::fail(format!(
            "{path} is {seen}, not {}",
            a(what)
        ))))
    };
    match (s.kind, s.target) {
        (None, _) => return Ok(Err(Verdict::fail(format!("{what} {path} does not exist")))),
        (Some(FileKind::Dir), _) => return instead("a directory"),
        (Some(FileKind::Other), _) => return instead("a special file"),
        (Some(FileKind::Symlink), None) => return instead("a dangling symbolic link"),
        (Some(FileKind::Symlink), Some(FileKind::Dir)) => {
            return instead("a symbolic link to a directory");
        }
        (Some(FileKind::Symlink), Some(FileKind::Other)) => {
            return instead("a symbolic link to a special file");
        }
        // A symlink to a file is read through.
        (Some(FileKind::File | FileKind::Symlink), _) => {}
    }
    if s.kind == Some(FileKind::Symlink) && matches!(r[1], Err(WireError::InvalidArgument { .. })) {
        // The link was pointed at a directory between the stat and the read, which the
        // guest refuses to read as a file.
        return instead("a symbolic link to a directory");
    }
    match reply(r[1], "read file")? {
        ProbeReply::File(Some(f)) => Ok(Ok(f)),
        // Gone (or a dangling link) between the stat and the read.
        ProbeReply::File(None) => Ok(Err(Verdict::fail(format!("{what} {path} does not exist")))),
        other => Err(unexpected("read file", other)),
    }
}

/// The failing verdict for a file larger than a check reads: judging the part that was read
/// could pass a file whose text differs further on.
fn too_large(what: &str, path: &str, size: u64) -> Verdict {
    Verdict::fail(format!(
        "{what} {path} is {size} bytes, more than the {} MiB pincer reads for a check: it was not judged",
        MAX_INLINE_FILE / (1024 * 1024)
    ))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TextArgs {
    /// The file.
    path: String,
    /// How its whole text is compared.
    text: TextMatch,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ContainsArgs {
    /// The file.
    path: String,
    /// Text it must contain.
    text: String,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EqualsArgs {
    /// The file.
    path: String,
    /// Its whole expected content.
    content: String,
    /// Ignore leading and trailing whitespace (default true: editors add final newlines).
    #[serde(default = "yes")]
    trim: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MatchesArgs {
    /// The file.
    path: String,
    /// A regular expression (Rust syntax) that must match somewhere in it (`$` also matches
    /// before the final newline).
    regex: String,
}

/// A test on a file's content.
#[derive(Debug)]
struct FileText {
    path: String,
    test: TextMatch,
}

impl Check for FileText {
    fn probes(&self) -> Vec<Probe> {
        read_probes(&self.path, MAX_INLINE_FILE)
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let f = match read(&self.path, r, "file")? {
            Ok(f) => f,
            Err(seen) => return Ok(seen),
        };
        if f.total_size > f.bytes.len() as u64 {
            return Ok(too_large("file", &self.path, f.total_size));
        }
        let text = String::from_utf8_lossy(&f.bytes);
        Ok(judge_text(
            &format!("file {}", self.path),
            &text,
            &self.test,
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CopiedArgs {
    /// Directory the files come from.
    pub(super) source_dir: String,
    /// Directory they must be copied to.
    pub(super) target_dir: String,
    /// File extension without the dot ("ods").
    pub(super) extension: String,
}

/// Every file of an extension in one directory also in another, with the same size.
#[derive(Debug)]
struct Copied {
    source: String,
    target: String,
    ext: String,
}

impl Check for Copied {
    fn probes(&self) -> Vec<Probe> {
        vec![
            Probe::ListDir {
                path: self.source.clone(),
            },
            Probe::ListDir {
                path: self.target.clone(),
            },
        ]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let list = |i: usize| match reply(r[i], "list dir")? {
            ProbeReply::Dir(d) => Ok(d.clone()),
            other => Err(unexpected("list dir", other)),
        };
        let suffix = format!(".{}", self.ext.to_lowercase());
        let (src, dst) = (&self.source, &self.target);
        let Some(src_entries) = list(0)? else {
            return Ok(Verdict::fail(format!(
                "source directory {src} does not exist"
            )));
        };
        let Some(dst_entries) = list(1)? else {
            return Ok(Verdict::fail(format!(
                "target directory {dst} does not exist"
            )));
        };
        let wanted: Vec<_> = src_entries
            .iter()
            .filter(|e| e.kind == FileKind::File && e.name.to_lowercase().ends_with(&suffix))
            .collect();
        if wanted.is_empty() {
            return Ok(Verdict::fail(format!(
                "directory {src} holds no {suffix} files to copy"
            )));
        }
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|w| {
                !dst_entries
                    .iter()
                    .any(|d| d.name == w.name && d.size == w.size && d.kind == FileKind::File)
            })
            .map(|w| w.name.as_str())
            .collect();
        let (n, there) = (wanted.len(), wanted.len() - missing.len());
        Ok(if missing.is_empty() {
            Verdict::pass(match n {
                1 => format!("the only {suffix} file of {src} is in {dst}"),
                _ => format!("all {n} {suffix} files of {src} are in {dst}"),
            })
        } else {
            Verdict::fail(format!(
                "{there} of {n} {suffix} files of {src} {} in {dst}; missing or of another size: {}",
                if there == 1 { "is" } else { "are" },
                quoted(missing, 100)
            ))
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListingArgs {
    /// The directory.
    path: String,
    /// Every entry it must hold, and no other (file and directory names, not paths).
    names: Vec<String>,
    /// Leave out entries whose names start with a dot (default true: apps leave lock and
    /// backup files such as `.~lock.report.ods#`).
    #[serde(default = "yes")]
    ignore_hidden: bool,
}

/// A directory that holds exactly these entries.
#[derive(Debug)]
struct Listing {
    a: ListingArgs,
}

impl Check for Listing {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::ListDir {
            path: self.a.path.clone(),
        }]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let entries = match reply(r[0], "list dir")? {
            ProbeReply::Dir(Some(d)) => d,
            ProbeReply::Dir(None) => {
                return Ok(Verdict::fail(format!(
                    "directory {} does not exist",
                    self.a.path
                )));
            }
            other => return Err(unexpected("list dir", other)),
        };
        let there: std::collections::BTreeSet<&str> = entries
            .iter()
            .map(|e| e.name.as_str())
            .filter(|n| !(self.a.ignore_hidden && n.starts_with('.')))
            .collect();
        let wanted: std::collections::BTreeSet<&str> =
            self.a.names.iter().map(String::as_str).collect();
        let missing: Vec<&str> = wanted.difference(&there).copied().collect();
        let extra: Vec<&str> = there.difference(&wanted).copied().collect();
        let mut wrong = Vec::new();
        if !missing.is_empty() {
            wrong.push(format!("missing {}", quoted(missing, 120)));
        }
        if !extra.is_empty() {
            wrong.push(format!("also holds {}", quoted(extra, 120)));
        }
        let exactly = if self.a.names.is_empty() {
            "nothing".to_owned()
        } else {
            format!(
                "exactly {}",
                quoted(self.a.names.iter().map(String::as_str), 120)
            )
        };
        let p = &self.a.path;
        Ok(Verdict::when(
            wrong.is_empty(),
            format!("directory {p} holds {exactly}"),
            format!("directory {p} should hold {exactly}: {}", wrong.join("; ")),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SameArgs {
    /// The original.
    path: String,
    /// The file that must have the same bytes.
    copy: String,
}

/// Two files with the same bytes.
#[derive(Debug)]
struct Same {
    a: SameArgs,
}

impl Check for Same {
    fn probes(&self) -> Vec<Probe> {
        let mut p = read_probes(&self.a.path, MAX_INLINE_FILE);
        p.extend(read_probes(&self.a.copy, MAX_INLINE_FILE));
        p
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let original = match read(&self.a.path, &r[..2], "file")? {
            Ok(f) => f,
            Err(v) => return Ok(v),
        };
        let copy = match read(&self.a.copy, &r[2..], "file")? {
            Ok(f) => f,
            Err(v) => return Ok(v),
        };
        let (path, copy_path) = (&self.a.path, &self.a.copy);
        let partial = |f: &FileContent| f.total_size > f.bytes.len() as u64;
        match (partial(original), partial(copy)) {
            (true, true) => {
                return Ok(Verdict::fail(format!(
                    "files {path} ({} bytes) and {copy_path} ({} bytes) are larger than the {} MiB pincer reads for a check: they were not judged",
                    original.total_size,
                    copy.total_size,
                    MAX_INLINE_FILE / (1024 * 1024)
                )));
            }
            (true, false) => return Ok(too_large("file", path, original.total_size)),
            (false, true) => return Ok(too_large("file", copy_path, copy.total_size)),
            (false, false) => {}
        }
        let (n, m) = (copy.bytes.len() as u64, original.bytes.len() as u64);
        Ok(if original.bytes == copy.bytes {
            Verdict::pass(format!(
                "file {copy_path} has the same {} as {path}",
                count(n, "byte")
            ))
        } else if n == m {
            Verdict::fail(format!(
                "file {copy_path} has the same size as {path} ({}) but different content",
                count(n, "byte")
            ))
        } else {
            Verdict::fail(format!(
                "file {copy_path} has {}, {path} has {m}",
                count(n, "byte")
            ))
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ImageArgs {
    /// The image file.
    path: String,
    /// Required width in pixels.
    #[serde(default)]
    width: Option<u32>,
    /// Required height in pixels.
    #[serde(default)]
    height: Option<u32>,
    /// Required format: png, jpeg (or jpg), gif, bmp, webp, tiff, avif, heif (or heic), ...
    #[serde(default)]
    format: Option<String>,
}

/// An image file with a given size and format.
#[derive(Debug)]
struct Image {
    a: ImageArgs,
}

/// Bytes of the header read to tell an image's format and size.
const IMAGE_HEADER: u64 = 512 * 1024;

impl Check for Image {
    fn probes(&self) -> Vec<Probe> {
        read_probes(&self.a.path, IMAGE_HEADER)
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.a.path;
        let f = match read(p, r, "image")? {
            Ok(f) => f,
            Err(seen) => return Ok(seen),
        };
        let (Ok(size), Ok(kind)) = (
            imagesize::blob_size(&f.bytes),
            imagesize::image_type(&f.bytes),
        ) else {
            return Ok(Verdict::fail(format!(
                "file {p} is not an image pincer can read"
            )));
        };
        let format = format_name(kind);
        let seen = format!("image {p} is {}x{} {format}", size.width, size.height);
        let (width, height) = (self.a.width, self.a.height);
        let ok = width.is_none_or(|w| w as usize == size.width)
            && height.is_none_or(|h| h as usize == size.height)
            && self.a.format.as_deref().is_none_or(|f| f == format);
        if ok {
            return Ok(Verdict::pass(seen));
        }
        // Only what was asked for: a width alone does not make "1024x*".
        let dims = match (width, height) {
            (Some(w), Some(h)) => Some(format!("{w}x{h}")),
            (Some(w), None) => Some(format!("width {w}")),
            (None, Some(h)) => Some(format!("height {h}")),
            (None, None) => None,
        };
        let want = match (dims, self.a.format.as_deref()) {
            (Some(d), Some(f)) if width.is_some() && height.is_some() => format!("{d} {f}"),
            (Some(d), Some(f)) => format!("{f} of {d}"),
            (Some(d), None) => d,
            (None, f) => f.unwrap_or_default().to_owned(),
        };
        Ok(Verdict::fail(format!("{seen}, expected {want}")))
    }
}

/// The name of an image format in feedback and in `image_file`'s `format`.
fn format_name(kind: imagesize::ImageType) -> &'static str {
    use imagesize::{Compression, ImageType as T};
    match kind {
        T::Aseprite => "aseprite",
        T::Astc => "astc",
        T::Atc(_) => "atc",
        T::Bmp => "bmp",
        T::Dds(_) => "dds",
        T::Eac(_) => "eac",
        T::Etc2(_) => "etc2",
        T::Exr => "exr",
        T::Farbfeld => "farbfeld",
        T::Gif => "gif",
        T::Hdr => "hdr",
        // AVIF is HEIF with AV1 pictures; people and tools call it by its own name.
        T::Heif(Compression::Av1) => "avif",
        T::Heif(_) => "heif",
        T::Ico => "ico",
        T::Ilbm => "ilbm",
        T::Jpeg => "jpeg",
        T::Jxl => "jxl",
        T::Ktx2 => "ktx2",
        T::Png => "png",
        T::Pnm => "pnm",
        T::Psd => "psd",
        T::Pvrtc(_) => "pvrtc",
        T::Qoi => "qoi",
        T::Tga => "tga",
        T::Tiff => "tiff",
        T::Vtf => "vtf",
        T::Webp => "webp",
        // A format a newer imagesize tells apart, which no `format` names yet.
        _ => "unnamed format",
    }
}

/// A format as `image_file` takes it, with the other names of some formats mapped to the
/// ones [`format_name`] gives.
fn canonical_format(format: &str) -> String {
    let f = format.trim().trim_start_matches('.').to_lowercase();
    match f.as_str() {
        "jpg" | "jpe" => "jpeg".into(),
        "tif" => "tiff".into(),
        "heic" => "heif".into(),
        _ => f,
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "file_exists",
        "A regular file exists at the path.",
        Reads::Env(ANY),
        r#"{"path": "~/notes.txt"}"#,
        |a: PathArgs, _| {
            Ok(Exists {
                path: a.path,
                kind: FileKind::File,
            })
        },
    );
    lib.add(
        "file_absent",
        "Nothing (no file, no directory) exists at the path.",
        Reads::Env(ANY),
        r#"{"path": "~/draft.txt"}"#,
        |a: PathArgs, _| Ok(Absent { path: a.path }),
    );
    lib.add(
        "dir_exists",
        "A directory exists at the path.",
        Reads::Env(ANY),
        r#"{"path": "~/sheets"}"#,
        |a: PathArgs, _| {
            Ok(Exists {
                path: a.path,
                kind: FileKind::Dir,
            })
        },
    );
    lib.add(
        "file_text",
        "The file's whole text passes a text match (contains, equals, regex or digits).",
        Reads::Env(ANY),
        r#"{"path": "~/notes.txt", "text": {"equals": "buy milk"}}"#,
        |a: TextArgs, _| {
            Ok(FileText {
                path: a.path,
                test: a.text,
            })
        },
    );
    lib.add(
        "file_contains",
        "The file's text contains the given text (file_text with `contains`).",
        Reads::Env(ANY),
        r#"{"path": "~/notes.txt", "text": "hello"}"#,
        |a: ContainsArgs, _| {
            Ok(FileText {
                path: a.path,
                test: TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
            })
        },
    );
    lib.add(
        "file_equals",
        "The file's whole text equals the given content, trimmed by default (file_text with `equals`).",
        Reads::Env(ANY),
        r#"{"path": "~/notes.txt", "content": "hello"}"#,
        |a: EqualsArgs, _| {
            Ok(FileText {
                path: a.path,
                test: TextMatch::equals(&a.content).trimmed(a.trim),
            })
        },
    );
    lib.add(
        "file_matches",
        "A regular expression matches somewhere in the file's text (file_text with `regex`).",
        Reads::Env(ANY),
        r#"{"path": "~/notes.txt", "regex": "total: [0-9]+"}"#,
        |a: MatchesArgs, _| {
            Ok(FileText {
                path: a.path,
                test: TextMatch::regex(&a.regex, false)?,
            })
        },
    );
    lib.add(
        "files_copied",
        "Every file with the extension in the source directory is in the target directory with the same size.",
        Reads::Env(LINUX),
        r#"{"source_dir": "~/Documents", "target_dir": "~/sheets", "extension": "ods"}"#,
        |a: CopiedArgs, _| {
            Ok(Copied {
                source: a.source_dir,
                target: a.target_dir,
                ext: a.extension.trim_start_matches('.').to_owned(),
            })
        },
    );
    lib.add(
        "dir_listing",
        "The directory holds exactly these entries, no fewer and no others (hidden ones left out unless asked).",
        Reads::Env(LINUX),
        r#"{"path": "~/archive", "names": ["report.txt"]}"#,
        |a: ListingArgs, _| Ok(Listing { a }),
    );
    lib.add(
        "same_content",
        "A file has the same bytes as another (a copy, not a file of the same name or size).",
        Reads::Env(ANY),
        r#"{"path": "~/data/telescope.bin", "copy": "~/backup/telescope.bin"}"#,
        |a: SameArgs, _| Ok(Same { a }),
    );
    lib.add(
        "image_file",
        "An image file exists with the given width, height and format (each optional).",
        Reads::Env(ANY),
        r#"{"path": "~/Pictures/shot.png", "width": 800, "height": 600, "format": "png"}"#,
        |a: ImageArgs, _| {
            Ok(Image {
                a: ImageArgs {
                    format: a.format.as_deref().map(canonical_format),
                    ..a
                },
            })
        },
    );
}

/// Nothing at all exists at a path.
#[derive(Debug)]
struct Absent {
    path: String,
}

impl Check for Absent {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Stat {
            path: self.path.clone(),
        }]
    }

    fn passes(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<bool, EvalError> {
        match reply(r[0], "stat")? {
            ProbeReply::Stat(s) => Ok(!s.exists),
            other => Err(unexpected("stat", other)),
        }
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let s = match reply(r[0], "stat")? {
            ProbeReply::Stat(s) => s,
            other => return Err(unexpected("stat", other)),
        };
        let p = &self.path;
        if !s.exists {
            return Ok(Verdict::pass(format!("no file or directory exists at {p}")));
        }
        let there = match (s.kind, s.target) {
            (Some(FileKind::File), _) => format!("a file of {}", count(s.size, "byte")),
            (Some(FileKind::Symlink), None) => "a dangling symbolic link".to_owned(),
            (Some(FileKind::Symlink), Some(t)) => format!("a symbolic link to {}", a(kind_name(t))),
            (Some(k), _) => a(kind_name(k)),
            (None, _) => "something the guest cannot tell".to_owned(),
        };
        Ok(Verdict::fail(format!(
            "{p} exists ({there}), expected nothing there"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::functions::replies::{file, judge, stat};
    use pincer_shared::probe::DirEntry;
    use serde_json::json;

    #[test]
    fn existence_reads_as_what_was_found() {
        let at = |name: &str, kind: Option<FileKind>, target: Option<FileKind>, size: u64| {
            judge(
                name,
                json!({"path": "/p"}),
                &[stat(kind.is_some(), kind, target, size)],
            )
            .feedback
        };
        let (file_kind, dir, link) = (
            Some(FileKind::File),
            Some(FileKind::Dir),
            Some(FileKind::Symlink),
        );
        // A directory's size is the size of its entry table, not worth showing.
        assert_eq!(at("dir_exists", dir, None, 4096), "directory /p exists");
        assert_eq!(
            at("file_exists", file_kind, None, 1),
            "file /p exists (1 byte)"
        );
        assert_eq!(at("file_exists", None, None, 0), "file /p does not exist");
        assert_eq!(
            at("dir_exists", None, None, 0),
            "directory /p does not exist"
        );
        assert_eq!(
            at("file_exists", link, None, 0),
            "/p is a dangling symbolic link, not a file"
        );
        assert_eq!(
            at("dir_exists", link, file_kind, 0),
            "/p is a symbolic link to a file, not a directory"
        );
        assert_eq!(
            at("dir_exists", file_kind, None, 3),
            "/p exists but is a file, not a directory"
        );
        assert_eq!(
            at("file_absent", None, None, 0),
            "no file or directory exists at /p"
        );
        assert_eq!(
            at("file_absent", file_kind, None, 13),
            "/p exists (a file of 13 bytes), expected nothing there"
        );
        assert_eq!(
            at("file_absent", dir, None, 4096),
            "/p exists (a directory), expected nothing there"
        );
        assert_eq!(
            at("file_absent", link, dir, 4),
            "/p exists (a symbolic link to a directory), expected nothing there"
        );
    }

    #[test]
    fn a_directory_where_an_image_should_be_reads_with_an_article() {
        let v = judge(
            "image_file",
            json!({"path": "/p"}),
            &[stat(true, Some(FileKind::Dir), None, 0), file(b"")],
        );
        assert_eq!(v.feedback, "/p is a directory, not an image");
    }

    /// A HEIF file of one brand ("avif", "heic") as far as its size is concerned: the
    /// `ftyp` box and a `meta` box holding the picture's `ispe` (extent) property.
    fn heif(brand: &[u8; 4], width: u32, height: u32) -> Vec<u8> {
        let boxed = |kind: &[u8], body: &[u8]| {
            let mut b = ((body.len() + 8) as u32).to_be_bytes().to_vec();
            b.extend_from_slice(kind);
            b.extend_from_slice(body);
            b
        };
        let ftyp = [&brand[..], &[0; 4], b"mif1"].concat();
        let ispe = [&[0; 4][..], &width.to_be_bytes(), &height.to_be_bytes()].concat();
        let iprp = boxed(b"iprp", &boxed(b"ipco", &boxed(b"ispe", &ispe)));
        let meta = [&[0; 4][..], &iprp].concat();
        [boxed(b"ftyp", &ftyp), boxed(b"meta", &meta)].concat()
    }

    #[test]
    fn image_formats_are_named_so_that_every_format_can_match() {
        let (avif, heic) = (heif(b"avif", 40, 30), heif(b"heic", 40, 30));
        assert_eq!(format_name(imagesize::image_type(&avif).unwrap()), "avif");
        assert_eq!(format_name(imagesize::image_type(&heic).unwrap()), "heif");
        let image = |args: serde_json::Value, bytes: &[u8]| {
            let mut args = args;
            args["path"] = "/p".into();
            judge(
                "image_file",
                args,
                &[stat(true, Some(FileKind::File), None, 1), file(bytes)],
            )
        };
        for (format, bytes) in [("avif", &avif), ("heic", &heic), ("HEIF", &heic)] {
            let v = image(json!({"format": format, "width": 40}), bytes);
            assert!(v.passed, "{format}: {}", v.feedback);
        }
        assert_eq!(
            image(json!({"format": "avif"}), &heic).feedback,
            "image /p is 40x30 heif, expected avif"
        );
        // The expectation names only what was asked for.
        let png = crate::picture::png_rgba(8, 6, |_, _| [0, 0, 0, 255]);
        let said = |args| image(args, &png).feedback;
        assert_eq!(
            said(json!({"width": 8, "height": 6, "format": "png"})),
            "image /p is 8x6 png"
        );
        assert_eq!(
            said(json!({"width": 10, "format": "png"})),
            "image /p is 8x6 png, expected png of width 10"
        );
        assert_eq!(
            said(json!({"height": 10})),
            "image /p is 8x6 png, expected height 10"
        );
        assert_eq!(
            said(json!({"width": 10, "height": 6, "format": "jpg"})),
            "image /p is 8x6 png, expected 10x6 jpeg"
        );
        assert_eq!(
            image(json!({}), b"not an image").feedback,
            "file /p is not an image pincer can read"
        );
    }

    fn dir(entries: &[(&str, u64)]) -> ProbeResult {
        Ok(ProbeReply::Dir(Some(
            entries
                .iter()
                .map(|&(name, size)| DirEntry {
                    name: name.into(),
                    kind: FileKind::File,
                    size,
                })
                .collect(),
        )))
    }

    #[test]
    fn listings_and_copies_quote_names_and_count_them() {
        let listing = |names: &[&str], there: &[(&str, u64)]| {
            judge(
                "dir_listing",
                json!({"path": "/d", "names": names}),
                &[dir(there)],
            )
            .feedback
        };
        assert_eq!(
            listing(&["b", "a"], &[("a", 1), ("b", 1), (".lock", 1)]),
            "directory /d holds exactly 'b', 'a'"
        );
        assert_eq!(listing(&[], &[]), "directory /d holds nothing");
        assert_eq!(
            listing(&["a", "c"], &[("a", 1), ("b", 1)]),
            "directory /d should hold exactly 'a', 'c': missing 'c'; also holds 'b'"
        );
        let copied = |target: &[(&str, u64)]| {
            judge(
                "files_copied",
                json!({"source_dir": "/s", "target_dir": "/t", "extension": "ods"}),
                &[
                    dir(&[("a.ods", 1), ("b.ods", 2), ("c.txt", 3)]),
                    dir(target),
                ],
            )
            .feedback
        };
        assert_eq!(
            copied(&[("a.ods", 1), ("b.ods", 2)]),
            "all 2 .ods files of /s are in /t"
        );
        assert_eq!(
            copied(&[("a.ods", 1), ("b.ods", 3)]),
            "1 of 2 .ods files of /s is in /t; missing or of another size: 'b.ods'"
        );
        assert_eq!(
            copied(&[]),
            "0 of 2 .ods files of /s are in /t; missing or of another size: 'a.ods', 'b.ods'"
        );
    }

    #[test]
    fn copies_of_the_same_size_are_told_apart_by_content() {
        let same = |a: &[u8], b: &[u8]| {
            let f = Some(FileKind::File);
            judge(
                "same_content",
                json!({"path": "/a", "copy": "/b"}),
                &[
                    stat(true, f, None, 1),
                    file(a),
                    stat(true, f, None, 1),
                    file(b),
                ],
            )
            .feedback
        };
        assert_eq!(same(b"x", b"x"), "file /b has the same 1 byte as /a");
        assert_eq!(
            same(b"telescope 1", b"telescope 2"),
            "file /b has the same size as /a (11 bytes) but different content"
        );
        assert_eq!(same(b"abc", b"a"), "file /b has 1 byte, /a has 3");
    }
}

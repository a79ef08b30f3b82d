//! Files and directories: existence, content, patterns, copies and images.

use super::{ANY, LINUX, Library, Reads, clip, judge_text};
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
            (false, _, _) => Verdict::fail(format!("{p} does not exist")),
            (true, Some(FileKind::Symlink), None) => {
                Verdict::fail(format!("{p} is a dangling symbolic link"))
            }
            (true, Some(FileKind::Symlink), Some(t)) => Verdict::when(
                t == self.kind,
                format!("{what} {p} exists (a symbolic link to a {what})"),
                format!("{p} is a symbolic link to a {}, not a {what}", kind_name(t)),
            ),
            (true, Some(k), _) if k == self.kind => {
                Verdict::pass(format!("{what} {p} exists ({} bytes)", s.size))
            }
            (true, k, _) => Verdict::fail(format!(
                "{p} exists but is a {}, not a {what}",
                k.map_or("thing", kind_name)
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
    match s.kind {
        None => return Ok(Err(Verdict::fail(format!("{what} {path} does not exist")))),
        Some(FileKind::Dir) => {
            return Ok(Err(Verdict::fail(format!(
                "{path} is a directory, not a {what}"
            ))));
        }
        Some(FileKind::Other) => {
            return Ok(Err(Verdict::fail(format!(
                "{path} is a special file, not a {what}"
            ))));
        }
        // A symlink is read through.
        Some(FileKind::File | FileKind::Symlink) => {}
    }
    if s.kind == Some(FileKind::Symlink) && matches!(r[1], Err(WireError::InvalidArgument { .. })) {
        // The guest refuses to read a directory as a file.
        return Ok(Err(Verdict::fail(format!(
            "{path} is a symbolic link to a directory, not a {what}"
        ))));
    }
    match reply(r[1], "read file")? {
        ProbeReply::File(Some(f)) => Ok(Ok(f)),
        // Gone (or a dangling link) between the stat and the read.
        ProbeReply::File(None) => Ok(Err(Verdict::fail(format!("{what} {path} does not exist")))),
        other => Err(unexpected("read file", other)),
    }
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
        // Judging the part that was read could pass a file whose text differs further on.
        if f.total_size > f.bytes.len() as u64 {
            return Ok(Verdict::fail(format!(
                "file {} is {} bytes, more than the {} MiB pincer reads for a check: it was not judged",
                self.path,
                f.total_size,
                MAX_INLINE_FILE / (1024 * 1024)
            )));
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
struct CopiedArgs {
    /// Directory the files come from.
    source_dir: String,
    /// Directory they must be copied to.
    target_dir: String,
    /// File extension without the dot ("ods").
    extension: String,
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
        let Some(src) = list(0)? else {
            return Ok(Verdict::fail(format!(
                "source directory {} does not exist",
                self.source
            )));
        };
        let Some(dst) = list(1)? else {
            return Ok(Verdict::fail(format!(
                "target directory {} does not exist",
                self.target
            )));
        };
        let wanted: Vec<_> = src
            .iter()
            .filter(|e| e.kind == FileKind::File && e.name.to_lowercase().ends_with(&suffix))
            .collect();
        if wanted.is_empty() {
            return Ok(Verdict::fail(format!(
                "{} holds no {suffix} files to copy",
                self.source
            )));
        }
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|w| {
                !dst.iter()
                    .any(|d| d.name == w.name && d.size == w.size && d.kind == FileKind::File)
            })
            .map(|w| w.name.as_str())
            .collect();
        Ok(Verdict::when(
            missing.is_empty(),
            format!(
                "all {} {suffix} files of {} are in {}",
                wanted.len(),
                self.source,
                self.target
            ),
            format!(
                "{} of {} {suffix} files of {} are in {}; missing or different: {}",
                wanted.len() - missing.len(),
                wanted.len(),
                self.source,
                self.target,
                clip(&missing.join(", "), 80)
            ),
        ))
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
            wrong.push(format!("missing {}", clip(&missing.join(", "), 120)));
        }
        if !extra.is_empty() {
            wrong.push(format!("also holds {}", clip(&extra.join(", "), 120)));
        }
        Ok(Verdict::when(
            wrong.is_empty(),
            format!(
                "{} holds exactly {}",
                self.a.path,
                clip(&self.a.names.join(", "), 120)
            ),
            format!("{}: {}", self.a.path, wrong.join("; ")),
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
        let whole = |f: &FileContent| f.total_size == f.bytes.len() as u64;
        if !whole(original) || !whole(copy) {
            return Ok(Verdict::fail(format!(
                "{} or {} is larger than the {} MiB pincer reads for a check, so they cannot be compared",
                self.a.path,
                self.a.copy,
                MAX_INLINE_FILE / (1024 * 1024)
            )));
        }
        Ok(Verdict::when(
            original.bytes == copy.bytes,
            format!(
                "{} has the same {} bytes as {}",
                self.a.copy,
                copy.bytes.len(),
                self.a.path
            ),
            if original.bytes.len() == copy.bytes.len() {
                format!(
                    "{} has as many bytes as {} ({}) but other ones",
                    self.a.copy,
                    self.a.path,
                    copy.bytes.len()
                )
            } else {
                format!(
                    "{} has {} bytes, {} has {}",
                    self.a.copy,
                    copy.bytes.len(),
                    self.a.path,
                    original.bytes.len()
                )
            },
        ))
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
    /// Required format: png, jpeg, gif, bmp, webp, tiff, ...
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
                "{p} is not an image pincer can read"
            )));
        };
        let format = format!("{kind:?}").to_lowercase();
        let seen = format!("image {p} is a {}x{} {format}", size.width, size.height);
        let ok = self.a.width.is_none_or(|w| w as usize == size.width)
            && self.a.height.is_none_or(|h| h as usize == size.height)
            && self
                .a
                .format
                .as_ref()
                .is_none_or(|f| f.to_lowercase().replace("jpg", "jpeg") == format);
        Ok(if ok {
            Verdict::pass(seen)
        } else {
            let want = format!(
                "{}x{} {}",
                self.a.width.map_or("*".into(), |w| w.to_string()),
                self.a.height.map_or("*".into(), |h| h.to_string()),
                self.a.format.as_deref().unwrap_or("image")
            );
            Verdict::fail(format!("{seen}, expected {want}"))
        })
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
        |a: ImageArgs, _| Ok(Image { a }),
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
        match reply(r[0], "stat")? {
            ProbeReply::Stat(s) => Ok(Verdict::when(
                !s.exists,
                format!("{} does not exist", self.path),
                format!(
                    "{} exists (a {}, {} bytes), expected it gone",
                    self.path,
                    kind_name(s.kind.unwrap_or(FileKind::Other)),
                    s.size
                ),
            )),
            other => Err(unexpected("stat", other)),
        }
    }
}

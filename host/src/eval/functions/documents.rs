//! Documents: the text of office files and plain text files, read on the host from the
//! file's bytes. OpenDocument files (`.odt`, `.ods`, `.odp`, ...) and DOCX are zip archives
//! of XML parts; their paragraphs (or, for spreadsheets, rows of cells) are extracted here,
//! so a check never needs an office suite on the guest. PDF text is not extracted: its
//! fonts and content streams need a PDF engine, which pincer does not ship.

use super::{ANY, Library, Reads, a, clip, count, judge_text, quoted};
use crate::eval::text::TextMatch;
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use pincer_shared::limits::MAX_INLINE_FILE;
use pincer_shared::probe::{FileContent, Probe, ProbeReply};
use quick_xml::events::{BytesStart, Event};
use schemars::JsonSchema;
use serde::Deserialize;
use std::io::Read as _;

/// Most bytes one XML part of an archive may unpack to (a guard against zip bombs).
const MAX_PART: u64 = 64 * 1024 * 1024;
/// Most cells a spreadsheet may expand to (repeated cells and rows count once per copy).
const MAX_CELLS: usize = 2_000_000;
/// Bytes inspected to tell text from binary data.
const SNIFF: usize = 8 * 1024;

/// Why a file's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum DocError {
    /// A zip archive that is neither OpenDocument nor DOCX.
    #[error("it is a zip archive, but neither an OpenDocument file nor a DOCX file")]
    UnknownArchive,
    /// The archive is damaged or a part is missing.
    #[error("it is a damaged document archive: {0}")]
    Archive(String),
    /// A part is not well-formed XML.
    #[error("its part {part} is not well-formed XML: {message}")]
    Xml {
        /// The part ("content.xml").
        part: String,
        /// The parser's message.
        message: String,
    },
    /// A part or a spreadsheet is too large to read.
    #[error("its {what} is too large to read (more than {limit})")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
        /// The limit, for people.
        limit: String,
    },
    /// A PDF file.
    #[error("it is a PDF file, and pincer does not extract text from PDF")]
    Pdf,
    /// Binary data that is no document pincer reads.
    #[error("it holds binary data, not text or a document pincer reads (OpenDocument, DOCX)")]
    Binary,
}

/// One sheet of a spreadsheet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sheet {
    /// Its name.
    pub(crate) name: String,
    /// Rows of cell texts, trailing empty cells and rows left out.
    pub(crate) rows: Vec<Vec<String>>,
    /// The cells' typed values (`office:value`, `office:date-value`, ...) in the same
    /// places as `rows`; `None` for text cells and empty ones.
    pub(crate) values: Vec<Vec<Option<String>>>,
}

/// What a file's bytes hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Document {
    /// Plain text.
    Text(String),
    /// Paragraphs of a word-processor, presentation or drawing file, in document order.
    Paragraphs {
        /// Which kind (`None`: an OpenDocument file of another kind, such as a formula).
        kind: Option<DocKind>,
        /// The paragraphs' texts.
        paragraphs: Vec<String>,
    },
    /// A spreadsheet.
    Sheets(Vec<Sheet>),
}

impl Document {
    /// What kind of file it is, for feedback.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Self::Text(_) => DocKind::Text.name(),
            Self::Paragraphs { kind, .. } => kind.map_or("OpenDocument file", DocKind::name),
            Self::Sheets(_) => DocKind::Ods.name(),
        }
    }

    /// The document as lines: text lines, paragraphs, or rows with cells joined by tabs
    /// (as a spreadsheet copies to the clipboard).
    pub(crate) fn lines(&self) -> Vec<String> {
        match self {
            Self::Text(t) => t
                .split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
                .collect(),
            Self::Paragraphs { paragraphs, .. } => paragraphs.clone(),
            Self::Sheets(sheets) => sheets
                .iter()
                .flat_map(|s| s.rows.iter().map(|r| r.join("\t")))
                .collect(),
        }
    }

    /// The whole text, lines joined by newlines.
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            _ => self.lines().join("\n"),
        }
    }
}

/// Reads a file's bytes as a document: OpenDocument, DOCX, or plain text.
pub(crate) fn parse(bytes: &[u8]) -> Result<Document, DocError> {
    if bytes.starts_with(b"PK\x03\x04") {
        return parse_archive(bytes);
    }
    if bytes.starts_with(b"%PDF-") {
        return Err(DocError::Pdf);
    }
    if bytes[..bytes.len().min(SNIFF)].contains(&0) {
        return Err(DocError::Binary);
    }
    Ok(Document::Text(String::from_utf8_lossy(bytes).into_owned()))
}

fn parse_archive(bytes: &[u8]) -> Result<Document, DocError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| DocError::Archive(e.to_string()))?;
    if zip.index_for_name("mimetype").is_some() {
        let mime = read_part(&mut zip, "mimetype")?;
        let mime = mime.trim();
        let Some(sub) = mime.strip_prefix("application/vnd.oasis.opendocument.") else {
            return Err(DocError::UnknownArchive);
        };
        let content = read_part(&mut zip, "content.xml")?;
        let base = sub.trim_end_matches("-template");
        if base == "spreadsheet" {
            return odf_sheets(&content).map(Document::Sheets);
        }
        let kind = match base {
            "text" | "text-master" | "text-web" => Some(DocKind::Odt),
            "presentation" => Some(DocKind::Odp),
            "graphics" => Some(DocKind::Odg),
            _ => None,
        };
        return Ok(Document::Paragraphs {
            kind,
            paragraphs: paragraphs(&content, "content.xml", &ODF_TEXT)?,
        });
    }
    if zip.index_for_name("word/document.xml").is_some() {
        let body = read_part(&mut zip, "word/document.xml")?;
        return Ok(Document::Paragraphs {
            kind: Some(DocKind::Docx),
            paragraphs: paragraphs(&body, "word/document.xml", &DOCX_TEXT)?,
        });
    }
    Err(DocError::UnknownArchive)
}

fn read_part(
    zip: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>,
    name: &str,
) -> Result<String, DocError> {
    let entry = zip
        .by_name(name)
        .map_err(|e| DocError::Archive(format!("{name}: {e}")))?;
    let mut out = Vec::new();
    entry
        .take(MAX_PART + 1)
        .read_to_end(&mut out)
        .map_err(|e| DocError::Archive(format!("{name}: {e}")))?;
    if out.len() as u64 > MAX_PART {
        return Err(DocError::TooLarge {
            what: "XML part",
            limit: format!("{} MiB unpacked", MAX_PART / (1024 * 1024)),
        });
    }
    String::from_utf8(out).map_err(|_| DocError::Xml {
        part: name.to_owned(),
        message: "not UTF-8".into(),
    })
}

/// One parse event with the element's qualified name. OpenDocument and OOXML writers use
/// their standard prefixes (`text:`, `table:`, `w:`), so qualified names are matched.
enum Xml<'a> {
    Open(&'a BytesStart<'a>),
    Close(&'a [u8]),
    Text(&'a str),
}

fn walk(xml: &str, part: &str, mut f: impl FnMut(Xml<'_>)) -> Result<(), DocError> {
    let bad = |message: String| DocError::Xml {
        part: part.to_owned(),
        message,
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event().map_err(|e| bad(e.to_string()))? {
            Event::Start(e) => f(Xml::Open(&e)),
            Event::Empty(e) => {
                f(Xml::Open(&e));
                f(Xml::Close(e.name().as_ref()));
            }
            Event::End(e) => f(Xml::Close(e.name().as_ref())),
            Event::Text(t) => f(Xml::Text(
                &t.xml10_content().map_err(|e| bad(e.to_string()))?,
            )),
            Event::CData(t) => f(Xml::Text(&t.decode().map_err(|e| bad(e.to_string()))?)),
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| bad(e.to_string()))?;
                match r.resolve_char_ref().map_err(|e| bad(e.to_string()))? {
                    Some(c) => f(Xml::Text(c.encode_utf8(&mut [0; 4]))),
                    None => match quick_xml::escape::resolve_predefined_entity(&name) {
                        Some(s) => f(Xml::Text(s)),
                        None => return Err(bad(format!("unknown entity &{name};"))),
                    },
                }
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

fn attr(e: &BytesStart<'_>, name: &str) -> Option<String> {
    e.try_get_attribute(name).ok().flatten().and_then(|a| {
        a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .ok()
            .map(|v| v.into_owned())
    })
}

fn count_attr(e: &BytesStart<'_>, name: &str) -> usize {
    attr(e, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// How one XML vocabulary marks paragraphs and inline whitespace.
struct Vocabulary {
    /// Elements that are paragraphs.
    paragraph: &'static [&'static [u8]],
    /// Elements whose character data is text (`None`: all character data in a paragraph).
    text_run: Option<&'static [u8]>,
    /// Element standing for spaces, with its count attribute.
    space: Option<(&'static [u8], &'static str)>,
    /// Element standing for a tab.
    tab: &'static [u8],
    /// Elements standing for a line break.
    line_break: &'static [&'static [u8]],
}

const ODF_TEXT: Vocabulary = Vocabulary {
    paragraph: &[b"text:p", b"text:h"],
    text_run: None,
    space: Some((b"text:s", "text:c")),
    tab: b"text:tab",
    line_break: &[b"text:line-break"],
};

/// What CRAB's check of a pasted document reads (odfpy's `text.P` elements): paragraphs,
/// not headings.
const ODF_CRAB_TEXT: Vocabulary = Vocabulary {
    paragraph: &[b"text:p"],
    ..ODF_TEXT
};

/// The text CRAB's `verify_odt_file_content_with_clipboard` compares: every `text:p`
/// paragraph's text (line breaks as newlines, spaces and tabs as written; headings left
/// out), joined by newlines.
pub(crate) fn crab_odt_text(bytes: &[u8]) -> Result<String, DocError> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| DocError::Archive(e.to_string()))?;
    let content = read_part(&mut zip, "content.xml")?;
    Ok(paragraphs(&content, "content.xml", &ODF_CRAB_TEXT)?.join("\n"))
}

const DOCX_TEXT: Vocabulary = Vocabulary {
    paragraph: &[b"w:p"],
    text_run: Some(b"w:t"),
    space: None,
    tab: b"w:tab",
    line_break: &[b"w:br", b"w:cr"],
};

/// Paragraph texts in the order paragraphs start (a paragraph inside another, as in a
/// text frame, comes after its container).
fn paragraphs(xml: &str, part: &str, v: &Vocabulary) -> Result<Vec<String>, DocError> {
    let mut out: Vec<String> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    let mut in_run = 0usize;
    walk(xml, part, |ev| match ev {
        Xml::Open(e) => {
            let name = e.name();
            let name = name.as_ref();
            if v.paragraph.contains(&name) {
                out.push(String::new());
                open.push(out.len() - 1);
            } else if Some(name) == v.text_run {
                in_run += 1;
            } else if let Some(&i) = open.last() {
                if name == v.tab {
                    out[i].push('\t');
                } else if v.line_break.contains(&name) {
                    out[i].push('\n');
                } else if let Some((space, count)) = v.space
                    && name == space
                {
                    out[i].extend(std::iter::repeat_n(' ', count_attr(e, count)));
                }
            }
        }
        Xml::Close(name) => {
            if v.paragraph.contains(&name) {
                open.pop();
            } else if Some(name) == v.text_run {
                in_run = in_run.saturating_sub(1);
            }
        }
        Xml::Text(t) => {
            if let Some(&i) = open.last()
                && (v.text_run.is_none() || in_run > 0)
            {
                out[i].push_str(t);
            }
        }
    })?;
    Ok(out)
}

/// The sheets of an OpenDocument spreadsheet's `content.xml`. Repeated cells and rows are
/// expanded, except trailing empty ones (LibreOffice writes a row of 1,024 repeated empty
/// cells and a million repeated empty rows to fill the grid).
fn odf_sheets(xml: &str) -> Result<Vec<Sheet>, DocError> {
    /// The row being read: its cells' texts and values, how often it repeats, and how many
    /// empty cells wait to be written before the next non-empty one.
    struct OpenRow {
        cells: Vec<String>,
        values: Vec<Option<String>>,
        repeat: usize,
        empty: usize,
    }
    /// The cell being read: its text, value, how often it repeats and its paragraphs so far.
    struct OpenCell {
        text: String,
        value: Option<String>,
        repeat: usize,
        paras: usize,
    }
    #[derive(Default)]
    struct State {
        sheets: Vec<Sheet>,
        row: Option<OpenRow>,
        cell: Option<OpenCell>,
        empty_rows: usize,
        cells: usize,
        overflow: bool,
    }
    let mut s = State::default();
    walk(xml, "content.xml", |ev| match ev {
        Xml::Open(e) => match e.name().as_ref() {
            b"table:table" => {
                s.sheets.push(Sheet {
                    name: attr(e, "table:name").unwrap_or_default(),
                    rows: Vec::new(),
                    values: Vec::new(),
                });
                s.empty_rows = 0;
            }
            b"table:table-row" => {
                s.row = Some(OpenRow {
                    cells: Vec::new(),
                    values: Vec::new(),
                    repeat: count_attr(e, "table:number-rows-repeated"),
                    empty: 0,
                });
            }
            b"table:table-cell" | b"table:covered-table-cell" if s.row.is_some() => {
                let value = [
                    "office:value",
                    "office:date-value",
                    "office:time-value",
                    "office:boolean-value",
                ]
                .iter()
                .find_map(|a| attr(e, a));
                s.cell = Some(OpenCell {
                    text: String::new(),
                    value,
                    repeat: count_attr(e, "table:number-columns-repeated"),
                    paras: 0,
                });
            }
            name => {
                if let Some(OpenCell { text, paras, .. }) = s.cell.as_mut() {
                    match name {
                        b"text:p" | b"text:h" => {
                            if *paras > 0 {
                                text.push('\n');
                            }
                            *paras += 1;
                        }
                        b"text:s" => text.extend(std::iter::repeat_n(' ', count_attr(e, "text:c"))),
                        b"text:tab" => text.push('\t'),
                        b"text:line-break" => text.push('\n'),
                        _ => {}
                    }
                }
            }
        },
        Xml::Close(name) => match name {
            b"table:table-cell" | b"table:covered-table-cell" => {
                if let (
                    Some(OpenCell {
                        text,
                        value,
                        repeat,
                        ..
                    }),
                    Some(OpenRow {
                        cells,
                        values,
                        empty,
                        ..
                    }),
                ) = (s.cell.take(), s.row.as_mut())
                {
                    if text.is_empty() && value.is_none() {
                        *empty += repeat;
                    } else {
                        let n = *empty + repeat;
                        s.cells += n;
                        if s.cells > MAX_CELLS {
                            s.overflow = true;
                            return;
                        }
                        cells.extend(std::iter::repeat_n(String::new(), *empty));
                        cells.extend(std::iter::repeat_n(text, repeat));
                        values.extend(std::iter::repeat_n(None, *empty));
                        values.extend(std::iter::repeat_n(value, repeat));
                        *empty = 0;
                    }
                }
            }
            b"table:table-row" => {
                if let (
                    Some(OpenRow {
                        cells,
                        values,
                        repeat,
                        ..
                    }),
                    Some(sheet),
                ) = (s.row.take(), s.sheets.last_mut())
                {
                    if cells.is_empty() {
                        s.empty_rows += repeat;
                    } else {
                        s.cells += cells.len() * repeat + s.empty_rows;
                        if s.cells > MAX_CELLS {
                            s.overflow = true;
                            return;
                        }
                        sheet
                            .rows
                            .extend(std::iter::repeat_n(Vec::new(), s.empty_rows));
                        sheet.rows.extend(std::iter::repeat_n(cells, repeat));
                        sheet
                            .values
                            .extend(std::iter::repeat_n(Vec::new(), s.empty_rows));
                        sheet.values.extend(std::iter::repeat_n(values, repeat));
                        s.empty_rows = 0;
                    }
                }
            }
            _ => {}
        },
        Xml::Text(t) => {
            if let Some(OpenCell { text, .. }) = s.cell.as_mut() {
                text.push_str(t);
            }
        }
    })?;
    if s.overflow {
        return Err(DocError::TooLarge {
            what: "spreadsheet",
            limit: format!("{MAX_CELLS} cells"),
        });
    }
    Ok(s.sheets)
}

/// The file's bytes, or the verdict to give when there are none to judge.
pub(super) fn file_bytes<'a>(
    r: &'a ProbeResult,
    path: &str,
) -> Result<Result<&'a FileContent, Verdict>, EvalError> {
    match reply(r, "read file")? {
        ProbeReply::File(Some(f)) if f.total_size > f.bytes.len() as u64 => {
            Ok(Err(Verdict::fail(format!(
                "file {path} is {} bytes, more than the {} MiB pincer reads for a check: it was not judged",
                f.total_size,
                MAX_INLINE_FILE / (1024 * 1024)
            ))))
        }
        ProbeReply::File(Some(f)) => Ok(Ok(f)),
        ProbeReply::File(None) => Ok(Err(Verdict::fail(format!("file {path} does not exist")))),
        other => Err(unexpected("read file", other)),
    }
}

/// Reads the document at `path` from a probe reply, or says why it cannot be judged.
fn document(r: &ProbeResult, path: &str) -> Result<Result<Document, Verdict>, EvalError> {
    Ok(match file_bytes(r, path)? {
        Ok(f) => {
            parse(&f.bytes).map_err(|e| Verdict::fail(format!("file {path} cannot be read: {e}")))
        }
        Err(v) => Err(v),
    })
}

pub(super) fn read_probe(path: &str) -> Probe {
    Probe::ReadFile {
        path: path.to_owned(),
        max_len: MAX_INLINE_FILE,
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TextArgs {
    /// The document: OpenDocument (.odt, .ods, .odp), DOCX, or plain text.
    path: String,
    /// How its text is compared.
    text: TextMatch,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ContainsArgs {
    /// The document: OpenDocument (.odt, .ods, .odp), DOCX, or plain text.
    path: String,
    /// Text it must contain.
    text: String,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

/// A document's text passes a text match.
#[derive(Debug)]
struct DocText {
    path: String,
    test: TextMatch,
}

impl Check for DocText {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.path)]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.path;
        let doc = match document(r[0], p)? {
            Ok(d) => d,
            Err(v) => return Ok(v),
        };
        Ok(judge_text(
            &format!("{} {p}", doc.kind()),
            &doc.text(),
            &self.test,
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ClipboardArgs {
    /// The file: plain text, OpenDocument or DOCX (detected from its content).
    path: String,
}

/// CRAB's clipboard comparison: the clipboard's lines, each inside the same-numbered line
/// (paragraph) of the file.
#[derive(Debug)]
struct ClipboardInDoc {
    path: String,
}

/// The clipboard's lines without the empty lines a trailing newline leaves.
fn clipboard_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

impl Check for ClipboardInDoc {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.path), Probe::Clipboard]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.path;
        let clipboard = match reply(r[1], "clipboard")? {
            ProbeReply::Clipboard(Some(t)) => t,
            ProbeReply::Clipboard(None) => {
                return Ok(Verdict::fail(format!(
                    "the clipboard holds no text, expected lines that {p} holds"
                )));
            }
            other => return Err(unexpected("clipboard", other)),
        };
        let want = clipboard_lines(clipboard);
        if want.is_empty() {
            return Ok(Verdict::fail(format!(
                "the clipboard holds only empty lines, expected lines that {p} holds"
            )));
        }
        let doc = match document(r[0], p)? {
            Ok(d) => d,
            Err(v) => return Ok(v),
        };
        let got = doc.lines();
        let kind = doc.kind();
        for (i, w) in want.iter().enumerate() {
            match got.get(i) {
                None => {
                    return Ok(Verdict::fail(format!(
                        "{kind} {p} has {}, the clipboard {}; line {} '{}' is missing",
                        count(got.len() as u64, "line"),
                        want.len(),
                        i + 1,
                        clip(w, 40)
                    )));
                }
                Some(g) if !g.contains(w) => {
                    return Ok(Verdict::fail(format!(
                        "line {} of {kind} {p} is '{}', which does not contain the clipboard's '{}'",
                        i + 1,
                        clip(g, 40),
                        clip(w, 40)
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(Verdict::pass(match want.len() {
            1 => format!("the clipboard's line is in {kind} {p}"),
            n => format!("all {n} clipboard lines are in {kind} {p}"),
        }))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RowArgs {
    /// The spreadsheet (OpenDocument .ods).
    path: String,
    /// The row's first cells, in order (compared after trimming whitespace).
    cells: Vec<String>,
    /// The sheet's name (default: the first sheet).
    #[serde(default)]
    sheet: Option<String>,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

/// A spreadsheet row starting with given cells.
#[derive(Debug)]
struct Row {
    a: RowArgs,
}

impl Check for Row {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.a.path)]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.a.path;
        let sheet = match pick_sheet(r[0], p, self.a.sheet.as_deref())? {
            Ok(s) => s,
            Err(v) => return Ok(v),
        };
        let want: Vec<TextMatch> = self
            .a
            .cells
            .iter()
            .map(|c| TextMatch::equals(c).ignoring_case(self.a.ignore_case))
            .collect();
        let hit = sheet.rows.iter().position(|row| {
            row.len() >= want.len() && row.iter().zip(&want).all(|(c, w)| w.test(c))
        });
        let cells = |row: &[String]| quoted(row.iter().map(String::as_str), 60);
        let wanted = cells(&self.a.cells);
        let at = format!("sheet '{}' in {p}", sheet.name);
        Ok(match (hit, sheet.rows.first()) {
            (Some(i), _) => Verdict::pass(format!(
                "row {} of {at} starts with {}",
                i + 1,
                cells(&sheet.rows[i][..want.len()])
            )),
            (None, None) => Verdict::fail(format!(
                "{at} is empty, expected a row starting with {wanted}"
            )),
            (None, Some(first)) => Verdict::fail(format!(
                "no row of {at} starts with {wanted} ({}; the first: {})",
                count(sheet.rows.len() as u64, "row"),
                cells(first)
            )),
        })
    }
}

/// The kinds of document `document_type` tells apart, by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum DocKind {
    /// OpenDocument text (Writer).
    Odt,
    /// OpenDocument spreadsheet (Calc).
    Ods,
    /// OpenDocument presentation (Impress).
    Odp,
    /// OpenDocument drawing (Draw).
    Odg,
    /// Word's DOCX.
    Docx,
    /// Plain text.
    Text,
}

impl DocKind {
    /// The kind of a parsed document.
    fn of(d: &Document) -> Option<Self> {
        match d {
            Document::Text(_) => Some(Self::Text),
            Document::Sheets(_) => Some(Self::Ods),
            Document::Paragraphs { kind, .. } => *kind,
        }
    }

    /// What the kind is called in feedback.
    fn name(self) -> &'static str {
        match self {
            Self::Odt => "OpenDocument text",
            Self::Ods => "OpenDocument spreadsheet",
            Self::Odp => "OpenDocument presentation",
            Self::Odg => "OpenDocument drawing",
            Self::Docx => "DOCX document",
            Self::Text => "text file",
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TypeArgs {
    /// The file.
    path: String,
    /// What it must be, judged by its content, not its name.
    kind: DocKind,
}

/// A file that is a document of a kind, by content.
#[derive(Debug)]
struct DocType {
    a: TypeArgs,
}

impl Check for DocType {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.a.path)]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let p = &self.a.path;
        let want = a(self.a.kind.name());
        let bytes = match file_bytes(r[0], p)? {
            Ok(f) => &f.bytes,
            Err(v) => {
                // A missing file is judged against the kind; a file too large to read is not
                // judged at all, which its verdict says.
                let missing = matches!(r[0], Ok(ProbeReply::File(None)));
                return Ok(if missing {
                    Verdict::fail(format!("{}, expected {want}", v.feedback))
                } else {
                    v
                });
            }
        };
        Ok(match parse(bytes) {
            Ok(doc) if DocKind::of(&doc) == Some(self.a.kind) => {
                Verdict::pass(format!("file {p} is {want}"))
            }
            Ok(doc) => Verdict::fail(format!("file {p} is {}, expected {want}", a(doc.kind()))),
            Err(e) => Verdict::fail(format!("file {p} is not {want}: {e}")),
        })
    }
}

/// The spreadsheet's sheet named (or the first), or the failing verdict that says why not.
fn pick_sheet(
    r: &ProbeResult,
    path: &str,
    name: Option<&str>,
) -> Result<Result<Sheet, Verdict>, EvalError> {
    let sheets = match document(r, path)? {
        Ok(Document::Sheets(s)) => s,
        Ok(other) => {
            return Ok(Err(Verdict::fail(format!(
                "file {path} is {}, not a spreadsheet",
                a(other.kind())
            ))));
        }
        Err(v) => return Ok(Err(v)),
    };
    if sheets.is_empty() {
        return Ok(Err(Verdict::fail(format!(
            "spreadsheet {path} has no sheets"
        ))));
    }
    let names = quoted(sheets.iter().map(|s| s.name.as_str()), 100);
    let mut sheets = sheets.into_iter();
    let sheet = match name {
        Some(name) => sheets.find(|s| s.name == name),
        None => sheets.next(),
    };
    Ok(sheet.ok_or_else(|| {
        Verdict::fail(format!(
            "spreadsheet {path} has no sheet '{}' (sheets: {names})",
            name.unwrap_or_default(),
        ))
    }))
}

/// A cell address such as `B3` as (row, column) from 0.
fn cell_address(cell: &str) -> Option<(usize, usize)> {
    let cell = cell.trim().to_ascii_uppercase();
    let split = cell.find(|c: char| c.is_ascii_digit())?;
    let (letters, digits) = cell.split_at(split);
    if letters.is_empty() || letters.len() > 3 || !letters.chars().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    let col = letters
        .bytes()
        .fold(0usize, |n, b| n * 26 + usize::from(b - b'A' + 1))
        - 1;
    let row: usize = digits.parse().ok().filter(|&r| r > 0)?;
    Some((row - 1, col))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CellArgs {
    /// The spreadsheet (OpenDocument .ods).
    path: String,
    /// The cell's address, such as "B3".
    cell: String,
    /// The sheet's name (default: the first sheet).
    #[serde(default)]
    sheet: Option<String>,
    /// The number the cell must hold (its value, however it is formatted: 1200 matches a
    /// cell shown as "1,200" or "$1,200.00"; a text that looks like a number does not).
    #[serde(default)]
    value: Option<f64>,
    /// A test of the text the cell shows.
    #[serde(default)]
    text: Option<TextMatch>,
}

/// One spreadsheet cell, by address: its value, its shown text, or both.
#[derive(Debug)]
struct Cell {
    a: CellArgs,
    at: (usize, usize),
}

impl Check for Cell {
    fn probes(&self) -> Vec<Probe> {
        vec![read_probe(&self.a.path)]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let sheet = match pick_sheet(r[0], &self.a.path, self.a.sheet.as_deref())? {
            Ok(s) => s,
            Err(v) => return Ok(v),
        };
        let (row, col) = self.at;
        let text = sheet
            .rows
            .get(row)
            .and_then(|r| r.get(col))
            .map_or("", String::as_str);
        let value = sheet
            .values
            .get(row)
            .and_then(|r| r.get(col))
            .and_then(Option::as_deref);
        let cell = format!(
            "cell {} of sheet '{}'",
            self.a.cell.trim().to_ascii_uppercase(),
            sheet.name
        );
        let holds = match value {
            Some(v) => format!("{cell} holds {v} (shown as '{}')", clip(text, 40)),
            None if text.is_empty() => format!("{cell} is empty"),
            None => format!("{cell} holds the text '{}'", clip(text, 40)),
        };
        if let Some(want) = self.a.value {
            let number = value.and_then(|v| v.parse::<f64>().ok());
            if number.is_none_or(|n| (n - want).abs() > 1e-9 * want.abs().max(1.0)) {
                return Ok(Verdict::fail(format!(
                    "{holds}, expected the number {want}"
                )));
            }
        }
        if let Some(test) = &self.a.text
            && !test.test(text)
        {
            return Ok(Verdict::fail(format!("{holds}, expected text {test}")));
        }
        Ok(Verdict::pass(holds))
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "document_text",
        "The text of a document (OpenDocument .odt/.ods/.odp, DOCX, or plain text) passes a text match.",
        Reads::Env(ANY),
        r#"{"path": "~/Documents/report.odt", "text": {"regex": "^Dear Ada"}}"#,
        |a: TextArgs, _| {
            Ok(DocText {
                path: a.path,
                test: a.text,
            })
        },
    );
    lib.add(
        "document_contains",
        "The text of a document (OpenDocument .odt/.ods/.odp, DOCX, or plain text) contains the text (document_text with `contains`).",
        Reads::Env(ANY),
        r#"{"path": "~/Documents/report.odt", "text": "Quarterly results"}"#,
        |a: ContainsArgs, _| {
            Ok(DocText {
                path: a.path,
                test: TextMatch::contains(&a.text).ignoring_case(a.ignore_case),
            })
        },
    );
    lib.add(
        "clipboard_in_document",
        "Each line of the clipboard is inside the same-numbered line of the file (paragraph, for OpenDocument and DOCX), as CRAB compares pasted text.",
        Reads::Env(ANY),
        r#"{"path": "~/Documents/pasted.odt"}"#,
        |a: ClipboardArgs, _| Ok(ClipboardInDoc { path: a.path }),
    );
    lib.add(
        "document_type",
        "A file is a document of the kind (odt, ods, odp, odg, docx, text), judged by its content, not its name.",
        Reads::Env(ANY),
        r#"{"path": "~/letters/ada.odt", "kind": "odt"}"#,
        |a: TypeArgs, _| Ok(DocType { a }),
    );
    lib.add(
        "spreadsheet_cell",
        "One cell of an OpenDocument spreadsheet, by address (first sheet unless named): its number (`value`, however formatted) and/or its shown text (`text`, a text match).",
        Reads::Env(ANY),
        r#"{"path": "~/sheets/budget.ods", "cell": "B1", "value": 1200}"#,
        |a: CellArgs, _| {
            let at = cell_address(&a.cell)
                .ok_or_else(|| format!("`cell` {:?} is not a cell address such as \"B3\"", a.cell))?;
            if a.value.is_none() && a.text.is_none() {
                return Err("give `value`, `text` or both: the cell is checked against them".into());
            }
            Ok(Cell { a, at })
        },
    );
    lib.add(
        "spreadsheet_row",
        "A row of an OpenDocument spreadsheet (first sheet unless named) starts with the given cells.",
        Reads::Env(ANY),
        r#"{"path": "~/countries.ods", "cells": ["Canada", "Ottawa"], "ignore_case": true}"#,
        |a: RowArgs, _| {
            if a.cells.is_empty() {
                return Err("`cells` is empty: give the row's first cells".into());
            }
            Ok(Row { a })
        },
    );
}

#[cfg(test)]
mod tests {
    use super::super::replies::archive;
    use super::*;

    #[test]
    fn odt_paragraphs_keep_spaces_tabs_entities_and_order() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>
<text:h text:outline-level="1">Title &amp; more</text:h>
<text:p text:style-name="P1">one<text:s text:c="3"/>two<text:tab/>three</text:p>
<text:p/>
<text:p>caf&#233; <text:span text:style-name="T1">bold</text:span><text:line-break/>next</text:p>
</office:text></office:body></office:document-content>"#;
        let bytes = archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.text"),
            ("content.xml", xml),
        ]);
        let doc = parse(&bytes).unwrap();
        assert_eq!(doc.kind(), "OpenDocument text");
        assert_eq!(
            doc.lines(),
            vec!["Title & more", "one   two\tthree", "", "café bold\nnext"]
        );
    }

    #[test]
    fn docx_text_comes_only_from_text_runs() {
        let xml = r#"<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>
<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Hello</w:t></w:r><w:r><w:tab/><w:t xml:space="preserve"> world</w:t></w:r></w:p>
<w:p><w:r><w:instrText>PAGE</w:instrText><w:t>second</w:t></w:r></w:p>
</w:body></w:document>"#;
        let bytes = archive(&[
            ("[Content_Types].xml", "<Types/>"),
            ("word/document.xml", xml),
        ]);
        let doc = parse(&bytes).unwrap();
        assert_eq!(doc.kind(), "DOCX document");
        assert_eq!(doc.lines(), vec!["Hello\t world", "second"]);
    }

    #[test]
    fn ods_rows_expand_repeats_but_not_the_empty_grid() {
        let xml = r#"<office:document-content xmlns:office="o" xmlns:table="t" xmlns:text="x"><office:body><office:spreadsheet>
<table:table table:name="Countries">
<table:table-row><table:table-cell office:value-type="string"><text:p>Canada</text:p></table:table-cell><table:table-cell><text:p>Ottawa</text:p></table:table-cell><table:table-cell office:value-type="float" office:value="40000000"><text:p>40,000,000</text:p></table:table-cell><table:table-cell table:number-columns-repeated="1021"/></table:table-row>
<table:table-row table:number-rows-repeated="2"><table:table-cell table:number-columns-repeated="1024"/></table:table-row>
<table:table-row><table:table-cell table:number-columns-repeated="2"/><table:table-cell table:number-columns-repeated="2"><text:p>x</text:p></table:table-cell></table:table-row>
<table:table-row table:number-rows-repeated="1048570"><table:table-cell table:number-columns-repeated="1024"/></table:table-row>
</table:table>
<table:table table:name="Other"><table:table-row><table:table-cell><text:p>a</text:p><text:p>b</text:p></table:table-cell></table:table-row></table:table>
</office:spreadsheet></office:body></office:document-content>"#;
        let bytes = archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.spreadsheet"),
            ("content.xml", xml),
        ]);
        let Document::Sheets(sheets) = parse(&bytes).unwrap() else {
            panic!("not sheets");
        };
        assert_eq!(sheets.len(), 2);
        assert_eq!(sheets[0].name, "Countries");
        assert_eq!(
            sheets[0].rows,
            vec![
                vec!["Canada", "Ottawa", "40,000,000"],
                vec![],
                vec![],
                vec!["", "", "x", "x"],
            ]
        );
        assert_eq!(sheets[1].rows, vec![vec!["a\nb"]]);
    }

    #[test]
    fn cells_are_found_by_address_and_judged_by_value_or_text() {
        let content = r#"<office:document-content xmlns:office="o" xmlns:table="t" xmlns:text="x"><office:body><office:spreadsheet><table:table table:name="Budget">
<table:table-row><table:table-cell office:value-type="string"><text:p>Rent</text:p></table:table-cell><table:table-cell office:value-type="currency" office:value="1200"><text:p>$1,200.00</text:p></table:table-cell></table:table-row>
<table:table-row table:number-rows-repeated="2"><table:table-cell table:number-columns-repeated="1024"/></table:table-row>
<table:table-row><table:table-cell table:number-columns-repeated="2"/><table:table-cell office:value-type="string"><text:p>1200</text:p></table:table-cell></table:table-row>
</table:table></office:spreadsheet></office:body></office:document-content>"#;
        let ods = archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.spreadsheet"),
            ("content.xml", content),
        ]);
        let reply: ProbeResult = Ok(ProbeReply::File(Some(FileContent {
            path: "~/b.ods".into(),
            total_size: ods.len() as u64,
            bytes: ods,
        })));
        let lib = Library::standard();
        let judge = |args: serde_json::Value| {
            let mut args = args;
            args["path"] = "~/b.ods".into();
            let c = lib.build("spreadsheet_cell", &args).unwrap();
            c.judge(&[&reply], &AgentLog::default()).unwrap()
        };
        let v = judge(serde_json::json!({"cell": "B1", "value": 1200}));
        assert!(v.passed, "{v:?}");
        assert_eq!(
            v.feedback,
            "cell B1 of sheet 'Budget' holds 1200 (shown as '$1,200.00')"
        );
        assert!(
            judge(
                serde_json::json!({"cell": "a1", "text": {"equals": "rent", "ignore_case": true}})
            )
            .passed
        );
        // A number typed as text is not the number; another cell is another cell.
        let v = judge(serde_json::json!({"cell": "C4", "value": 1200}));
        assert!(
            !v.passed && v.feedback.contains("holds the text '1200'"),
            "{v:?}"
        );
        assert!(!judge(serde_json::json!({"cell": "B4", "value": 1200})).passed);
        let v = judge(serde_json::json!({"cell": "B1", "value": 120}));
        assert!(v.feedback.ends_with(", expected the number 120"), "{v:?}");
        let v = judge(serde_json::json!({"cell": "Z99", "text": {"equals": ""}}));
        assert!(v.passed && v.feedback.contains("is empty"), "{v:?}");
        assert_eq!(cell_address("AA10"), Some((9, 26)));
        for bad in ["B0", "1B", "B", "ABCD1", ""] {
            assert_eq!(cell_address(bad), None, "{bad}");
        }
        assert!(
            lib.build(
                "spreadsheet_cell",
                &serde_json::json!({"path": "x", "cell": "B1"})
            )
            .is_err()
        );
    }

    #[test]
    fn document_types_are_named_in_words() {
        use crate::eval::functions::replies::{file, judge};
        let odt = archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.text"),
            ("content.xml", "<office:document-content/>"),
        ]);
        let docx = archive(&[("word/document.xml", "<w:document/>")]);
        let kind = |kind: &str, reply: ProbeResult| {
            judge(
                "document_type",
                serde_json::json!({"path": "/p", "kind": kind}),
                &[reply],
            )
            .feedback
        };
        assert_eq!(kind("odt", file(&odt)), "file /p is an OpenDocument text");
        assert_eq!(
            kind("odt", file(&docx)),
            "file /p is a DOCX document, expected an OpenDocument text"
        );
        assert_eq!(
            kind("docx", file(b"plain")),
            "file /p is a text file, expected a DOCX document"
        );
        assert_eq!(
            kind("text", file(b"%PDF-1.7")),
            "file /p is not a text file: it is a PDF file, and pincer does not extract text from PDF"
        );
        assert_eq!(
            kind("odt", Ok(ProbeReply::File(None))),
            "file /p does not exist, expected an OpenDocument text"
        );
        let row = |sheet: Option<&str>, reply: ProbeResult| {
            let mut args = serde_json::json!({"path": "/p", "cells": ["Rent"]});
            if let Some(s) = sheet {
                args["sheet"] = s.into();
            }
            judge("spreadsheet_row", args, &[reply]).feedback
        };
        assert_eq!(
            row(None, file(&odt)),
            "file /p is an OpenDocument text, not a spreadsheet"
        );
        let ods = |xml: &str| {
            file(&archive(&[
                ("mimetype", "application/vnd.oasis.opendocument.spreadsheet"),
                ("content.xml", xml),
            ]))
        };
        let budget = r#"<office:document-content xmlns:office="o" xmlns:table="t" xmlns:text="x"><office:body><office:spreadsheet><table:table table:name="Budget"><table:table-row><table:table-cell><text:p>Rent</text:p></table:table-cell><table:table-cell><text:p>1200</text:p></table:table-cell></table:table-row></table:table><table:table table:name="Empty"/></office:spreadsheet></office:body></office:document-content>"#;
        assert_eq!(
            row(None, ods(budget)),
            "row 1 of sheet 'Budget' in /p starts with 'Rent'"
        );
        assert_eq!(
            row(Some("Data"), ods(budget)),
            "spreadsheet /p has no sheet 'Data' (sheets: 'Budget', 'Empty')"
        );
        assert_eq!(
            row(Some("Empty"), ods(budget)),
            "sheet 'Empty' in /p is empty, expected a row starting with 'Rent'"
        );
        assert_eq!(
            row(None, ods("<office:document-content/>")),
            "spreadsheet /p has no sheets"
        );
    }

    #[test]
    fn other_files_are_text_or_refused_with_a_reason() {
        assert_eq!(
            parse(b"line 1\r\nline 2\n").unwrap().lines(),
            vec!["line 1", "line 2", ""]
        );
        assert_eq!(parse(b"%PDF-1.7\n...").unwrap_err(), DocError::Pdf);
        assert_eq!(
            parse(b"\x89PNG\r\n\x1a\n\0\0").unwrap_err(),
            DocError::Binary
        );
        let jar = archive(&[("META-INF/MANIFEST.MF", "Manifest-Version: 1.0")]);
        assert_eq!(parse(&jar).unwrap_err(), DocError::UnknownArchive);
        let broken = archive(&[
            ("mimetype", "application/vnd.oasis.opendocument.text"),
            ("content.xml", "<text:p>unclosed</text:q>"),
        ]);
        assert!(
            matches!(parse(&broken), Err(DocError::Xml { .. })),
            "{:?}",
            parse(&broken)
        );
        assert!(matches!(
            parse(&b"PK\x03\x04 truncated"[..]),
            Err(DocError::Archive(_))
        ));
    }

    #[test]
    fn clipboard_lines_drop_only_the_trailing_newline() {
        assert_eq!(clipboard_lines("a\r\n\nb\n\n"), vec!["a", "", "b"]);
        assert!(clipboard_lines("\n").is_empty());
    }
}

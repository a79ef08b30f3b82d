//! How checkpoint functions compare text: one [`TextMatch`] with one JSON shape ([`SHAPES`]),
//! used by every function that judges a text (a file's, a document's, the clipboard's, a
//! window title, a command's output, the agent's answer, a phone's UI node or setting).

use schemars::JsonSchema;
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

/// The JSON shape of a [`TextMatch`], as `pincer task functions` and the README show it.
pub const SHAPES: &str = r#"A text match (TextMatch) is an object with exactly one rule:
  {"contains": "buy milk"}                     the text contains this
  {"equals": "42"}                             the whole text is this
  {"regex": "^total: [0-9]+$"}                 the regular expression (Rust syntax) matches
  {"digits": "+1 (555) 010"}                   the text's digits are these digits
and two options for any rule:
  "ignore_case": true                          compare without case (default false)
  "trim": false                                whitespace at both ends of the text (and of
                                               an `equals` text) counts (default: ignored
                                               for `equals`, kept for the rest)
A regex matches anywhere unless anchored; `$` also matches before a final line break."#;

/// A test of a text, in the shape [`SHAPES`] shows.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "Spec")]
pub struct TextMatch {
    rule: Rule,
    ignore_case: bool,
    trim: bool,
}

#[derive(Debug, Clone)]
enum Rule {
    /// The wanted text, lowercased already when comparing without case.
    Contains(String),
    Equals(String),
    Regex(regex::Regex),
    /// The wanted digits only.
    Digits(String),
}

/// Why a text match cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextMatchError {
    /// No rule, or more than one.
    #[error(
        "give exactly one of `contains`, `equals`, `regex` or `digits` (e.g. {{\"contains\": \"hello\"}})"
    )]
    OneRule,
    /// The regular expression does not compile.
    #[error("`regex` is not a valid regular expression: {0}")]
    Regex(String),
    /// A `digits` value without digits.
    #[error("`digits` '{0}' holds no digits")]
    NoDigits(String),
}

/// Checkpoint builders report bad argument values as text (see [`super::functions`]).
impl From<TextMatchError> for String {
    fn from(e: TextMatchError) -> Self {
        e.to_string()
    }
}

/// The JSON shape, before it is checked to name exactly one rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    equals: Option<String>,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    digits: Option<String>,
    #[serde(default)]
    ignore_case: bool,
    #[serde(default)]
    trim: Option<bool>,
}

impl TryFrom<Spec> for TextMatch {
    type Error = TextMatchError;

    fn try_from(s: Spec) -> Result<Self, TextMatchError> {
        let rules = [
            s.contains.map(|t| ("contains", t)),
            s.equals.map(|t| ("equals", t)),
            s.regex.map(|t| ("regex", t)),
            s.digits.map(|t| ("digits", t)),
        ];
        let mut given = rules.into_iter().flatten();
        let (Some((rule, text)), None) = (given.next(), given.next()) else {
            return Err(TextMatchError::OneRule);
        };
        let m = match rule {
            "contains" => Self::contains(&text),
            "equals" => Self::equals(&text),
            "regex" => Self::regex(&text, s.ignore_case)?,
            _ => Self::digits(&text)?,
        };
        Ok(match s.trim {
            Some(trim) => m.trimmed(trim),
            None => m,
        }
        .ignoring_case(s.ignore_case))
    }
}

impl TextMatch {
    /// The text contains `want`.
    pub fn contains(want: &str) -> Self {
        Self {
            rule: Rule::Contains(want.to_owned()),
            ignore_case: false,
            trim: false,
        }
    }

    /// The whole text is `want`, surrounding whitespace ignored (see [`Self::trimmed`]).
    pub fn equals(want: &str) -> Self {
        Self {
            rule: Rule::Equals(want.to_owned()),
            ignore_case: false,
            trim: true,
        }
    }

    /// The regular expression matches somewhere in the text.
    pub fn regex(pattern: &str, ignore_case: bool) -> Result<Self, TextMatchError> {
        let re = regex::RegexBuilder::new(pattern)
            .case_insensitive(ignore_case)
            .build()
            .map_err(|e| TextMatchError::Regex(e.to_string()))?;
        Ok(Self {
            rule: Rule::Regex(re),
            ignore_case,
            trim: false,
        })
    }

    /// The text's digits are the digits of `want` (other characters ignored on both sides).
    pub fn digits(want: &str) -> Result<Self, TextMatchError> {
        let d = digits_of(want);
        if d.is_empty() {
            return Err(TextMatchError::NoDigits(want.to_owned()));
        }
        Ok(Self {
            rule: Rule::Digits(d),
            ignore_case: false,
            trim: false,
        })
    }

    /// Compares without case (or with, for `false`).
    #[must_use]
    pub fn ignoring_case(mut self, ignore_case: bool) -> Self {
        if ignore_case && !self.ignore_case {
            self.rule = match self.rule {
                Rule::Contains(w) => Rule::Contains(w.to_lowercase()),
                Rule::Equals(w) => Rule::Equals(w.to_lowercase()),
                Rule::Regex(re) => Rule::Regex(
                    regex::RegexBuilder::new(re.as_str())
                        .case_insensitive(true)
                        .build()
                        // The same pattern compiled a moment ago; the flag cannot break it.
                        .unwrap_or(re),
                ),
                digits @ Rule::Digits(_) => digits,
            };
        }
        self.ignore_case |= ignore_case;
        self
    }

    /// Ignores whitespace at both ends of the observed text (and of an `equals` text).
    #[must_use]
    pub fn trimmed(mut self, trim: bool) -> Self {
        self.trim = trim;
        self
    }

    /// Whether `text` passes.
    pub fn test(&self, text: &str) -> bool {
        let text = if self.trim { text.trim() } else { text };
        match &self.rule {
            Rule::Digits(want) => digits_of(text) == *want,
            Rule::Regex(re) => re.is_match(without_final_break(text)),
            Rule::Contains(want) => self.fold(text).contains(want.as_str()),
            Rule::Equals(want) => *self.fold(text) == *if self.trim { want.trim() } else { want },
        }
    }

    /// The observed text as it is compared: lowercased when comparing without case.
    fn fold<'t>(&self, text: &'t str) -> Cow<'t, str> {
        if self.ignore_case {
            Cow::Owned(text.to_lowercase())
        } else {
            Cow::Borrowed(text)
        }
    }

    /// The part of `text` a regex matched, for feedback (`None` for other rules or no
    /// match).
    pub fn matched<'t>(&self, text: &'t str) -> Option<&'t str> {
        match &self.rule {
            Rule::Regex(re) => {
                let text = if self.trim { text.trim() } else { text };
                re.find(without_final_break(text)).map(|m| m.as_str())
            }
            _ => None,
        }
    }

    /// Where the wanted text of a `contains` rule first occurs in `text`, as a byte range
    /// of it, for feedback (`None` for other rules or no occurrence).
    pub fn occurrence(&self, text: &str) -> Option<Range<usize>> {
        let Rule::Contains(want) = &self.rule else {
            return None;
        };
        let lead = if self.trim {
            text.len() - text.trim_start().len()
        } else {
            0
        };
        let text = if self.trim { text.trim() } else { text };
        let found = if self.ignore_case {
            folded_find(text, want)?
        } else {
            let at = text.find(want.as_str())?;
            at..at + want.len()
        };
        Some(found.start + lead..found.end + lead)
    }
}

/// The range of `text` whose lowercase holds `want` (lowercase already). Lowercasing may
/// change a character's length in bytes, so the position found in the lowercased text is
/// mapped back character by character.
fn folded_find(text: &str, want: &str) -> Option<Range<usize>> {
    let at = text.to_lowercase().find(want)?;
    let (mut folded, mut start) = (0, None);
    for (i, c) in text.char_indices() {
        if start.is_none() && folded >= at {
            start = Some(i);
        }
        if folded >= at + want.len() {
            return Some(start.unwrap_or(i)..i);
        }
        folded += c.to_lowercase().map(char::len_utf8).sum::<usize>();
    }
    Some(start.unwrap_or(text.len())..text.len())
}

/// What a text must be, for feedback: "containing 'x'", "equal to 'x' (ignoring case)".
impl fmt::Display for TextMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rule {
            Rule::Contains(w) => write!(f, "containing '{}'", clip(w, 60))?,
            Rule::Equals(w) => write!(f, "equal to '{}'", clip(w, 60))?,
            Rule::Regex(re) => write!(f, "matching /{}/", clip(re.as_str(), 60))?,
            Rule::Digits(w) => write!(f, "with the digits {}", clip(w, 60))?,
        }
        if self.ignore_case && !matches!(self.rule, Rule::Digits(_)) {
            f.write_str(" (ignoring case)")?;
        }
        Ok(())
    }
}

/// Cuts text for feedback lines: at most `n` characters, then '…', on one line with line
/// breaks (⏎), lone carriage returns (␍), tabs (⇥) and other control characters (�)
/// made visible, so a feedback line never breaks or hides what it quotes.
pub(crate) fn clip(s: &str, n: usize) -> String {
    let mut chars = visible(s);
    let mut out: String = chars.by_ref().take(n).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Characters shown on each side of a hit by [`excerpt`].
const AROUND: usize = 20;

/// The text around `hit` (a byte range of `text`): up to 20 characters on each side, with
/// '…' where more was left out, made visible as [`clip`] does; the hit itself is cut to 60
/// characters.
pub(crate) fn excerpt(text: &str, hit: Range<usize>) -> String {
    let (before, found, after) = (&text[..hit.start], &text[hit.clone()], &text[hit.end..]);
    let from = before
        .char_indices()
        .rev()
        .nth(AROUND - 1)
        .map_or(0, |(i, _)| i);
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.extend(visible(&before[from..]));
    out.push_str(&clip(found, 60));
    out.push_str(&clip(after, AROUND));
    out
}

/// `s` as it is shown in feedback (see [`clip`]); a `\r\n` shows as one line break.
fn visible(s: &str) -> impl Iterator<Item = char> + '_ {
    let mut chars = s.chars().peekable();
    std::iter::from_fn(move || {
        loop {
            let c = chars.next()?;
            return Some(match c {
                '\r' if chars.peek() == Some(&'\n') => continue,
                '\n' => '⏎',
                '\r' => '␍',
                '\t' => '⇥',
                c if c.is_control() => '�',
                c => c,
            });
        }
    })
}

fn digits_of(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// The text without one final line break (`\n` or `\r\n`), so `$` matches at the end of a
/// file an editor saved.
fn without_final_break(text: &str) -> &str {
    text.strip_suffix('\n')
        .map_or(text, |t| t.strip_suffix('\r').unwrap_or(t))
}

/// The schema says what the deserializer accepts: an object with exactly one rule.
impl JsonSchema for TextMatch {
    fn schema_name() -> Cow<'static, str> {
        "TextMatch".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "How a text is compared: exactly one of `contains`, `equals`, `regex`, `digits`; `ignore_case` (default false) and `trim` (default true for `equals`) adjust it.",
            "type": "object",
            "properties": {
                "contains": {"type": "string", "description": "The text contains this."},
                "equals": {"type": "string", "description": "The whole text is this."},
                "regex": {"type": "string", "description": "A regular expression (Rust syntax) that matches somewhere in the text; `$` also matches before a final line break."},
                "digits": {"type": "string", "description": "The text's digits are this value's digits; other characters are ignored."},
                "ignore_case": {"type": "boolean", "default": false, "description": "Compare without case."},
                "trim": {"type": "boolean", "description": "Ignore whitespace at both ends (default true for `equals`, false otherwise)."}
            },
            "additionalProperties": false,
            "oneOf": [
                {"required": ["contains"]},
                {"required": ["equals"]},
                {"required": ["regex"]},
                {"required": ["digits"]}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<TextMatch, String> {
        serde_json::from_str::<TextMatch>(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_rule_judges_as_named() {
        let m = parse(r#"{"contains": "milk"}"#).unwrap();
        assert!(m.test("buy milk\n") && !m.test("buy Milk"));
        let m = parse(r#"{"equals": "42"}"#).unwrap();
        assert!(m.test("42\n") && m.test(" 42") && !m.test("421") && !m.test("4 2"));
        let m = parse(r#"{"equals": "42", "trim": false}"#).unwrap();
        assert!(m.test("42") && !m.test("42\n"));
        let m = parse(r#"{"regex": "^total: [0-9]+$"}"#).unwrap();
        assert!(m.test("total: 12\n") && m.test("total: 12\r\n") && !m.test("total: 12\n\n"));
        assert_eq!(m.matched("total: 12\n"), Some("total: 12"));
        let m = parse(r#"{"digits": "+1 (555) 010"}"#).unwrap();
        assert!(m.test("15550 10") && !m.test("1555011"));
    }

    #[test]
    fn case_and_whitespace_are_options_of_every_rule() {
        let m = parse(r#"{"contains": "Ottawa", "ignore_case": true}"#).unwrap();
        assert!(m.test("OTTAWA, Canada"));
        let m = parse(r#"{"equals": "Prefer-Dark", "ignore_case": true}"#).unwrap();
        assert!(m.test("prefer-dark\n") && !m.test("prefer-dark2"));
        let m = parse(r#"{"regex": "^yes$", "ignore_case": true}"#).unwrap();
        assert!(m.test("YES"));
        let m = parse(r#"{"regex": "^yes$", "trim": true}"#).unwrap();
        assert!(m.test("  yes  ") && !m.test("  yes no"));
        // Built in code, the options compose the same way.
        let m = TextMatch::contains("Milk").ignoring_case(true);
        assert!(m.test("buy MILK"));
        assert_eq!(m.to_string(), "containing 'milk' (ignoring case)");
    }

    #[test]
    fn shapes_that_name_no_rule_or_two_are_refused_saying_what_to_give() {
        for bad in [
            r#"{}"#,
            r#"{"ignore_case": true}"#,
            r#"{"contains": "a", "equals": "a"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("exactly one of `contains`"), "{bad}: {e}");
        }
        assert!(
            parse(r#"{"contain": "a"}"#)
                .unwrap_err()
                .contains("unknown field `contain`")
        );
        assert!(
            parse(r#"{"regex": "("}"#)
                .unwrap_err()
                .contains("not a valid regular expression")
        );
        assert!(
            parse(r#"{"digits": "abc"}"#)
                .unwrap_err()
                .contains("holds no digits")
        );
    }

    #[test]
    fn quotes_stay_on_one_line_and_show_what_is_invisible() {
        assert_eq!(clip("a\r\nb\rc\td\u{7}e\u{0}", 60), "a⏎b␍c⇥d�e�");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(
            excerpt("0123456789 hit 0123456789 and more and more", 11..14),
            "0123456789 hit 0123456789 and more…"
        );
        let long = TextMatch::regex(&format!("^{}$", "a".repeat(100)), false).unwrap();
        assert_eq!(long.to_string(), format!("matching /^{}…/", "a".repeat(59)));
    }

    #[test]
    fn occurrences_are_ranges_of_the_original_text() {
        let m = TextMatch::contains("needle");
        assert_eq!(m.occurrence("a needle"), Some(2..8));
        assert_eq!(m.occurrence("a Needle"), None);
        let m = TextMatch::contains("NEEDLE").ignoring_case(true);
        // 'İ' is 2 bytes and lowercases to 3.
        assert_eq!(m.occurrence("İİ needle x"), Some(5..11));
        let m = TextMatch::contains("x").trimmed(true);
        assert_eq!(m.occurrence("  x "), Some(2..3));
        assert_eq!(TextMatch::equals("x").occurrence("x"), None);
    }

    #[test]
    fn only_one_final_line_break_is_dropped_for_regexes() {
        assert_eq!(without_final_break("2\n"), "2");
        assert_eq!(without_final_break("2\r\n"), "2");
        assert_eq!(without_final_break("a\nb\n\n"), "a\nb\n");
        assert_eq!(without_final_break("2"), "2");
    }

    #[test]
    fn the_schema_lists_every_field_the_parser_takes() {
        let schema = serde_json::to_value(schemars::schema_for!(TextMatch)).unwrap();
        let props = schema["properties"].as_object().unwrap();
        let mut names: Vec<&str> = props.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "contains",
                "digits",
                "equals",
                "ignore_case",
                "regex",
                "trim"
            ]
        );
        for name in names {
            let one = match name {
                "ignore_case" => format!(r#"{{"contains": "a", "{name}": true}}"#),
                "trim" => format!(r#"{{"equals": "a", "{name}": true}}"#),
                _ => format!(r#"{{"{name}": "1"}}"#),
            };
            parse(&one).unwrap_or_else(|e| panic!("{one}: {e}"));
        }
    }
}

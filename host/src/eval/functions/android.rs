//! Android: the foreground app, settings and content providers read through the Android
//! shim's typed probes (`Probe::Android`), and the UI hierarchy through its UI-tree probe.
//! The shim runs Android's own commands and parses their output across Android versions,
//! so these checks judge typed answers, never `dumpsys` or `content` text; and as typed
//! probes are reads, read-only guests (phones people own) serve them.
//!
//! The shim's contract, which these checks rely on:
//! - `AndroidQuery::Foreground` names the resumed app, with its activity when one is
//!   named; `Setting` answers `None` for an unset key; `Content` answers one map per row,
//!   column to value, `None` for SQL NULL. A command that fails is a probe error.
//! - `Probe::UiTree` returns the hierarchy `uiautomator dump` shows, in document order,
//!   one [`UiNode`] per `<node>`: `name` = `content-desc` when it is not empty, else
//!   `text`; `text` = `text` (`None` when empty); `attributes` `resource-id`, `class` and
//!   `package` copied verbatim, and `content-desc` verbatim only when it is not empty.
//!   The name mixes the two, so checks read the `content-desc` attribute, not the name.

use super::{Library, Reads, clip, count, judge_text, quoted};
use crate::eval::text::TextMatch;
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use pincer_shared::Platform;
use pincer_shared::android::{AndroidAnswer, AndroidQuery, Namespace};
use pincer_shared::observe::TreeRequest;
use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::tree::UiNode;
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;

pub(super) const ANDROID: &[Platform] = &[Platform::Android];

pub(super) fn tree_probe() -> Probe {
    Probe::UiTree(TreeRequest::default())
}

pub(super) fn tree(r: &ProbeResult) -> Result<&UiNode, EvalError> {
    match reply(r, "ui tree")? {
        ProbeReply::UiTree(t) => Ok(&t.root),
        other => Err(unexpected("ui tree", other)),
    }
}

/// A node's `resource-id`.
fn rid(n: &UiNode) -> &str {
    n.attributes.get("resource-id").map_or("", String::as_str)
}

/// A node's widget class ("android.widget.TextView").
fn class(n: &UiNode) -> &str {
    n.attributes.get("class").map_or("", String::as_str)
}

/// A node's `content-desc` (the shim keeps the attribute only when it is not empty).
fn desc(n: &UiNode) -> &str {
    n.attributes.get("content-desc").map_or("", String::as_str)
}

/// A node's `text`.
pub(super) fn text(n: &UiNode) -> &str {
    n.text.as_deref().unwrap_or("")
}

/// Every node in document order (the order of `<node>` elements in a uiautomator dump).
fn nodes(root: &UiNode) -> impl Iterator<Item = &UiNode> {
    root.walk().map(|(_, n)| n)
}

pub(super) fn with_id<'a>(root: &'a UiNode, id: &'a str) -> impl Iterator<Item = &'a UiNode> {
    nodes(root).filter(move |n| rid(n) == id)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ForegroundArgs {
    /// Package name, or a part of the `package/activity` component (CRAB matches substrings).
    package: String,
}

/// The resumed (foreground) activity belongs to a package.
#[derive(Debug)]
struct Foreground {
    package: String,
}

impl Check for Foreground {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Android(AndroidQuery::Foreground)]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let front = match reply(r[0], "foreground app")? {
            ProbeReply::Android(AndroidAnswer::Foreground(f)) => f,
            other => return Err(unexpected("foreground app", other)),
        };
        let pkg = &self.package;
        let want = format!("an activity whose component contains '{pkg}'");
        let Some(app) = front else {
            return Ok(Verdict::fail(format!(
                "no app is in front, expected {want}"
            )));
        };
        // CRAB matched substrings of the `package/activity` component; a device that names
        // no activity leaves the package alone to match.
        let (seen, component) = match &app.activity {
            Some(act) => ("activity", format!("{}/{act}", app.package)),
            None => ("app", app.package.clone()),
        };
        let shown = format!("the foreground {seen} is {}", clip(&component, 160));
        Ok(Verdict::when(
            component.contains(pkg.as_str()),
            shown.clone(),
            format!("{shown}, expected {want}"),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NodeArgs {
    /// The node's `resource-id`, exactly ("com.android.dialer:id/digits").
    #[serde(default)]
    resource_id: Option<String>,
    /// The node's widget class, exactly ("android.widget.EditText").
    #[serde(default)]
    class: Option<String>,
    /// A test of the node's `text`.
    #[serde(default)]
    text: Option<TextMatch>,
    /// A test of the node's `content-desc`.
    #[serde(default)]
    content_desc: Option<TextMatch>,
    /// Only the first node (in document order) with that id and class counts, as CRAB's
    /// `xpath(...)[0]` does; otherwise any may match.
    #[serde(default)]
    first: bool,
}

/// A node of the Android UI hierarchy with a resource id or class whose text and
/// content description pass tests.
#[derive(Debug)]
struct Node {
    resource_id: Option<String>,
    class: Option<String>,
    text: Option<TextMatch>,
    desc: Option<TextMatch>,
    first: bool,
}

impl Node {
    /// Which nodes are candidates: "id X, class Y" (empty when any node is).
    fn selection(&self) -> String {
        let mut parts = Vec::new();
        if let Some(id) = &self.resource_id {
            parts.push(format!("id {id}"));
        }
        if let Some(c) = &self.class {
            parts.push(format!("class {c}"));
        }
        parts.join(", ")
    }

    /// What a candidate must show: "text containing 'x', content-desc equal to 'y'".
    fn tests(&self, sep: &str) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.text {
            parts.push(format!("text {t}"));
        }
        if let Some(t) = &self.desc {
            parts.push(format!("content-desc {t}"));
        }
        parts.join(sep)
    }

    /// The node sought: "node with id X, text containing 'y'".
    fn describe(&self) -> String {
        let parts: Vec<String> = [self.selection(), self.tests(", ")]
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        format!("node with {}", parts.join(", "))
    }
}

/// What a node shows: "text 'x' and content-desc 'y'", leaving out what is empty.
fn show(n: &UiNode) -> String {
    let mut parts = Vec::new();
    if !text(n).is_empty() {
        parts.push(format!("text '{}'", clip(text(n), 40)));
    }
    if !desc(n).is_empty() {
        parts.push(format!("content-desc '{}'", clip(desc(n), 40)));
    }
    if parts.is_empty() {
        "no text and no content-desc".to_owned()
    } else {
        parts.join(" and ")
    }
}

impl Check for Node {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let candidates: Vec<&UiNode> = nodes(root)
            .filter(|n| self.resource_id.as_deref().is_none_or(|id| rid(n) == id))
            .filter(|n| self.class.as_deref().is_none_or(|c| class(n) == c))
            .take(if self.first { 1 } else { usize::MAX })
            .collect();
        let ok = |n: &&&UiNode| {
            self.text.as_ref().is_none_or(|t| t.test(text(n)))
                && self.desc.as_ref().is_none_or(|t| t.test(desc(n)))
        };
        let (selection, tests) = (self.selection(), self.tests(" and "));
        Ok(match (candidates.iter().find(ok), candidates.first()) {
            (Some(n), _) if self.first => {
                Verdict::pass(format!("the first node with {selection} has {}", show(n)))
            }
            (Some(n), _) => Verdict::pass(format!("found a {}: {}", self.describe(), show(n))),
            // Without an id or class every node is a candidate: listing them says nothing.
            (None, None) | (None, Some(_)) if selection.is_empty() => {
                Verdict::fail(format!("the screen shows no {}", self.describe()))
            }
            (None, None) => Verdict::fail(format!("the screen shows no node with {selection}")),
            (None, Some(n)) if self.first => Verdict::fail(format!(
                "the first node with {selection} has {}, expected {tests}",
                show(n)
            )),
            (None, Some(n)) if candidates.len() == 1 => Verdict::fail(format!(
                "the only node with {selection} has {}, expected {tests}",
                show(n)
            )),
            (None, Some(n)) => Verdict::fail(format!(
                "none of the {} with {selection} has {tests}; the first has {}",
                count(candidates.len() as u64, "node"),
                show(n)
            )),
        })
    }
}

/// Classes of Google Calendar's event list (support library, then AndroidX).
const RECYCLER_VIEWS: &[&str] = &[
    "android.support.v7.widget.RecyclerView",
    "androidx.recyclerview.widget.RecyclerView",
];

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CalendarArgs {
    /// Text of the date as the list's content descriptions write it ("17 August 2024").
    date: String,
    /// Text of the event ("Jeju"), if the event itself must be listed too.
    #[serde(default)]
    content: Option<String>,
    /// Compare ignoring case.
    #[serde(default)]
    ignore_case: bool,
}

/// The first list on screen (Calendar's schedule) has an item whose content description
/// holds the date, and, with `content`, an item that holds the event's text.
#[derive(Debug)]
struct Calendar {
    a: CalendarArgs,
}

impl Check for Calendar {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let Some(list) = nodes(root).find(|n| RECYCLER_VIEWS.contains(&class(n))) else {
            return Ok(Verdict::fail(
                "the screen shows no event list (RecyclerView)",
            ));
        };
        let has = |want: &str| {
            let m = TextMatch::contains(want).ignoring_case(self.a.ignore_case);
            list.children.iter().any(|c| m.test(desc(c)))
        };
        let date_ok = has(&self.a.date);
        let content_ok = self.a.content.as_deref().is_none_or(has);
        let want = match &self.a.content {
            Some(c) => format!("the date '{}' and the event '{c}'", self.a.date),
            None => format!("the date '{}'", self.a.date),
        };
        // Spacer items have no description.
        let items: Vec<&str> = list
            .children
            .iter()
            .map(desc)
            .filter(|d| !d.is_empty())
            .collect();
        Ok(if date_ok && content_ok {
            Verdict::pass(format!("the event list shows {want}"))
        } else if items.is_empty() {
            Verdict::fail(format!("the event list is empty, expected {want}"))
        } else {
            Verdict::fail(format!(
                "the event list shows {}, expected {want}",
                quoted(items, 120)
            ))
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ContactShownArgs {
    /// The contact's display name.
    pub(super) name: String,
}

/// Contacts shows the named contact's page with an email address on it.
#[derive(Debug)]
pub(super) struct ContactEmailShown {
    name: String,
    email: regex::Regex,
}

/// What pincer takes for an email address on a contact page.
const EMAIL: &str = r"^[\w.+-]+@[\w-]+(\.[\w-]+)+";

impl ContactEmailShown {
    /// The check for `name`'s page, with `email` the pattern the shown address must match.
    pub(super) fn new(name: String, email: &str) -> Result<Self, String> {
        let email = regex::Regex::new(email).map_err(|e| e.to_string())?;
        Ok(Self { name, email })
    }
}

const CONTACT_TITLE: &str = "com.android.contacts:id/photo_touch_intercept_overlay";
const CONTACT_HEADER: &str = "com.android.contacts:id/header";

impl Check for ContactEmailShown {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let Some(title) = with_id(root, CONTACT_TITLE).next() else {
            return Ok(Verdict::fail("the screen shows no contact page"));
        };
        let name = &self.name;
        if desc(title) != name {
            return Ok(Verdict::fail(format!(
                "the contact page is of '{}', expected '{name}'",
                clip(desc(title), 60)
            )));
        }
        let has_email_row = nodes(root)
            .any(|n| class(n) == "android.widget.RelativeLayout" && desc(n).contains("Email"));
        if !has_email_row {
            return Ok(Verdict::fail(format!(
                "the contact page of '{name}' shows no email row"
            )));
        }
        Ok(match with_id(root, CONTACT_HEADER).next() {
            Some(h) if self.email.is_match(text(h)) => Verdict::pass(format!(
                "the contact page of '{name}' shows the email '{}'",
                clip(text(h), 60)
            )),
            Some(h) => Verdict::fail(format!(
                "the contact page of '{name}' shows '{}', expected an email address",
                clip(text(h), 60)
            )),
            None => Verdict::fail(format!(
                "the contact page of '{name}' shows no email, expected an email address"
            )),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ContactSavedArgs {
    /// The contact's display name, exactly.
    name: String,
    /// An email address of the contact (compared ignoring case).
    mail: String,
}

/// The contacts provider holds a contact with this name and email.
#[derive(Debug)]
struct ContactSaved {
    a: ContactSavedArgs,
}

/// The contacts provider's email rows, each with its contact's display name joined in.
const CONTACT_EMAILS: &str = "content://com.android.contacts/data/emails";

/// Every email row, not a `selection` on the name: the feedback lists what is saved, and
/// the name would otherwise have to be quoted into SQL.
fn contact_emails() -> AndroidQuery {
    AndroidQuery::Content {
        uri: CONTACT_EMAILS.to_owned(),
        projection: vec!["display_name".to_owned(), "data1".to_owned()],
        selection: None,
        sort: None,
    }
}

/// A row's column; NULL and a column the row lacks both read as `None`.
fn column<'a>(row: &'a BTreeMap<String, Option<String>>, name: &str) -> Option<&'a str> {
    row.get(name).and_then(Option::as_deref)
}

impl Check for ContactSaved {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Android(contact_emails())]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let rows = match reply(r[0], "contacts' email rows")? {
            ProbeReply::Android(AndroidAnswer::Rows(rows)) => rows,
            other => return Err(unexpected("contacts' email rows", other)),
        };
        let rows: Vec<(Option<&str>, Option<&str>)> = rows
            .iter()
            .map(|row| (column(row, "display_name"), column(row, "data1")))
            .collect();
        let (name, mail) = (&self.a.name, &self.a.mail);
        let hit = rows.iter().any(|row| match *row {
            (Some(n), Some(m)) => {
                n.trim() == name.trim() && m.trim().eq_ignore_ascii_case(mail.trim())
            }
            _ => false,
        });
        let seen = clip(
            &rows
                .iter()
                .map(|(n, m)| format!("{} <{}>", n.unwrap_or("(no name)"), m.unwrap_or("")))
                .collect::<Vec<_>>()
                .join(", "),
            100,
        );
        Ok(Verdict::when(
            hit,
            format!("contact {name} <{mail}> is saved"),
            if rows.is_empty() {
                format!("no contact has an email address, expected {name} <{mail}>")
            } else {
                format!("the contacts with email addresses are {seen}, expected {name} <{mail}>")
            },
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PhotosArgs {
    /// Text the details panel must show in a label (the file's name or path).
    pub(super) file: String,
}

/// Google Photos' details panel shows the file and a date and time.
#[derive(Debug)]
pub(super) struct PhotosDetails {
    file: String,
    date: regex::Regex,
}

/// What pincer takes for the details panel's date and time ("Wed, May 5, 2024 • 9:32 AM").
const PHOTOS_DATE: &str = r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun),\s(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s\d{1,2},\s\d{4}\s•\s\d{1,2}:\d{2}\s(AM|PM)";

impl PhotosDetails {
    /// The check for `file`, with `date` the pattern the first label must match.
    pub(super) fn new(file: String, date: &str) -> Result<Self, String> {
        let date = regex::Regex::new(date).map_err(|e| e.to_string())?;
        Ok(Self { file, date })
    }
}

const PHOTOS_LABEL: &str = "com.google.android.apps.photos:id/label";

impl Check for PhotosDetails {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let has = |id: &str| with_id(root, id).next().is_some();
        if !has("com.google.android.apps.photos:id/exif_item_layout")
            || !has("com.google.android.apps.photos:id/datetime_item_layout")
        {
            return Ok(Verdict::fail("the screen shows no Photos details panel"));
        }
        let labels: Vec<&str> = with_id(root, PHOTOS_LABEL).map(text).collect();
        let file = &self.file;
        if !labels.iter().any(|l| l.contains(file.as_str())) {
            return Ok(Verdict::fail(if labels.is_empty() {
                format!("the details panel has no labels, expected one showing '{file}'")
            } else {
                format!(
                    "the details panel shows {}, expected a label showing '{file}'",
                    quoted(labels.iter().copied(), 100)
                )
            }));
        }
        // The date and time label comes first in the panel; there is one, as a label
        // shows the file.
        let first = clip(labels[0], 60);
        Ok(Verdict::when(
            self.date.is_match(labels[0]),
            format!("the details of '{file}' show the date '{first}'"),
            format!("the details panel's first label is '{first}', expected a date and time"),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GmailArgs {
    /// A recipient's address.
    mail: String,
    /// Text of the message body.
    content: String,
}

/// Gmail's compose screen has the recipient and the body.
#[derive(Debug)]
struct GmailCompose {
    a: GmailArgs,
}

impl Check for GmailCompose {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let (mail, content) = (&self.a.mail, &self.a.content);
        let chips: Vec<&str> = with_id(root, "com.google.android.gm:id/peoplekit_chip")
            .map(desc)
            .collect();
        if !chips.iter().any(|c| c.contains(mail.as_str())) {
            return Ok(Verdict::fail(if chips.is_empty() {
                format!("the message has no recipients, expected {mail}")
            } else {
                format!(
                    "the recipients are {}, expected {mail}",
                    quoted(chips.iter().copied(), 100)
                )
            }));
        }
        if with_id(root, "com.google.android.gm:id/body_wrapper")
            .next()
            .is_none()
        {
            return Ok(Verdict::fail(format!(
                "the screen shows no message body, expected one holding '{}'",
                clip(content, 60)
            )));
        }
        let found = nodes(root)
            .any(|n| class(n) == "android.widget.EditText" && text(n).contains(content.as_str()));
        Ok(Verdict::when(
            found,
            format!("a message to {mail} holds '{}'", clip(content, 60)),
            format!(
                "no text field of the message to {mail} holds '{}'",
                clip(content, 60)
            ),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct MapsArgs {
    /// Texts the search box must contain, each.
    contains: Vec<String>,
}

/// Google Maps' search box holds texts.
#[derive(Debug)]
struct MapsSearch {
    contains: Vec<String>,
}

impl Check for MapsSearch {
    fn probes(&self) -> Vec<Probe> {
        vec![tree_probe()]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let root = tree(r[0])?;
        let Some(bx) = with_id(
            root,
            "com.google.android.apps.maps:id/search_omnibox_text_box",
        )
        .next() else {
            return Ok(Verdict::fail("the screen shows no Maps search box"));
        };
        // The query is the box's last child (a hint or chip may come first).
        let wanted = || quoted(self.contains.iter().map(String::as_str), 100);
        let Some(q) = bx.children.last().and_then(|c| c.text.as_deref()) else {
            return Ok(Verdict::fail(format!(
                "the Maps search box is empty, expected {}",
                wanted()
            )));
        };
        let missing: Vec<&str> = self
            .contains
            .iter()
            .filter(|w| !q.contains(w.as_str()))
            .map(String::as_str)
            .collect();
        Ok(Verdict::when(
            missing.is_empty(),
            format!("the Maps search box holds '{}'", clip(q, 60)),
            format!(
                "the Maps search box holds '{}', without {}",
                clip(q, 60),
                quoted(missing, 100)
            ),
        ))
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SettingArgs {
    /// `system`, `secure` or `global`.
    namespace: String,
    /// The key ("bluetooth_name").
    key: String,
    /// A test of its value.
    value: TextMatch,
}

/// An Android setting (`settings get NAMESPACE KEY`).
#[derive(Debug)]
struct Setting {
    namespace: Namespace,
    key: String,
    value: TextMatch,
}

impl Setting {
    fn query(&self) -> AndroidQuery {
        AndroidQuery::Setting {
            namespace: self.namespace,
            key: self.key.clone(),
        }
    }
}

impl Check for Setting {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::Android(self.query())]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let setting = format!("setting {} {}", self.namespace.as_str(), self.key);
        match reply(r[0], &setting)? {
            ProbeReply::Android(AndroidAnswer::Setting(Some(got))) => {
                Ok(judge_text(&setting, got, &self.value))
            }
            ProbeReply::Android(AndroidAnswer::Setting(None)) => Ok(Verdict::fail(format!(
                "{setting} is not set, expected text {}",
                self.value
            ))),
            other => Err(unexpected(&setting, other)),
        }
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "android_foreground_app",
        "The app in front: its `package/activity` component contains the text (a substring, as CRAB matches).",
        Reads::Env(ANDROID),
        r#"{"package": "com.google.android.deskclock"}"#,
        |a: ForegroundArgs, _| {
            if a.package.trim().is_empty() {
                return Err("`package` is empty".into());
            }
            Ok(Foreground { package: a.package })
        },
    );
    lib.add(
        "android_node",
        "A node of the Android UI hierarchy, by resource id and/or class, whose text and content-desc pass text matches.",
        Reads::Env(ANDROID),
        r#"{"resource_id": "com.android.dialer:id/digits", "text": {"digits": "123 456"}, "first": true}"#,
        |a: NodeArgs, _| {
            if a.resource_id.is_none() && a.class.is_none() && a.text.is_none() && a.content_desc.is_none() {
                return Err("give `resource_id`, `class`, `text` or `content_desc`".into());
            }
            if a.first && a.resource_id.is_none() && a.class.is_none() {
                return Err("`first` needs a `resource_id` or `class` to pick the first node of".into());
            }
            Ok(Node {
                text: a.text,
                desc: a.content_desc,
                resource_id: a.resource_id,
                class: a.class,
                first: a.first,
            })
        },
    );
    lib.add(
        "android_calendar_events",
        "The first event list on screen (Calendar's RecyclerView) has an item whose content-desc holds the date, and with `content` one that holds the event.",
        Reads::Env(ANDROID),
        r#"{"date": "17 August 2024", "content": "Chile National Day", "ignore_case": true}"#,
        |a: CalendarArgs, _| {
            if a.date.is_empty() {
                return Err("`date` is empty".into());
            }
            Ok(Calendar { a })
        },
    );
    lib.add(
        "android_contact_email_shown",
        "Contacts shows the page of the named contact, with an email row and an email address.",
        Reads::Env(ANDROID),
        r#"{"name": "John Lauphin"}"#,
        |a: ContactShownArgs, _| ContactEmailShown::new(a.name, EMAIL),
    );
    lib.add(
        "android_contact_saved",
        "The contacts provider holds a contact with the name and the email address.",
        Reads::Env(ANDROID),
        r#"{"name": "John Haruhimiya", "mail": "abcdcly@qq.com"}"#,
        |a: ContactSavedArgs, _| {
            if a.name.trim().is_empty() || a.mail.trim().is_empty() {
                return Err("`name` and `mail` must not be empty".into());
            }
            Ok(ContactSaved { a })
        },
    );
    lib.add(
        "android_photos_details",
        "Google Photos' details panel shows a label with the file and, first, a date and time.",
        Reads::Env(ANDROID),
        r#"{"file": "movie_list.txt"}"#,
        |a: PhotosArgs, _| PhotosDetails::new(a.file, PHOTOS_DATE),
    );
    lib.add(
        "android_gmail_compose",
        "Gmail's compose screen has the recipient and a text field holding the message.",
        Reads::Env(ANDROID),
        r#"{"mail": "crabbb@gmail.com", "content": "Hello John"}"#,
        |a: GmailArgs, _| Ok(GmailCompose { a }),
    );
    lib.add(
        "android_maps_search",
        "Google Maps' search box holds every one of the texts.",
        Reads::Env(ANDROID),
        r#"{"contains": ["Japan", "1010021"]}"#,
        |a: MapsArgs, _| {
            if a.contains.is_empty() {
                return Err("`contains` is empty".into());
            }
            Ok(MapsSearch {
                contains: a.contains,
            })
        },
    );
    lib.add(
        "android_setting",
        "An Android setting (`settings get NAMESPACE KEY`) passes a test; an unset key fails.",
        Reads::Env(ANDROID),
        r#"{"namespace": "secure", "key": "bluetooth_name", "value": {"contains": "Sydney"}}"#,
        |a: SettingArgs, _| {
            let namespace = a
                .namespace
                .parse()
                .map_err(|e| format!("`namespace`: {e}"))?;
            let setting = Setting {
                namespace,
                key: a.key,
                value: a.value,
            };
            // Refused here rather than by the guest, before the task runs.
            setting
                .query()
                .validate()
                .map_err(|e| format!("`key`: {e}"))?;
            Ok(setting)
        },
    );
}

#[cfg(test)]
mod tests {
    //! The replies below are synthetic stand-ins for a device: typed answers as the shim
    //! gives them, and UI trees built the way the shim maps a `uiautomator dump` (as an
    //! Android 11, API 30, emulator writes one), cut to the nodes the checks read.

    use super::*;
    use crate::eval::functions::Library;
    use pincer_shared::android::ForegroundApp;
    use pincer_shared::tree::UiTree;
    use pincer_shared::{Request, RequestClass, WireError};

    fn run(name: &str, args: serde_json::Value, reply: ProbeResult) -> Verdict {
        let lib = Library::standard();
        let check = lib.build(name, &args).unwrap();
        assert_eq!(check.probes().len(), 1);
        check.judge(&[&reply], &AgentLog::default()).unwrap()
    }

    fn android(answer: AndroidAnswer) -> ProbeResult {
        Ok(ProbeReply::Android(answer))
    }

    /// A uiautomator node as the shim maps it: class, resource id, text, content-desc,
    /// children. The name is the content-desc, else the text; the content-desc is kept as
    /// an attribute only when it is not empty.
    fn n(class: &str, id: &str, text: &str, desc: &str, children: Vec<UiNode>) -> UiNode {
        let mut attributes = BTreeMap::new();
        attributes.insert("class".to_owned(), class.to_owned());
        attributes.insert("resource-id".to_owned(), id.to_owned());
        let package = id.split(':').next().unwrap_or_default();
        attributes.insert("package".to_owned(), package.to_owned());
        if !desc.is_empty() {
            attributes.insert("content-desc".to_owned(), desc.to_owned());
        }
        UiNode {
            role: class.rsplit('.').next().unwrap_or_default().to_lowercase(),
            name: if desc.is_empty() { text } else { desc }.to_owned(),
            text: (!text.is_empty()).then(|| text.to_owned()),
            attributes,
            children,
            ..UiNode::default()
        }
    }

    fn screen(children: Vec<UiNode>) -> ProbeResult {
        let root = n("android.widget.FrameLayout", "", "", "", children);
        Ok(ProbeReply::UiTree(Box::new(UiTree {
            node_count: root.count() as u32,
            root,
            truncated: false,
            walk_us: 0,
        })))
    }

    const TEXT: &str = "android.widget.TextView";

    /// The shim's answer with `package/activity` in front (`None`: no app is).
    fn front(component: Option<&str>) -> ProbeResult {
        android(AndroidAnswer::Foreground(component.map(|c| {
            let (package, activity) = c.split_once('/').unwrap_or((c, ""));
            ForegroundApp {
                package: package.to_owned(),
                activity: (!activity.is_empty()).then(|| activity.to_owned()),
            }
        })))
    }

    const CLOCK: &str = "com.google.android.deskclock/com.android.deskclock.DeskClock";
    const PEOPLE: &str = "com.android.contacts/.activities.PeopleActivity";

    #[test]
    fn the_foreground_app_is_the_shims_answer() {
        let fg = |pkg: &str, reply| {
            run(
                "android_foreground_app",
                serde_json::json!({"package": pkg}),
                reply,
            )
        };
        let v = fg("com.google.android.deskclock", front(Some(CLOCK)));
        assert!(v.passed, "{}", v.feedback);
        assert_eq!(v.feedback, format!("the foreground activity is {CLOCK}"));
        // The launcher is behind the clock, not in front.
        let v = fg("com.google.android.apps.nexuslauncher", front(Some(CLOCK)));
        assert!(
            !v.passed && v.feedback.contains("deskclock"),
            "{}",
            v.feedback
        );
        // CRAB's substring match: the package without its final "s" still matches, and so
        // does a part of the activity.
        assert!(fg("com.android.contact", front(Some(PEOPLE))).passed);
        assert!(fg("PeopleActivity", front(Some(PEOPLE))).passed);
        assert!(!fg("com.android.dialer", front(Some(PEOPLE))).passed);
        // A device that names no activity: the package alone is matched and shown.
        let v = fg("com.android.contacts", front(Some("com.android.contacts")));
        assert!(v.passed, "{}", v.feedback);
        assert_eq!(v.feedback, "the foreground app is com.android.contacts");
        let none = fg("com.android.dialer", front(None));
        assert_eq!(
            none.feedback,
            "no app is in front, expected an activity whose component contains 'com.android.dialer'"
        );
        assert!(!none.passed);
    }

    /// A check of `name` with `args` judging `reply`: an error, not a verdict.
    fn judge_err(name: &str, args: serde_json::Value, reply: ProbeResult) -> EvalError {
        let check = Library::standard().build(name, &args).unwrap();
        check
            .judge(&[&reply], &AgentLog::default())
            .expect_err("an evaluator error, not a verdict")
    }

    /// The three functions that read Android's state, with arguments.
    fn state_checks() -> [(&'static str, serde_json::Value); 3] {
        [
            (
                "android_foreground_app",
                serde_json::json!({"package": "x"}),
            ),
            (
                "android_contact_saved",
                serde_json::json!({"name": "John Haruhimiya", "mail": "abcdcly@qq.com"}),
            ),
            (
                "android_setting",
                serde_json::json!({"namespace": "secure", "key": "bluetooth_name", "value": {"contains": "Sydney"}}),
            ),
        ]
    }

    #[test]
    fn failed_or_misshapen_android_probes_are_evaluator_errors_not_verdicts() {
        for (name, args) in state_checks() {
            // The shim could not run or parse Android's command.
            let failed: ProbeResult = Err(WireError::Io {
                message: "dumpsys activity: Can't find service: activity".into(),
            });
            assert!(
                matches!(
                    judge_err(name, args.clone(), failed),
                    EvalError::Probe { .. }
                ),
                "{name}"
            );
            // A guest without the shim.
            let unsupported: ProbeResult = Err(WireError::Unsupported {
                what: "android probes".into(),
            });
            assert!(
                matches!(
                    judge_err(name, args.clone(), unsupported),
                    EvalError::Probe { .. }
                ),
                "{name}"
            );
            // An answer to another query: no check reads a battery.
            let battery = android(AndroidAnswer::Battery(pincer_shared::android::Battery {
                level: 50,
                scale: 100,
                plugged: false,
            }));
            assert!(
                matches!(judge_err(name, args, battery), EvalError::Unexpected { .. }),
                "{name}"
            );
        }
    }

    #[test]
    fn android_state_is_read_with_typed_probes_read_only_guests_serve() {
        let lib = Library::standard();
        let probes: Vec<Probe> = state_checks()
            .into_iter()
            .flat_map(|(name, args)| lib.build(name, &args).unwrap().probes())
            .collect();
        assert_eq!(probes.len(), 3);
        for p in &probes {
            let Probe::Android(q) = p else {
                panic!("{p:?} is not an Android probe");
            };
            // What the guest would refuse is refused when the check is built.
            assert_eq!(q.validate(), Ok(()), "{q:?}");
            assert_eq!(Request::Probe(p.clone()).class(), RequestClass::Probe);
        }
        assert_eq!(Request::Batch(probes.into()).class(), RequestClass::Probe);
    }

    /// Messages' conversation with 98801234 after sending a message.
    fn messages() -> ProbeResult {
        let m = "com.google.android.apps.messaging:id/";
        screen(vec![
            n(
                TEXT,
                &format!("{m}conversation_title"),
                "98801234",
                "",
                vec![],
            ),
            n(
                "androidx.recyclerview.widget.RecyclerView",
                &format!("{m}messages_list"),
                "",
                "",
                vec![
                    n(
                        TEXT,
                        &format!("{m}message_text"),
                        "Earlier message",
                        "",
                        vec![],
                    ),
                    n(
                        TEXT,
                        &format!("{m}message_text"),
                        "The meeting starts from 10am today",
                        "",
                        vec![],
                    ),
                ],
            ),
            n(
                "android.widget.EditText",
                &format!("{m}compose_message_text"),
                "Text message",
                "",
                vec![],
            ),
        ])
    }

    #[test]
    fn nodes_match_by_id_with_text_tests() {
        let m = "com.google.android.apps.messaging:id/";
        let node = |args: serde_json::Value| run("android_node", args, messages());
        assert!(node(serde_json::json!({"resource_id": format!("{m}conversation_title"), "text": {"equals": "98801234"}, "first": true})).passed);
        assert!(!node(serde_json::json!({"resource_id": format!("{m}conversation_title"), "text": {"equals": "9880123"}, "first": true})).passed);
        // Any message bubble may hold the text; with `first`, only the first counts.
        let any = serde_json::json!({"resource_id": format!("{m}message_text"), "text": {"contains": "10am"}});
        assert!(node(any.clone()).passed);
        let mut first = any;
        first["first"] = true.into();
        let v = node(first);
        assert!(
            !v.passed && v.feedback.contains("Earlier message"),
            "{}",
            v.feedback
        );
        // The shim names a node without a content-desc by its text; that is no content-desc.
        assert!(!node(serde_json::json!({"resource_id": format!("{m}conversation_title"), "content_desc": {"equals": "98801234"}})).passed);
        // Case-sensitive, as CRAB compares.
        assert!(!node(serde_json::json!({"resource_id": format!("{m}message_text"), "text": {"contains": "10AM"}})).passed);
        assert!(
            node(
                serde_json::json!({"class": "android.widget.EditText", "text": {"regex": "^Text"}})
            )
            .passed
        );
    }

    #[test]
    fn node_feedback_reads_without_doubled_articles() {
        let m = "com.google.android.apps.messaging:id/";
        let node = |args: serde_json::Value| run("android_node", args, messages()).feedback;
        let bubble = format!("{m}message_text");
        assert_eq!(
            node(serde_json::json!({"resource_id": bubble, "text": {"contains": "10am"}})),
            format!(
                "found a node with id {bubble}, text containing '10am': text 'The meeting starts from 10am today'"
            )
        );
        assert_eq!(
            node(
                serde_json::json!({"resource_id": bubble, "text": {"contains": "10am"}, "first": true})
            ),
            format!(
                "the first node with id {bubble} has text 'Earlier message', expected text containing '10am'"
            )
        );
        assert_eq!(
            node(serde_json::json!({"resource_id": bubble, "text": {"contains": "10AM"}})),
            format!(
                "none of the 2 nodes with id {bubble} has text containing '10AM'; the first has text 'Earlier message'"
            )
        );
        let title = format!("{m}conversation_title");
        assert_eq!(
            node(
                serde_json::json!({"resource_id": title, "content_desc": {"equals": "Ada"}, "first": true})
            ),
            format!(
                "the first node with id {title} has text '98801234', expected content-desc equal to 'Ada'"
            )
        );
        assert_eq!(
            node(serde_json::json!({"class": "android.widget.Switch", "first": true})),
            "the screen shows no node with class android.widget.Switch"
        );
        assert_eq!(
            node(serde_json::json!({"text": {"equals": "Send"}})),
            "the screen shows no node with text equal to 'Send'"
        );
    }

    #[test]
    fn dialer_digits_ignore_formatting() {
        let d = |text: &str| {
            screen(vec![n(
                "android.widget.EditText",
                "com.android.dialer:id/digits",
                text,
                "",
                vec![],
            )])
        };
        let args = serde_json::json!({"resource_id": "com.android.dialer:id/digits", "text": {"digits": "123456789"}, "first": true});
        assert!(run("android_node", args.clone(), d("123-456-789")).passed);
        assert!(!run("android_node", args.clone(), d("123-456-78")).passed);
        let v = run("android_node", args, screen(vec![]));
        assert!(
            !v.passed && v.feedback.contains("shows no"),
            "{}",
            v.feedback
        );
    }

    #[test]
    fn drive_folders_need_text_and_description_on_one_node() {
        let id = "com.google.android.apps.docs:id/entry_label";
        let args = serde_json::json!({"resource_id": id, "text": {"equals": "Bengaluru"}, "content_desc": {"equals": "Bengaluru Folder"}});
        let ok = screen(vec![
            n(TEXT, id, "Bengaluru.pdf", "Bengaluru.pdf PDF", vec![]),
            n(TEXT, id, "Bengaluru", "Bengaluru Folder", vec![]),
        ]);
        assert!(run("android_node", args.clone(), ok).passed);
        let split = screen(vec![
            n(TEXT, id, "Bengaluru", "Bengaluru Shared folder", vec![]),
            n(TEXT, id, "Other", "Bengaluru Folder", vec![]),
        ]);
        assert!(!run("android_node", args, split).passed);
    }

    #[test]
    fn bad_node_arguments_are_refused() {
        let lib = Library::standard();
        for bad in [
            serde_json::json!({}),
            serde_json::json!({"text": {"equals": "x"}, "first": true}),
            serde_json::json!({"resource_id": "a", "text": {"digits": "none"}}),
            serde_json::json!({"resource_id": "a", "text": {"regex": "("}}),
            serde_json::json!({"resource_id": "a", "text": {"starts": "x"}}),
        ] {
            assert!(lib.build("android_node", &bad).is_err(), "{bad}");
        }
    }

    /// Calendar's schedule view on 17 August 2024.
    fn schedule(class: &str) -> ProbeResult {
        screen(vec![n(
            class,
            "com.google.android.calendar:id/alternate_timeline_fragment_container",
            "",
            "",
            vec![
                n(
                    "android.view.View",
                    "",
                    "",
                    "Saturday 17 August 2024",
                    vec![],
                ),
                n(
                    "android.view.View",
                    "",
                    "",
                    "Chile National Day, All day",
                    vec![],
                ),
                n("android.view.View", "", "", "", vec![]),
            ],
        )])
    }

    #[test]
    fn calendar_items_show_dates_and_events() {
        let support = "android.support.v7.widget.RecyclerView";
        let ev = |args: serde_json::Value| run("android_calendar_events", args, schedule(support));
        assert!(ev(serde_json::json!({"date": "17 August 2024"})).passed);
        assert!(!ev(serde_json::json!({"date": "16 July 2024"})).passed);
        // Case-sensitive unless asked, as CRAB's two calendar checks differ.
        assert!(!ev(serde_json::json!({"date": "17 august 2024"})).passed);
        assert!(ev(serde_json::json!({"date": "17 august 2024", "content": "chile national day", "ignore_case": true})).passed);
        assert!(!ev(serde_json::json!({"date": "17 August 2024", "content": "Jeju", "ignore_case": true})).passed);
        // Newer Calendar builds use AndroidX's RecyclerView.
        let args = serde_json::json!({"date": "17 August 2024"});
        assert!(
            run(
                "android_calendar_events",
                args.clone(),
                schedule("androidx.recyclerview.widget.RecyclerView")
            )
            .passed
        );
        let v = run(
            "android_calendar_events",
            args,
            schedule("android.widget.ListView"),
        );
        assert!(
            !v.passed && v.feedback.contains("no event list"),
            "{}",
            v.feedback
        );
    }

    fn contact_page(name: &str, email: &str) -> ProbeResult {
        screen(vec![
            n("android.view.View", CONTACT_TITLE, "", name, vec![]),
            n(
                "android.widget.RelativeLayout",
                "",
                "",
                &format!("Email {email}"),
                vec![n(TEXT, CONTACT_HEADER, email, "", vec![])],
            ),
        ])
    }

    #[test]
    fn contact_pages_show_an_email() {
        let args = serde_json::json!({"name": "John Lauphin"});
        let shown = |page| run("android_contact_email_shown", args.clone(), page);
        assert!(shown(contact_page("John Lauphin", "john.lauphin@gmail.com")).passed);
        assert!(!shown(contact_page("Karoon Wei", "karroonw@gmail.com")).passed);
        assert!(!shown(contact_page("John Lauphin", "+44 20 7946 0000")).passed);
        assert!(!shown(screen(vec![])).passed);
    }

    /// An email row: display name and address (`None`: NULL).
    fn email_row(name: Option<&str>, mail: &str) -> BTreeMap<String, Option<String>> {
        BTreeMap::from([
            ("display_name".to_owned(), name.map(str::to_owned)),
            ("data1".to_owned(), Some(mail.to_owned())),
        ])
    }

    /// The email rows of the contacts provider with three contacts.
    fn contact_rows() -> ProbeResult {
        android(AndroidAnswer::Rows(vec![
            email_row(Some("John Lauphin"), "john.lauphin@gmail.com"),
            email_row(Some("Wei, Karoon"), "karroonw@gmail.com"),
            email_row(Some("John Haruhimiya"), "ABCDCLY@qq.com"),
        ]))
    }

    #[test]
    fn saved_contacts_are_read_from_the_provider() {
        let args = |name: &str, mail: &str| serde_json::json!({"name": name, "mail": mail});
        let check = Library::standard()
            .build("android_contact_saved", &args("x", "y"))
            .unwrap();
        assert_eq!(
            check.probes(),
            vec![Probe::Android(AndroidQuery::Content {
                uri: "content://com.android.contacts/data/emails".into(),
                projection: vec!["display_name".into(), "data1".into()],
                selection: None,
                sort: None,
            })]
        );
        let saved =
            |name: &str, mail: &str, rows| run("android_contact_saved", args(name, mail), rows);
        // Addresses compare ignoring case; names hold commas as they are.
        assert!(saved("John Haruhimiya", "abcdcly@qq.com", contact_rows()).passed);
        assert!(saved("Wei, Karoon", "karroonw@gmail.com", contact_rows()).passed);
        let v = saved("John Haruhimiya", "john.lauphin@gmail.com", contact_rows());
        assert!(
            !v.passed && v.feedback.contains("John Lauphin <john.lauphin@gmail.com>"),
            "{}",
            v.feedback
        );
        // A row whose name is NULL is no one's, and says so.
        let nameless = android(AndroidAnswer::Rows(vec![email_row(
            None,
            "anon@example.com",
        )]));
        let v = saved("Anon", "anon@example.com", nameless);
        assert_eq!(
            v.feedback,
            "the contacts with email addresses are (no name) <anon@example.com>, expected Anon <anon@example.com>"
        );
        assert!(!v.passed);
        let none = saved(
            "John Haruhimiya",
            "abcdcly@qq.com",
            android(AndroidAnswer::Rows(vec![])),
        );
        assert_eq!(
            none.feedback,
            "no contact has an email address, expected John Haruhimiya <abcdcly@qq.com>"
        );
        assert!(!none.passed);
    }

    fn photos_details(first_label: &str) -> ProbeResult {
        let p = "com.google.android.apps.photos:id/";
        screen(vec![
            n(
                "android.widget.LinearLayout",
                &format!("{p}datetime_item_layout"),
                "",
                "",
                vec![n(TEXT, &format!("{p}label"), first_label, "", vec![])],
            ),
            n(
                "android.widget.LinearLayout",
                &format!("{p}exif_item_layout"),
                "",
                "",
                vec![
                    n(
                        TEXT,
                        &format!("{p}label"),
                        "/storage/emulated/0/Pictures/cat.png",
                        "",
                        vec![],
                    ),
                    n(TEXT, &format!("{p}label"), "0.3MP • 640 × 480", "", vec![]),
                ],
            ),
        ])
    }

    #[test]
    fn photos_details_show_the_file_and_its_date() {
        let args = serde_json::json!({"file": "/Pictures/cat.png"});
        let d = |label: &str| {
            run(
                "android_photos_details",
                args.clone(),
                photos_details(label),
            )
        };
        assert!(d("Wed, May 15, 2024 • 10:32 AM").passed);
        // One-digit days and hours, and Android 13's narrow no-break space before PM.
        assert!(d("Sun, Jun 2, 2024 • 9:05\u{202f}PM").passed);
        assert!(!d("Yesterday").passed);
        let other = run(
            "android_photos_details",
            serde_json::json!({"file": "/Movies/movie_list.txt"}),
            photos_details("Wed, May 15, 2024 • 10:32 AM"),
        );
        assert!(
            !other.passed
                && other
                    .feedback
                    .ends_with(", expected a label showing '/Movies/movie_list.txt'"),
            "{}",
            other.feedback
        );
    }

    #[test]
    fn gmail_compose_has_recipient_and_body() {
        let g = "com.google.android.gm:id/";
        let compose = |chip: &str, body: &str| {
            screen(vec![
                n(
                    "android.widget.MultiAutoCompleteTextView",
                    &format!("{g}to"),
                    "",
                    "",
                    vec![n(
                        "android.widget.Button",
                        &format!("{g}peoplekit_chip"),
                        "",
                        chip,
                        vec![],
                    )],
                ),
                n(
                    "android.widget.LinearLayout",
                    &format!("{g}body_wrapper"),
                    "",
                    "",
                    vec![n("android.widget.EditText", "", body, "", vec![])],
                ),
            ])
        };
        let args = serde_json::json!({"mail": "crabbb@gmail.com", "content": "Hello John"});
        let ok = |s| run("android_gmail_compose", args.clone(), s).passed;
        assert!(ok(compose("crabbb@gmail.com", "Hello John, see you")));
        assert!(!ok(compose("other@gmail.com", "Hello John")));
        assert!(!ok(compose("crabbb@gmail.com", "Hi")));
    }

    #[test]
    fn the_maps_query_is_the_search_box_last_child() {
        let bx = |children| {
            screen(vec![n(
                "android.widget.FrameLayout",
                "com.google.android.apps.maps:id/search_omnibox_text_box",
                "",
                "",
                children,
            )])
        };
        let args = serde_json::json!({"contains": ["Japan", "2770885"]});
        let q = |s| run("android_maps_search", args.clone(), s);
        assert!(
            q(bx(vec![
                n(TEXT, "", "Search here", "", vec![]),
                n("android.widget.EditText", "", "2770885 Japan", "", vec![])
            ]))
            .passed
        );
        let v = q(bx(vec![n(
            "android.widget.EditText",
            "",
            "2770885",
            "",
            vec![],
        )]));
        assert!(!v.passed && v.feedback.contains("Japan"), "{}", v.feedback);
        assert!(!q(bx(vec![])).passed);
        assert!(!q(screen(vec![])).passed);
    }

    #[test]
    fn settings_are_read_with_typed_setting_probes() {
        let lib = Library::standard();
        let args = serde_json::json!({"namespace": "secure", "key": "bluetooth_name", "value": {"contains": "Sydney"}});
        let check = lib.build("android_setting", &args).unwrap();
        assert_eq!(
            check.probes(),
            vec![Probe::Android(AndroidQuery::Setting {
                namespace: Namespace::Secure,
                key: "bluetooth_name".into(),
            })]
        );
        let value = |v: &str| android(AndroidAnswer::Setting(Some(v.to_owned())));
        let v = run("android_setting", args.clone(), value("Sydney's Pixel"));
        assert!(v.passed, "{}", v.feedback);
        assert!(!run("android_setting", args.clone(), value("sdk_gphone_x86_64")).passed);
        // An empty value is set, and judged as text.
        let empty = run("android_setting", args.clone(), value(""));
        assert!(
            !empty.passed && empty.feedback.contains("is empty"),
            "{}",
            empty.feedback
        );
        let unset = run(
            "android_setting",
            args,
            android(AndroidAnswer::Setting(None)),
        );
        assert_eq!(
            unset.feedback,
            "setting secure bluetooth_name is not set, expected text containing 'Sydney'"
        );
        assert!(!unset.passed);
        let refused =
            |args: serde_json::Value| lib.build("android_setting", &args).unwrap_err().to_string();
        let e = refused(
            serde_json::json!({"namespace": "vendor", "key": "k", "value": {"equals": "v"}}),
        );
        assert!(
            e.contains("`namespace`") && e.contains("system, secure or global"),
            "{e}"
        );
        let e = refused(
            serde_json::json!({"namespace": "secure", "key": "a b", "value": {"equals": "v"}}),
        );
        assert!(e.contains("`key`") && e.contains("'a b'"), "{e}");
    }

    #[test]
    fn android_functions_run_only_on_android() {
        let lib = Library::standard();
        for def in lib.iter().filter(|d| d.name.starts_with("android_")) {
            assert_eq!(def.reads, Reads::Env(ANDROID), "{}", def.name);
        }
    }
}

//! `report.md`: the run header and the tables, in GitHub-flavoured Markdown.

use super::load::RunDir;
use super::tables::{self, Table};
use crate::agent::correction::Correction;
use std::fmt::Write;

/// The Markdown report.
pub(crate) fn render(run: &RunDir) -> String {
    let mut out = String::from("# pincer run report\n\n");
    for (k, v) in header(run) {
        let _ = writeln!(out, "- **{k}**: {}", inline(&v));
    }
    let by_attempt = tables::by_attempt(run).map(|t| ("Success by attempt", t));
    let by_score = tables::by_score(run).map(|t| ("Score by domain", t));
    for (title, table) in [
        ("By platform class", tables::by_class(run)),
        ("By termination", tables::by_termination(run)),
    ]
    .into_iter()
    .chain(by_score)
    .chain(by_attempt)
    .chain([
        ("Task runs", tables::tasks(run)),
        ("Harness overhead per step", tables::overhead(run)),
    ]) {
        let _ = write!(out, "\n## {title}\n\n{}", table_md(&table));
    }
    out
}

/// The run header as label/value pairs (shared with the HTML report).
pub(crate) fn header(run: &RunDir) -> Vec<(&'static str, String)> {
    let m = &run.meta;
    let agents: std::collections::BTreeSet<&str> =
        run.runs.iter().map(|r| r.record.agent.as_str()).collect();
    let agent = m.agent.clone().unwrap_or_else(|| {
        let v: Vec<&str> = agents.into_iter().collect();
        if v.is_empty() {
            "unknown".to_owned()
        } else {
            v.join(", ")
        }
    });
    let mut h = vec![("agent", agent)];
    let tasks: std::collections::BTreeSet<&str> = if m.tasks.is_empty() {
        run.runs.iter().map(|r| r.record.task.as_str()).collect()
    } else {
        m.tasks.iter().map(String::as_str).collect()
    };
    let listed: Vec<&str> = tasks.iter().copied().take(12).collect();
    let more = tasks.len().saturating_sub(listed.len());
    h.push((
        "tasks",
        format!(
            "{} ({}{})",
            tasks.len(),
            listed.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        ),
    ));
    let mut runs = format!("{} task runs", run.runs.len());
    if let Some(r) = m.repeat {
        runs.push_str(&format!(", {r} per task"));
    }
    if let Some(s) = m.seed {
        runs.push_str(&format!(", base seed {s}"));
    }
    if run.superseded > 0 {
        runs.push_str(&format!(
            "; {} earlier record(s) replaced by a later attempt",
            run.superseded
        ));
    }
    h.push(("runs", runs));
    if !m.sets.is_empty() {
        let sets: Vec<String> = m
            .sets
            .iter()
            .map(|(n, roles)| format!("{n} ({})", roles.join(", ")))
            .collect();
        h.push(("environment sets", sets.join("; ")));
    }
    if let Some(o) = &m.observation {
        h.push(("observation", o.clone()));
    }
    if let Some(c) = m.correction.filter(|c| *c != Correction::default()) {
        h.push((
            "self-correction",
            format!("feedback {}, up to {} attempts", c.feedback, c.attempts),
        ));
    }
    if let Some(scoring) = scoring(run) {
        h.push(("scoring", scoring));
    }
    if let Some(w) = tables::when(run) {
        h.push(("when", w));
    }
    h.push(("directory", run.dir.display().to_string()));
    h
}

/// How the records were scored, when a peer's scoring made any (`--compat crab`): the
/// peer's own summary line, or a warning that the directory mixes two scorings (a run is
/// resumed only under its own, so only records put together by hand can).
fn scoring(run: &RunDir) -> Option<String> {
    let records: Vec<_> = run.runs.iter().map(|r| r.record.clone()).collect();
    let line = crate::rundir::compat_summary(&records)?;
    let own = records.iter().filter(|r| r.compat.is_none()).count();
    Some(match own {
        0 => line,
        n => format!(
            "MIXED, not comparable: {n} of {} task runs were scored by pincer's own checks; the others {line}",
            records.len()
        ),
    })
}

fn table_md(t: &Table) -> String {
    let mut out = String::new();
    if t.rows.is_empty() {
        out.push_str("_nothing recorded_\n");
    } else {
        let _ = writeln!(out, "| {} |", t.head.join(" | "));
        let align: Vec<&str> = t
            .numeric
            .iter()
            .map(|n| if *n { "---:" } else { "---" })
            .collect();
        let _ = writeln!(out, "|{}|", align.join("|"));
        for row in &t.rows {
            let cells: Vec<String> = row
                .iter()
                .map(|c| match c {
                    tables::Cell::Total(s) => format!("**{}**", inline(s)),
                    c => inline(&c.text()),
                })
                .collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    if let Some(n) = &t.note {
        let _ = write!(out, "\n{}\n", inline(n));
    }
    out
}

/// Text safe inside a Markdown table cell or list item: one line, no pipes, no raw HTML.
fn inline(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

//! The report's numbers as tables of cells, computed once and rendered twice (Markdown and
//! HTML), so both reports always say the same thing.

use super::load::RunDir;
use crate::metrics::{Outcome, Summary, Termination};
use std::collections::BTreeSet;

/// A table: headers, rows and which columns hold numbers (right-aligned).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    pub(crate) head: Vec<&'static str>,
    pub(crate) numeric: Vec<bool>,
    pub(crate) rows: Vec<Vec<Cell>>,
    /// A line under the table (definitions, totals).
    pub(crate) note: Option<String>,
}

/// One cell; HTML renders the richer kinds as badges and links.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Text(String),
    /// A termination reason.
    Term(Termination),
    /// A task run, linking to its trajectory (index into [`RunDir::runs`]).
    Run {
        label: String,
        index: usize,
    },
    /// A row label that sums the others ("all").
    Total(String),
}

impl Cell {
    /// The plain text of the cell.
    pub(crate) fn text(&self) -> String {
        match self {
            Self::Text(s) | Self::Total(s) | Self::Run { label: s, .. } => s.clone(),
            Self::Term(t) => t.to_string(),
        }
    }
}

fn text(s: impl Into<String>) -> Cell {
    Cell::Text(s.into())
}

/// `0.625` → `62.5%`.
pub(crate) fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Milliseconds for people: `850 ms`, `12.3 s`, `4 min 05 s`.
pub(crate) fn duration_ms(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as u64;
        if s < 3600 {
            format!("{} min {:02} s", s / 60, s % 60)
        } else {
            format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
        }
    }
}

/// Token counts for people: `950`, `12.3k`, `4.56M`.
pub(crate) fn tokens(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else if n < 1_000_000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        format!("{:.2}M", n as f64 / 1e6)
    }
}

/// The scoring view of every run.
pub(crate) fn outcomes(run: &RunDir) -> Vec<Outcome> {
    run.runs.iter().map(|r| r.record.outcome()).collect()
}

/// Scores by platform class, "all" last.
pub(crate) fn by_class(run: &RunDir) -> Table {
    let outcomes = outcomes(run);
    let mut by = Summary::by_class(&outcomes);
    let all = by.remove("all");
    let mut rows = Vec::new();
    let classes = by.into_iter().map(|(c, s)| (c, s, false));
    for (class, s, total) in classes.chain(all.map(|s| ("all".to_owned(), s, true))) {
        let of_class: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| total || o.class.to_string() == class)
            .collect();
        let scored: Vec<&&Outcome> = of_class
            .iter()
            .filter(|o| !o.termination.is_infrastructure())
            .collect();
        let seeds: BTreeSet<u64> = scored.iter().map(|o| o.seed).collect();
        let spread = |mean: f64, sd: f64| match seeds.len() {
            0 => "—".to_owned(),
            1 => format!("{} (1 seed)", pct(mean)),
            n => format!("{} ± {:.1} ({n} seeds)", pct(mean), sd * 100.0),
        };
        let none = s.scored == 0;
        let score = |v: String| if none { "—".to_owned() } else { v };
        rows.push(vec![
            if total {
                Cell::Total(class)
            } else {
                text(class)
            },
            text(s.runs.to_string()),
            text(s.scored.to_string()),
            text(score(pct(s.success_rate))),
            text(score(pct(s.completion))),
            text(score(pct(s.final_completion))),
            text(score(format!("{:.4}", s.execution_efficiency))),
            text(match s.cost_efficiency {
                _ if none => "—".to_owned(),
                // No scored run spent tokens (oracle, random, human agents).
                None => "n/a".to_owned(),
                Some(ce) => format!("{:.4}", ce * 1000.0),
            }),
            text(score(format!("{:.1}", s.steps))),
            text(score(duration_ms(s.wall_s * 1000.0))),
            text(spread(s.success_by_seed.mean, s.success_by_seed.sd)),
            text(spread(s.completion_by_seed.mean, s.completion_by_seed.sd)),
        ]);
    }
    Table {
        head: vec![
            "platform class",
            "runs",
            "scored",
            "SR",
            "CR",
            "final CR",
            "EE",
            "CE",
            "mean steps",
            "mean wall time",
            "SR over seeds",
            "CR over seeds",
        ],
        numeric: vec![
            false, true, true, true, true, true, true, true, true, true, true, true,
        ],
        rows,
        note: Some(
            "Scored runs exclude infrastructure failures (environment, evaluator, broken setup, \
             aborted). SR: success rate (every final checkpoint passed and still held at the end). \
             CR: mean completion ratio as CRAB counts it (checkpoints that ever passed / all). \
             final CR: the same over checkpoints that still held at the end. \
             EE: CR per action. CE: CR per 1,000 tokens, over the runs that spent tokens (n/a: \
             none did, as with the oracle, random and human agents). Spread over seeds: mean ± sample \
             standard deviation of the per-repeat rates."
                .to_owned(),
        ),
    }
}

/// Graded scores (a peer benchmark's own, as OSWorld's metrics give them) by the part of
/// the task id before its first `/` (OSWorld's domain), "all" last; `None` when no run has
/// one. The score is the peer's number: the mean over scored task runs, infrastructure
/// failures left out as OSWorld's harness leaves out tasks that raised.
pub(crate) fn by_score(run: &RunDir) -> Option<Table> {
    let graded: Vec<(String, f64, bool)> = run
        .runs
        .iter()
        .map(|r| &r.record)
        .filter(|rec| !rec.termination.is_infrastructure())
        .filter_map(|rec| {
            let group = rec.task.split_once('/').map_or("", |(g, _)| g).to_owned();
            rec.score
                .map(|s| (group, s, rec.termination == Termination::Success))
        })
        .collect();
    if graded.is_empty() {
        return None;
    }
    let groups: BTreeSet<&str> = graded.iter().map(|(g, _, _)| g.as_str()).collect();
    let row = |label: Cell, of: Vec<&(String, f64, bool)>| {
        let n = of.len() as f64;
        let mean = of.iter().map(|(_, s, _)| s).sum::<f64>() / n;
        let full = of.iter().filter(|(_, _, ok)| *ok).count() as f64 / n;
        vec![
            label,
            text(of.len().to_string()),
            text(format!("{mean:.4}")),
            text(pct(full)),
        ]
    };
    let mut rows: Vec<Vec<Cell>> = groups
        .iter()
        .map(|g| {
            let label = if g.is_empty() { "(no domain)" } else { g };
            row(
                text(label),
                graded.iter().filter(|(x, _, _)| x == g).collect(),
            )
        })
        .collect();
    rows.push(row(Cell::Total("all".into()), graded.iter().collect()));
    Some(Table {
        head: vec!["domain", "scored runs", "score", "SR"],
        numeric: vec![false, true, true, true],
        rows,
        note: Some(
            "score: the mean of the runs' graded scores (OSWorld's metrics give fractions for \
             PDFs, images, archives), as OSWorld reports its benchmark; SR: the share scored 1. \
             Infrastructure failures are left out."
                .to_owned(),
        ),
    })
}

/// Runs per termination reason, in report order.
pub(crate) fn by_termination(run: &RunDir) -> Table {
    let n = run.runs.len();
    let rows = Termination::ALL
        .into_iter()
        .filter_map(|t| {
            let count = run
                .runs
                .iter()
                .filter(|r| r.record.termination == t)
                .count();
            (count > 0).then(|| {
                vec![
                    Cell::Term(t),
                    text(count.to_string()),
                    text(pct(count as f64 / n.max(1) as f64)),
                    text(if t.is_infrastructure() {
                        "no: infrastructure"
                    } else {
                        "yes"
                    }),
                ]
            })
        })
        .collect();
    Table {
        head: vec!["termination", "runs", "share", "scored"],
        numeric: vec![false, true, true, false],
        rows,
        note: None,
    }
}

/// How many attempts the run's task runs had (the run's `--attempts`, or the most any
/// record shows).
pub(crate) fn attempts(run: &RunDir) -> u32 {
    let recorded = run.runs.iter().map(|r| r.record.attempt()).max();
    let allowed = run.meta.correction.map(|c| c.attempts);
    recorded.max(allowed).unwrap_or(1)
}

/// Success by attempt, for runs that let agents retry (`--attempts`): how many task runs
/// succeeded at each attempt, and the success rate by then.
pub(crate) fn by_attempt(run: &RunDir) -> Option<Table> {
    let attempts = attempts(run);
    if attempts < 2 {
        return None;
    }
    let ends: Vec<(Termination, u32)> = run
        .runs
        .iter()
        .map(|r| (r.record.termination, r.record.attempt()))
        .collect();
    let rates = crate::metrics::success_by_attempt(&ends, attempts);
    let rows = (1..=attempts)
        .zip(rates)
        .map(|(k, rate)| {
            let at = ends
                .iter()
                .filter(|(t, a)| *t == Termination::Success && *a == k)
                .count();
            vec![text(k.to_string()), text(at.to_string()), text(pct(rate))]
        })
        .collect();
    Some(Table {
        head: vec!["attempt", "succeeded at it", "success rate by then"],
        numeric: vec![true, true, true],
        rows,
        note: Some(
            "A failed attempt is set up again and retried, the agent told how it failed; rates are over scored task runs."
                .into(),
        ),
    })
}

/// One row per task run.
pub(crate) fn tasks(run: &RunDir) -> Table {
    let rows = run
        .runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rec = &r.record;
            vec![
                Cell::Run {
                    label: rec.task.clone(),
                    index: i,
                },
                text(rec.repeat.to_string()),
                text(rec.class.to_string()),
                Cell::Term(rec.termination),
                text(format!("{}/{}", rec.passed, rec.total)),
                text(match rec.final_passed {
                    Some(held) => format!("{held}/{}", rec.total),
                    None => "—".to_owned(),
                }),
                text(rec.score.map_or("—".to_owned(), |s| format!("{s:.4}"))),
                // API tool calls apart: how the agent chose between the API and the GUI.
                text(match rec.tool_calls {
                    0 => rec.actions.to_string(),
                    n => format!("{} ({n} tool)", rec.actions),
                }),
                text(tokens(rec.usage.total())),
                text(duration_ms(rec.wall_ms as f64)),
                text(clip_line(rec.detail.as_deref().unwrap_or(""), 160)),
            ]
        })
        .collect();
    Table {
        head: vec![
            "task",
            "repeat",
            "class",
            "termination",
            "checkpoints",
            "held at end",
            "score",
            "actions",
            "tokens",
            "wall time",
            "detail",
        ],
        numeric: vec![
            false, true, false, false, true, true, true, true, true, true, false,
        ],
        rows,
        note: None,
    }
}

/// Where the harness's time per step goes, from every recorded step.
pub(crate) fn overhead(run: &RunDir) -> Table {
    let steps: Vec<_> = run
        .runs
        .iter()
        .flat_map(|r| r.steps.iter().map(|s| s.timing))
        .collect();
    type Phase = (&'static str, fn(&crate::rundir::record::Timing) -> f64);
    let phases: [Phase; 5] = [
        ("observe (capture, marks, encoding)", |t| t.observe_ms),
        ("act (executing actions)", |t| t.act_ms),
        ("evaluate (checkpoints)", |t| t.evaluate_ms),
        ("harness overhead (observe + evaluate)", |t| t.harness_ms()),
        ("agent (model, not harness)", |t| t.agent_ms),
    ];
    let rows = if steps.is_empty() {
        Vec::new()
    } else {
        phases
            .iter()
            .map(|(name, f)| {
                let mut v: Vec<f64> = steps.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                vec![
                    if name.starts_with("harness overhead") {
                        Cell::Total((*name).to_owned())
                    } else {
                        text(*name)
                    },
                    text(format!("{:.1}", q(0.5))),
                    text(format!("{:.1}", q(0.9))),
                    text(format!("{mean:.1}")),
                    text(format!("{:.1}", v[v.len() - 1])),
                ]
            })
            .collect()
    };
    let mut medians: Vec<f64> = run
        .runs
        .iter()
        .map(|r| r.record.harness_ms_p50)
        .filter(|v| *v > 0.0)
        .collect();
    medians.sort_by(f64::total_cmp);
    let mut note = format!("{} steps measured.", steps.len());
    if let Some(m) = medians.get(medians.len() / 2) {
        note.push_str(&format!(" Median of the per-task-run medians: {m:.1} ms."));
    }
    Table {
        head: vec!["phase", "median ms", "p90 ms", "mean ms", "max ms"],
        numeric: vec![false, true, true, true, true],
        rows,
        note: Some(note),
    }
}

/// The first line of `s`, at most `max` characters.
pub(crate) fn clip_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let more = line.len() < s.trim_end().len();
    let mut out: String = line.chars().take(max).collect();
    if more || line.chars().count() > max {
        out.push('…');
    }
    out
}

/// Civil UTC time of a Unix millisecond timestamp: `2025-03-01 14:05:09 UTC`.
pub fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// When the run happened: first start to last end, from the records.
pub(crate) fn when(run: &RunDir) -> Option<String> {
    let start = run
        .runs
        .iter()
        .map(|r| r.record.started_ms)
        .filter(|v| *v > 0)
        .min()?;
    let end = run
        .runs
        .iter()
        .map(|r| r.record.started_ms + r.record.wall_ms)
        .max()
        .unwrap_or(start);
    Some(format!(
        "{} to {} ({})",
        utc(start),
        utc(end),
        duration_ms(end.saturating_sub(start) as f64)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn people_read_these() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_709_301_909_000), "2024-03-01 14:05:09 UTC");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(duration_ms(850.0), "850 ms");
        assert_eq!(duration_ms(12_345.0), "12.3 s");
        assert_eq!(duration_ms(245_000.0), "4 min 05 s");
        assert_eq!(tokens(950), "950");
        assert_eq!(tokens(12_345), "12.3k");
        assert_eq!(clip_line("one\ntwo", 10), "one…");
        assert_eq!(clip_line("abcdef", 3), "abc…");
        assert_eq!(clip_line("abc", 3), "abc");
    }
}

//! How an agent may correct itself (`--feedback`, `--attempts`): what it is told of the
//! checkpoints, and how many attempts a task run has. The runner acts on it (`run::task`);
//! the run's header records it, since runs that differ in it are not one run.

use serde::{Deserialize, Serialize};

/// What an agent is told of the checkpoints (`--feedback`): nothing (the benchmark as
/// published), their feedback after every step, or at the end of a failed attempt, for the
/// next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feedback {
    /// Nothing.
    #[default]
    None,
    /// Each checkpoint's state and feedback in every observation, and after a failed
    /// attempt.
    Step,
    /// Each checkpoint's state and feedback after a failed attempt only.
    End,
}

impl std::str::FromStr for Feedback {
    type Err = CorrectionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "step" => Ok(Self::Step),
            "end" => Ok(Self::End),
            other => Err(CorrectionError::Feedback(other.to_owned())),
        }
    }
}

impl std::fmt::Display for Feedback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Step => "step",
            Self::End => "end",
        })
    }
}

/// Most attempts a task run may have.
pub const MAX_ATTEMPTS: u32 = 10;

/// How an agent may correct itself: what it is told of the checkpoints, and how many
/// attempts a task run has (a failed attempt is set up again and retried, the agent told
/// how it failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correction {
    /// What the agent is told of the checkpoints.
    pub feedback: Feedback,
    /// Attempts per task run (1: no retry).
    pub attempts: u32,
}

impl Default for Correction {
    fn default() -> Self {
        Self {
            feedback: Feedback::None,
            attempts: 1,
        }
    }
}

/// Settings of [`Correction`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CorrectionError {
    /// An unknown feedback mode.
    #[error("unknown feedback mode '{0}': use none, step or end")]
    Feedback(String),
    /// Attempts out of range.
    #[error("{0} attempts: give 1 to {MAX_ATTEMPTS} (1 runs each task once)")]
    Attempts(u32),
    /// Feedback at the end with nothing after the end.
    #[error(
        "feedback at the end of an attempt needs a next attempt to use it: give --attempts 2 or more, or --feedback step"
    )]
    EndWithoutRetry,
}

impl Correction {
    /// Checked settings.
    pub fn new(feedback: Feedback, attempts: u32) -> Result<Self, CorrectionError> {
        if attempts == 0 || attempts > MAX_ATTEMPTS {
            return Err(CorrectionError::Attempts(attempts));
        }
        if feedback == Feedback::End && attempts == 1 {
            return Err(CorrectionError::EndWithoutRetry);
        }
        Ok(Self { feedback, attempts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrections_that_cannot_work_are_refused_naming_what_to_give() {
        assert_eq!("step".parse(), Ok(Feedback::Step));
        let e = "always".parse::<Feedback>().unwrap_err().to_string();
        assert!(
            e.contains("'always'") && e.contains("none, step or end"),
            "{e}"
        );
        for n in [0, MAX_ATTEMPTS + 1] {
            let e = Correction::new(Feedback::None, n).unwrap_err().to_string();
            assert!(e.contains("give 1 to 10"), "{e}");
        }
        let e = Correction::new(Feedback::End, 1).unwrap_err().to_string();
        assert!(e.contains("--attempts 2"), "{e}");
        assert!(Correction::new(Feedback::End, 2).is_ok());
        assert!(Correction::new(Feedback::Step, 1).is_ok());
    }
}

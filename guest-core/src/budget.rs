//! Byte budgets shared by concurrent work whose results travel in one reply: an exec's two
//! output streams, a batch's probes. Each keeps the reply under the response limit.

use pincer_shared::WireError;
use pincer_shared::limits::MAX_RESPONSE_HEADER;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of files and command output one batch's replies may carry inline, so that the
/// batch's answer fits in a response header with room for everything else.
pub(crate) const BATCH_INLINE_BYTES: u64 = MAX_RESPONSE_HEADER as u64 - 8 * 1024 * 1024;

/// The error of a probe whose reply would overflow its batch's inline budget.
pub(crate) fn batch_full(what: &str, size: u64) -> WireError {
    WireError::TooLarge {
        what: format!(
            "{what}: the batch's replies would pass {BATCH_INLINE_BYTES} bytes inline; read it in a batch of its own"
        ),
        limit: BATCH_INLINE_BYTES,
        got: size,
    }
}

/// Bytes that may still be kept.
#[derive(Debug)]
pub(crate) struct Budget(AtomicU64);

impl Budget {
    /// A budget of `bytes`.
    pub(crate) fn new(bytes: u64) -> Self {
        Self(AtomicU64::new(bytes))
    }

    /// Takes up to `want` bytes; returns how many it got.
    pub(crate) fn take(&self, want: u64) -> u64 {
        let mut got = 0;
        // The closure never returns None, so the update cannot fail.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                got = want.min(left);
                Some(left - got)
            });
        got
    }

    /// Takes `want` bytes if that many are left; otherwise takes nothing.
    pub(crate) fn reserve(&self, want: u64) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(want)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_what_is_left_and_reserves_all_or_nothing() {
        let b = Budget::new(10);
        assert_eq!(b.take(4), 4);
        assert!(!b.reserve(7));
        assert!(b.reserve(6));
        assert_eq!(b.take(1), 0);
        assert!(b.reserve(0));
    }
}

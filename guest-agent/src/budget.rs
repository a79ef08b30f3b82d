//! Byte budgets shared by concurrent work whose results travel in one reply: an exec's two
//! output streams, a batch's probes. Each keeps the reply under the response limit.

use std::sync::atomic::{AtomicU64, Ordering};

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

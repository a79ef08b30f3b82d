//! Protocol versions. A connection settles on one version in the handshake; every request
//! kind names the first version that carries it and is refused on older connections.

use serde::{Deserialize, Serialize};

/// ALPN identifier of the pincer protocol family. The handshake then picks a
/// [`ProtocolVersion`] within it.
pub const ALPN: &[u8] = b"pincer/1";

/// Versions of the request/response protocol, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ProtocolVersion {
    /// The first version: actions, observations, probes, batches and setup.
    V1 = 1,
    /// Android's typed probes and setup steps ([`Probe::Android`](crate::probe::Probe::Android),
    /// [`Setup::Android`](crate::setup::Setup::Android)).
    V2 = 2,
    /// Video streams of the screen ([`Request::Video`](crate::Request::Video)) and
    /// sandboxed API tools ([`Request::Tool`](crate::Request::Tool)).
    V3 = 3,
}

impl ProtocolVersion {
    /// Every version this build speaks, oldest first.
    pub const ALL: &'static [Self] = &[Self::V1, Self::V2, Self::V3];
    /// The newest version this build speaks.
    pub const CURRENT: Self = Self::V3;

    /// The number carried in the handshake.
    pub fn number(self) -> u16 {
        self as u16
    }

    /// The version with this number, if this build knows it.
    pub fn from_number(n: u16) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.number() == n)
    }

    /// The newest version both sides speak, given the numbers the peer offered.
    pub fn negotiate(offered: &[u16]) -> Option<Self> {
        Self::ALL
            .iter()
            .rev()
            .copied()
            .find(|v| offered.contains(&v.number()))
    }
}

impl std::fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v{}", self.number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_sorted_and_ends_with_current() {
        assert!(ProtocolVersion::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ProtocolVersion::ALL.last(), Some(&ProtocolVersion::CURRENT));
    }

    #[test]
    fn negotiation_picks_newest_common_version() {
        assert_eq!(
            ProtocolVersion::negotiate(&[1, 7]),
            Some(ProtocolVersion::V1)
        );
        assert_eq!(ProtocolVersion::negotiate(&[7, 8]), None);
        assert_eq!(ProtocolVersion::negotiate(&[]), None);
    }

    #[test]
    fn numbers_round_trip() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::from_number(v.number()), Some(*v));
        }
        assert_eq!(ProtocolVersion::from_number(0), None);
    }
}

//! Who is who: each side's self-signed certificate (made on first start, kept in a state
//! directory), the SHA-256 fingerprints the other side pins, and the shared token whose
//! knowledge a host proves in the handshake.
//!
//! The token never crosses the wire: the host sends an HMAC of the TLS session's exported
//! keying material under the token, so a proof is bound to one connection and cannot be
//! replayed, and the guest checks it in constant time.

use ring::hmac;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// File names inside a state directory.
const CERT_FILE: &str = "cert.der";
const KEY_FILE: &str = "key.der";

/// Label for TLS keying-material export (RFC 5705) used by the auth proof.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-pincer-auth";
/// Bytes of exported keying material the proof covers.
pub const EXPORTER_LEN: usize = 32;

/// Shortest token accepted, in bytes.
pub const MIN_TOKEN_LEN: usize = 16;

/// Errors loading or creating identities and tokens.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Certificate generation failed.
    #[error("could not generate a certificate: {0}")]
    Generate(String),
    /// A token file is too short or empty.
    #[error(
        "token in {path} is {len} bytes; use at least {MIN_TOKEN_LEN} (generate one with `pincer token new`)"
    )]
    WeakToken {
        /// The file.
        path: PathBuf,
        /// Its length after trimming.
        len: usize,
    },
    /// A fingerprint string could not be parsed.
    #[error("'{0}' is not a certificate fingerprint: expected sha256: followed by 64 hex digits")]
    BadFingerprint(String),
}

/// A certificate and its private key, DER-encoded.
#[derive(Clone)]
pub struct Identity {
    /// The self-signed certificate.
    pub cert_der: Vec<u8>,
    /// The PKCS#8 private key.
    pub key_der: Vec<u8>,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("fingerprint", &self.fingerprint())
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// Makes a new self-signed certificate naming `subject`.
    pub fn generate(subject: &str) -> Result<Self, IdentityError> {
        let ck = rcgen::generate_simple_self_signed(vec![subject.to_owned()])
            .map_err(|e| IdentityError::Generate(e.to_string()))?;
        Ok(Self {
            cert_der: ck.cert.der().to_vec(),
            key_der: ck.signing_key.serialize_der(),
        })
    }

    /// Loads the identity kept in `dir`, creating it (and `dir`) on first use. Returns the
    /// identity and whether it was just created.
    pub fn load_or_create(dir: &Path, subject: &str) -> Result<(Self, bool), IdentityError> {
        let cert_path = dir.join(CERT_FILE);
        let key_path = dir.join(KEY_FILE);
        if cert_path.exists() && key_path.exists() {
            let cert_der = read(&cert_path)?;
            let key_der = read(&key_path)?;
            return Ok((Self { cert_der, key_der }, false));
        }
        std::fs::create_dir_all(dir).map_err(|source| IdentityError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let id = Self::generate(subject)?;
        write_private(&key_path, &id.key_der)?;
        write_private(&cert_path, &id.cert_der)?;
        Ok((id, true))
    }

    /// The certificate's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.cert_der)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, IdentityError> {
    std::fs::read(path).map_err(|source| IdentityError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Writes a file readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let io = |source| IdentityError::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// SHA-256 of a DER certificate: what a host pins.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a DER certificate.
    pub fn of(cert_der: &[u8]) -> Self {
        let d = ring::digest::digest(&ring::digest::SHA256, cert_der);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        Self(out)
    }

    /// Constant-time comparison.
    pub fn matches(&self, other: &Self) -> bool {
        ring_eq(&self.0, &other.0)
    }
}

/// Constant-time equality of two byte strings (length is not secret).
fn ring_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Fingerprint {
    type Err = IdentityError;

    /// Accepts `sha256:` + 64 hex digits, with or without the prefix and with optional
    /// colons between bytes (as `openssl x509 -fingerprint` prints them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || IdentityError::BadFingerprint(s.to_owned());
        let t = s.trim();
        let t = t
            .strip_prefix("sha256:")
            .or_else(|| t.strip_prefix("SHA256:"))
            .unwrap_or(t);
        let hex: String = t.chars().filter(|c| *c != ':').collect();
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }
}

/// The shared secret that authenticates a host to its guests.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token from bytes. Prefer [`Token::load`], which enforces a minimum length.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// A new random token: 32 random bytes as 64 hex digits.
    pub fn generate() -> Self {
        use ring::rand::SecureRandom;
        let mut raw = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut raw)
            .expect("the OS random source is available");
        Self(
            raw.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
                .into_bytes(),
        )
    }

    /// Reads a token file; surrounding whitespace is ignored.
    pub fn load(path: &Path) -> Result<Self, IdentityError> {
        let raw = read(path)?;
        let text = String::from_utf8_lossy(&raw);
        let t = text.trim();
        if t.len() < MIN_TOKEN_LEN {
            return Err(IdentityError::WeakToken {
                path: path.to_owned(),
                len: t.len(),
            });
        }
        Ok(Self(t.as_bytes().to_vec()))
    }

    /// Reads the token at `path`, creating a new random one there (mode 0600) if the file
    /// does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, IdentityError> {
        if !path.exists() {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|source| IdentityError::Io {
                    path: dir.to_owned(),
                    source,
                })?;
            }
            write_private(path, &Self::generate().0)?;
        }
        Self::load(path)
    }

    /// The token text, for writing it to a file.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// The proof that the holder of this token is on the TLS session that exported
    /// `exporter`.
    pub fn proof(&self, exporter: &[u8]) -> Vec<u8> {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        hmac::sign(&key, exporter).as_ref().to_vec()
    }

    /// Checks a proof in constant time.
    pub fn verify(&self, exporter: &[u8], proof: &[u8]) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, &self.0);
        hmac::verify(&key, exporter, proof).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_is_created_once_and_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let (a, created) = Identity::load_or_create(dir.path(), "guest").unwrap();
        assert!(created);
        let (b, created) = Identity::load_or_create(dir.path(), "guest").unwrap();
        assert!(!created);
        assert_eq!(a.fingerprint(), b.fingerprint());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn fingerprints_parse_in_common_spellings() {
        let fp = Fingerprint::of(b"cert");
        let s = fp.to_string();
        assert_eq!(s.parse::<Fingerprint>().unwrap(), fp);
        let colons: String = s.as_bytes()[7..]
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap().to_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(colons.parse::<Fingerprint>().unwrap(), fp);
        assert!("sha256:abc".parse::<Fingerprint>().is_err());
        assert!("sha256:zz".repeat(8).parse::<Fingerprint>().is_err());
        assert!(fp.matches(&fp));
        assert!(!fp.matches(&Fingerprint::of(b"other")));
    }

    #[test]
    fn proofs_bind_token_and_session() {
        let t = Token::generate();
        let p = t.proof(b"session-1");
        assert!(t.verify(b"session-1", &p));
        assert!(!t.verify(b"session-2", &p));
        assert!(!Token::generate().verify(b"session-1", &p));
        assert!(!t.verify(b"session-1", &p[..31]));
    }

    #[test]
    fn weak_tokens_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        std::fs::write(&p, "short\n").unwrap();
        assert!(matches!(
            Token::load(&p),
            Err(IdentityError::WeakToken { len: 5, .. })
        ));
        let q = dir.path().join("sub/new");
        let t = Token::load_or_create(&q).unwrap();
        assert_eq!(t.expose().len(), 64);
        assert_eq!(Token::load(&q).unwrap().expose(), t.expose());
    }
}

//! Content digests, parsed where they enter: a policy file's pin, a
//! manifest's descriptors, an index's entries, a kept signature record.
//!
//! A [`Digest`] is `sha256:` and 64 lowercase hex digits, nothing else, so
//! the name it gives a file in the store (`blobs/sha256/<hex>`) can never be
//! a path: no `/`, no `..`, never empty. Other algorithms the OCI image
//! spec registers (`sha512`) are well-formed but not supported here, and are
//! named as such rather than read as tampering.

use std::fmt;

/// `sha256:<64 lowercase hex>`: the only digest this registrar reads.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

/// A digest that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// Not `algorithm:encoded` as the OCI image spec writes it.
    #[error("digest {0:?} is not sha256:<64 lowercase hex digits>")]
    Malformed(String),
    /// Well-formed, with an algorithm other than sha256.
    #[error(
        "digest {digest:?} uses {algorithm}, which this registrar does not support: only sha256 digests are read (push the artefact with sha256, the default of every registry client)"
    )]
    Unsupported {
        /// The whole digest, as given.
        digest: String,
        /// Its algorithm.
        algorithm: String,
    },
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        use sha2::Digest as _;
        Digest(sha2::Sha256::digest(bytes).into())
    }

    /// From a finished sha256.
    pub fn from_sha256(hash: [u8; 32]) -> Self {
        Digest(hash)
    }

    /// The 64 lowercase hex digits: a store file's name.
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The raw hash.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses `sha256:<64 lowercase hex>`. The grammar is the image spec's
    /// (`algorithm ":" encoded`, algorithm `[a-z0-9]+([+._-][a-z0-9]+)*`):
    /// a well-formed digest of another algorithm is [`DigestError::Unsupported`].
    pub fn parse(text: &str) -> Result<Self, DigestError> {
        let malformed = || DigestError::Malformed(text.chars().take(200).collect());
        let (algorithm, encoded) = text.split_once(':').ok_or_else(malformed)?;
        let algorithm_ok = !algorithm.is_empty()
            && algorithm.split(['+', '.', '_', '-']).all(|p| {
                !p.is_empty() && p.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9'))
            });
        let encoded_ok = !encoded.is_empty()
            && encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'_' | b'-'));
        if !algorithm_ok || !encoded_ok {
            return Err(malformed());
        }
        if algorithm != "sha256" {
            return Err(DigestError::Unsupported {
                digest: text.chars().take(200).collect(),
                algorithm: algorithm.to_owned(),
            });
        }
        if encoded.len() != 64
            || !encoded
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(malformed());
        }
        let mut hash = [0u8; 32];
        hex::decode_to_slice(encoded, &mut hash).map_err(|_| malformed())?;
        Ok(Digest(hash))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::str::FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Digest::parse(s)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sha256_and_64_lowercase_hex_is_a_digest() {
        let hex = "0123456789abcdef".repeat(4);
        let d = Digest::parse(&format!("sha256:{hex}")).unwrap();
        assert_eq!(d.to_string(), format!("sha256:{hex}"));
        assert_eq!(d.hex(), hex);
        for bad in [
            "sha256:/etc/kubernetes/admin.conf".to_owned(),
            "sha256:../../x".to_owned(),
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}/"),
            "sha256:".to_owned(),
            format!(":{hex}"),
            hex.clone(),
        ] {
            assert_eq!(
                Digest::parse(&bad),
                Err(DigestError::Malformed(bad.clone())),
                "{bad}"
            );
        }
        let err = Digest::parse(&format!("sha512:{}", "ab".repeat(64))).unwrap_err();
        assert!(
            matches!(&err, DigestError::Unsupported { algorithm, .. } if algorithm == "sha512")
        );
        assert!(
            err.to_string().contains(
                "uses sha512, which this registrar does not support: only sha256 digests are read"
            ),
            "{err}"
        );
    }

    #[test]
    fn digests_from_json_are_parsed() {
        let ok: Digest = serde_json::from_str(&format!("\"sha256:{}\"", "ab".repeat(32))).unwrap();
        assert_eq!(serde_json::to_string(&ok).unwrap(), format!("\"{ok}\""));
        let err = serde_json::from_str::<Digest>("\"sha256:../../etc/passwd\"").unwrap_err();
        assert!(
            err.to_string()
                .contains("is not sha256:<64 lowercase hex digits>"),
            "{err}"
        );
    }
}

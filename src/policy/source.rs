//! Where a plugin's component comes from: a file pinned by its sha256, or an
//! OCI artefact pinned by its manifest digest, and how the registry is reached.
//!
//! This is data only: the `oci` module (feature `oci`) does the pulling.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::digest::Digest;

/// The most a pull may take unless the policy file says otherwise.
pub(crate) const DEFAULT_PULL_TIMEOUT_MS: u64 = 120_000;
/// The largest layer (and extracted component) a pull accepts unless the
/// policy file says otherwise.
pub(crate) const DEFAULT_PULL_MAX_MIB: u64 = 256;

/// Where a plugin's component comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginSource {
    /// A file on disk.
    File {
        /// Absolute, or relative to the policy file's directory.
        path: PathBuf,
        /// The pin; `None` only with `allow_unpinned = true`.
        sha256: Option<[u8; 32]>,
    },
    /// An artefact in an OCI registry, pulled into the cache.
    Oci(Box<OciSource>),
}

impl PluginSource {
    /// A file source.
    pub fn file(path: impl Into<PathBuf>, sha256: Option<[u8; 32]>) -> Self {
        PluginSource::File {
            path: path.into(),
            sha256,
        }
    }
}

impl fmt::Display for PluginSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginSource::File { path, .. } => write!(f, "{}", path.display()),
            PluginSource::Oci(o) => write!(f, "oci://{}", o.reference),
        }
    }
}

/// A plugin in an OCI registry.
#[derive(Debug, Clone, PartialEq)]
pub struct OciSource {
    /// The artefact, pinned by its manifest digest.
    pub reference: OciReference,
    /// For a container image: the component's path inside its layers
    /// (`oci_path`). `None`: the artefact has a wasm layer.
    pub path_in_image: Option<String>,
    /// Where pulled blobs are kept, by digest (`<cache_dir>/oci`).
    pub store: PathBuf,
    /// A cosign public key (PEM, ECDSA P-256): the artefact must carry a
    /// cosign signature by it (`cosign_key`).
    pub cosign_key: Option<PathBuf>,
    /// How the registry is reached.
    pub registry: RegistryOptions,
}

/// How registries are reached: credentials, trust, plain HTTP, and bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryOptions {
    /// A `.dockerconfigjson` file (the format of an image pull Secret).
    pub auth_file: Option<PathBuf>,
    /// PEM certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// `HOST:PORT`s reached over plain HTTP.
    pub insecure: Vec<String>,
    /// The deadline of one pull, everything included.
    pub timeout: Duration,
    /// The largest manifest layer, and component extracted from one, accepted.
    pub max_bytes: u64,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            auth_file: None,
            ca_file: None,
            insecure: Vec::new(),
            timeout: Duration::from_millis(DEFAULT_PULL_TIMEOUT_MS),
            max_bytes: DEFAULT_PULL_MAX_MIB << 20,
        }
    }
}

impl RegistryOptions {
    /// Whether `registry` is reached over plain HTTP.
    pub fn is_insecure(&self, registry: &str) -> bool {
        self.insecure.iter().any(|h| h == registry)
    }
}

/// `REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`, with the registry named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    /// `HOST[:PORT]`.
    pub registry: String,
    /// `path/to/repo`.
    pub repository: String,
    /// A tag, shown but not trusted when a digest is given.
    pub tag: Option<String>,
    /// The manifest's digest.
    pub digest: Option<Digest>,
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl OciReference {
    /// Parses a reference that may carry a tag instead of a digest (the
    /// author CLI's `plugin pull` and `push`). An `oci://` prefix is allowed.
    pub fn parse(text: &str) -> Result<Self, String> {
        let s = text.strip_prefix("oci://").unwrap_or(text);
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        let Some((registry, rest)) = name.split_once('/') else {
            return Err(format!(
                "{text:?} names no registry: write REGISTRY/REPOSITORY@sha256:<digest>, e.g. ghcr.io/org/plugin@sha256:…"
            ));
        };
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(format!(
                "{text:?} names no registry ({registry:?} is not a host name: it has no '.' or ':'): write REGISTRY/REPOSITORY, e.g. docker.io/{name}"
            ));
        }
        // A ':' after the last '/' starts the tag.
        let (repository, tag) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(rest[i + 1..].to_owned())),
            _ => (rest, None),
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|part| {
                !part.is_empty()
                    && part.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-')
                    })
            });
        if !repo_ok {
            return Err(format!(
                "{text:?}: repository {repository:?} is not valid: use lowercase letters, digits, '.', '_', '-' and '/'"
            ));
        }
        if let Some(t) = &tag
            && (t.is_empty()
                || t.len() > 128
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(format!("{text:?}: tag {t:?} is not valid"));
        }
        let digest = match digest {
            None => None,
            Some(d) => Some(Digest::parse(d).map_err(|m| format!("{text:?}: {m}"))?),
        };
        Ok(OciReference {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// Parses a reference that must be pinned by digest (the policy file).
    pub fn parse_pinned(text: &str) -> Result<Self, String> {
        let r = Self::parse(text)?;
        if r.digest.is_none() {
            return Err(format!(
                "{text:?} is not pinned: a tag can move, so the policy pins the manifest digest (REGISTRY/REPOSITORY@sha256:<digest>); `csi-node-driver-registrar plugin pull {text}` prints the pinned line"
            ));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references() {
        let r =
            OciReference::parse_pinned(&format!("oci://127.0.0.1:5000/team/pool:1.0@{D}")).unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/pool");
        assert_eq!(r.tag.as_deref(), Some("1.0"));
        assert_eq!(r.digest.map(|d| d.to_string()).as_deref(), Some(D));
        assert_eq!(r.to_string(), format!("127.0.0.1:5000/team/pool:1.0@{D}"));
        let r = OciReference::parse("ghcr.io/org/p").unwrap();
        assert_eq!((r.tag, r.digest), (None, None));
    }

    #[test]
    fn a_tag_is_not_a_pin() {
        let err = OciReference::parse_pinned("ghcr.io/org/p:v1").unwrap_err();
        assert_eq!(
            err,
            "\"ghcr.io/org/p:v1\" is not pinned: a tag can move, so the policy pins the manifest digest (REGISTRY/REPOSITORY@sha256:<digest>); `csi-node-driver-registrar plugin pull ghcr.io/org/p:v1` prints the pinned line"
        );
    }

    #[test]
    fn bad_references_say_what_to_write() {
        let err = OciReference::parse("org/p@sha256:00").unwrap_err();
        assert!(
            err.contains("names no registry") && err.contains("docker.io/org/p"),
            "{err}"
        );
        let err = OciReference::parse("ghcr.io/Org/p").unwrap_err();
        assert!(err.contains("repository \"Org/p\" is not valid"), "{err}");
        let err = OciReference::parse("ghcr.io/org/p@md5:00").unwrap_err();
        assert!(
            err.contains("uses md5, which this registrar does not support"),
            "{err}"
        );
        let err = OciReference::parse("ghcr.io/org/p@sha256:00").unwrap_err();
        assert!(err.contains("64 lowercase hex"), "{err}");
        let err = OciReference::parse("ghcr.io/org/p@sha256:../../etc/passwd").unwrap_err();
        assert!(
            err.contains("is not sha256:<64 lowercase hex digits>"),
            "{err}"
        );
    }
}

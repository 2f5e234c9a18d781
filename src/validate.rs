//! The rules every registration value must follow, whoever produced it (the
//! driver, the built-in policy or a plugin). They are the kubelet's and the CSI
//! spec's rules, so a value that passes here is one the kubelet accepts.

use std::path::Path;

/// Longest path a `sockaddr_un` can hold, including its terminating NUL.
pub const UNIX_PATH_MAX: usize = 108;

/// The CSI spec's limit on a driver name.
pub const MAX_DRIVER_NAME_LEN: usize = 63;
/// How many supported versions an answer may hold, and how long each may be:
/// far more than any CSI driver needs, and far below the kubelet's 4 MiB
/// message limit (upstream always sends one).
pub const MAX_VERSIONS: usize = 16;
/// The longest version string that may be advertised.
pub const MAX_VERSION_LEN: usize = 64;
/// How much of a value that came from outside (a plugin, a driver) an error
/// or a log line shows.
pub const MAX_SHOWN: usize = 256;

/// `text` quoted for a message, cut to [`MAX_SHOWN`] bytes with its full length
/// said: a 10 MB plugin answer becomes one readable line.
pub fn shown(text: &str) -> String {
    if text.len() <= MAX_SHOWN {
        return format!("{text:?}");
    }
    let mut end = MAX_SHOWN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes in all)", &text[..end], text.len())
}

/// `text` cut to `max` bytes (at a character boundary), marked when cut.
pub fn bounded(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes in all)", &text[..end], text.len())
}

/// A driver name the CSI spec or the kubelet refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("driver name is empty")]
    Empty,
    /// Longer than the CSI spec allows.
    #[error(
        "driver name {} is {len} characters long; the CSI spec allows at most {MAX_DRIVER_NAME_LEN}",
        shown(name)
    )]
    TooLong {
        /// The name.
        name: String,
        /// Its length.
        len: usize,
    },
    /// It does not begin and end with an alphanumeric.
    #[error(
        "driver name {} must begin and end with an alphanumeric character ([a-z0-9A-Z]) (CSI naming rule)",
        shown(name)
    )]
    BadEnds {
        /// The name.
        name: String,
    },
    /// It has a character the CSI spec does not allow.
    #[error(
        "driver name {} contains {found:?}; only alphanumerics, '-' and '.' are allowed (CSI naming rule)",
        shown(name)
    )]
    BadChar {
        /// The name.
        name: String,
        /// The first character not allowed.
        found: char,
    },
}

/// Checks a driver name against the CSI spec: at most 63 characters, beginning
/// and ending with an alphanumeric, with `-`, `.` and alphanumerics between
/// (Kubernetes stores it in CSINode, which refuses anything else).
///
/// Since `/` is refused, `<name>-reg.sock` can never leave the registration directory.
pub fn driver_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    let len = name.chars().count();
    if len > MAX_DRIVER_NAME_LEN {
        return Err(NameError::TooLong {
            name: name.to_owned(),
            len,
        });
    }
    if let Some(found) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.')))
    {
        return Err(NameError::BadChar {
            name: name.to_owned(),
            found,
        });
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err(NameError::BadEnds {
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// A version as the kubelet's `version.ParseGeneric` reads it (k8s.io/apimachinery
/// pkg/util/version): the regexp `^\s*v?([0-9]+(?:\.[0-9]+)*)(.*)*$` with Go's
/// RE2 semantics, then at least two numeric components, the first without a
/// leading zero. Anything after the numbers is ignored (`1.0.0-rc1` is 1.0.0).
/// `tests/vectors/kubelet-versions.json` holds the cases both this and the
/// kubelet's own parser are tested against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletVersion(Vec<u64>);

/// RE2's `\s`: `[\t\n\f\r ]`, not Unicode white space (no `\v`, no NBSP).
const RE2_SPACE: [char; 5] = ['\t', '\n', '\x0c', '\r', ' '];

impl KubeletVersion {
    /// Parses `<major>.<minor>[.<patch>]` as the kubelet does.
    pub fn parse(text: &str) -> Option<Self> {
        let s = text.trim_start_matches(RE2_SPACE);
        let s = s.strip_prefix('v').unwrap_or(s);
        let b = s.as_bytes();
        let digits_from = |i: usize| i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        // `[0-9]+(?:\.[0-9]+)*`: a dot not followed by a digit ends the numbers.
        let mut end = digits_from(0);
        if end == 0 {
            return None;
        }
        while b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end = digits_from(end + 1);
        }
        // `(.*)*$`: `.` does not match a newline, and `$` is the end of the text.
        if s[end..].contains('\n') {
            return None;
        }
        let parts: Vec<&str> = s[..end].split('.').collect();
        if parts.len() < 2 || (parts[0].len() > 1 && parts[0].starts_with('0')) {
            return None;
        }
        parts
            .iter()
            .map(|p| p.parse::<u64>().ok())
            .collect::<Option<Vec<_>>>()
            .map(KubeletVersion)
    }

    /// The major version.
    pub fn major(&self) -> u64 {
        self.0[0]
    }

    fn component(&self, i: usize) -> u64 {
        self.0.get(i).copied().unwrap_or(0)
    }
}

impl PartialOrd for KubeletVersion {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for KubeletVersion {
    /// Component-wise, missing components count as 0 (`1.0` == `1.0.0`).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let n = self.0.len().max(other.0.len());
        (0..n)
            .map(|i| self.component(i).cmp(&other.component(i)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

impl std::fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        write!(f, "{}", parts.join("."))
    }
}

/// Supported versions the kubelet would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionsError {
    /// None at all.
    #[error("supported versions are empty; the kubelet needs at least one 1.x version")]
    Empty,
    /// None is a 1.x version.
    #[error(
        "none of the supported versions {} is a 1.x version the kubelet can parse (it reads \"<major>.<minor>[.<patch>]\" and needs major 1){}", shown(&format!("{:?}", .0)), dra_hint(.0)
    )]
    NoV1(Vec<String>),
    /// A DRA driver's list is empty.
    #[error(
        "supported versions are empty; the kubelet needs a DRA gRPC service name ({})",
        DRA_SERVICES.join(" or ")
    )]
    EmptyDra,
    /// None is a DRA service the kubelet can use.
    #[error(
        "none of the supported versions {} is a DRA gRPC service the kubelet can use ({}){}",
        shown(&format!("{:?}", .0)), DRA_SERVICES.join(" or "), csi_hint(.0)
    )]
    NoDraService(Vec<String>),
    /// Too many, or too long.
    #[error(
        "{count} supported versions, the longest {longest} bytes: at most {MAX_VERSIONS} of at most {MAX_VERSION_LEN} bytes each can be advertised"
    )]
    TooMany {
        /// How many.
        count: usize,
        /// The longest, in bytes.
        longest: usize,
    },
}

/// The DRA gRPC services the kubelet can use for NodePrepareResources, most
/// recent first (`servicesSupportedByKubelet`, pkg/kubelet/cm/dra/plugin/dra_plugin.go,
/// Kubernetes 1.37).
pub const DRA_SERVICES: &[&str] = &["v1.DRAPlugin", "v1beta1.DRAPlugin"];

/// The optional health services the kubelet also looks for in the same list
/// (`healthServicesSupportedByKubelet`, same file).
pub const DRA_HEALTH_SERVICES: &[&str] = &["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"];

/// For a CSI list that holds DRA service names: the fix.
fn dra_hint(versions: &[String]) -> &'static str {
    let dra = |v: &String| {
        DRA_SERVICES.contains(&v.as_str()) || DRA_HEALTH_SERVICES.contains(&v.as_str())
    };
    if versions.iter().any(dra) {
        "; these are DRA gRPC service names: a DRA driver is registered with --plugin-type=DRAPlugin"
    } else {
        ""
    }
}

/// For a DRA list that holds semantic versions: the fix.
fn csi_hint(versions: &[String]) -> &'static str {
    if versions.iter().any(|v| KubeletVersion::parse(v).is_some()) {
        "; semantic versions such as \"1.0.0\" are for CSI drivers: a DRA driver advertises the services it serves, e.g. \"v1.DRAPlugin\""
    } else {
        ""
    }
}

/// What a DRA driver may advertise: the kubelet's `validateSupportedServices`
/// (dra_plugin_manager.go) takes the first entry it knows, and refuses a list
/// with none; within the same bounds as CSI versions. Returns the service the
/// kubelet will use.
pub fn dra_services(versions: &[String]) -> Result<&str, VersionsError> {
    within_bounds(versions)?;
    if versions.is_empty() {
        return Err(VersionsError::EmptyDra);
    }
    versions
        .iter()
        .find(|v| DRA_SERVICES.contains(&v.as_str()))
        .map(String::as_str)
        .ok_or_else(|| VersionsError::NoDraService(versions.to_vec()))
}

fn within_bounds(versions: &[String]) -> Result<(), VersionsError> {
    let longest = versions.iter().map(String::len).max().unwrap_or(0);
    if versions.len() > MAX_VERSIONS || longest > MAX_VERSION_LEN {
        return Err(VersionsError::TooMany {
            count: versions.len(),
            longest,
        });
    }
    Ok(())
}

/// What may be advertised: [`highest_supported_version`]'s rule, within
/// [`MAX_VERSIONS`] entries of at most [`MAX_VERSION_LEN`] bytes.
pub fn supported_versions(versions: &[String]) -> Result<KubeletVersion, VersionsError> {
    within_bounds(versions)?;
    highest_supported_version(versions)
}

/// The kubelet's `HighestSupportedVersion` followed by its "must be v1.x" check:
/// unparsable entries and majors above 1 are skipped, and the highest remaining
/// version must have major 1.
pub fn highest_supported_version(versions: &[String]) -> Result<KubeletVersion, VersionsError> {
    if versions.is_empty() {
        return Err(VersionsError::Empty);
    }
    versions
        .iter()
        .filter_map(|v| KubeletVersion::parse(v))
        .filter(|v| v.major() <= 1)
        .max()
        .filter(|v| v.major() == 1)
        .ok_or_else(|| VersionsError::NoV1(versions.to_vec()))
}

/// An endpoint the kubelet cannot dial.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// It is empty.
    #[error("endpoint is empty")]
    Empty,
    /// It is not an absolute path.
    #[error("endpoint {} is not an absolute path", shown(.0))]
    NotAbsolute(String),
    /// It has a NUL byte.
    #[error("endpoint {} contains a NUL byte", shown(.0))]
    Nul(String),
    /// It is too long for a unix socket path.
    #[error(
        "endpoint {} is {len} bytes long; a unix socket path must be shorter than {UNIX_PATH_MAX} bytes",
        shown(path)
    )]
    TooLong {
        /// The endpoint.
        path: String,
        /// Its length in bytes.
        len: usize,
    },
}

/// The endpoint the kubelet dials: an absolute unix socket path on the host.
pub fn endpoint(path: &str) -> Result<(), EndpointError> {
    if path.is_empty() {
        return Err(EndpointError::Empty);
    }
    if path.contains('\0') {
        return Err(EndpointError::Nul(path.to_owned()));
    }
    if !Path::new(path).is_absolute() {
        return Err(EndpointError::NotAbsolute(path.to_owned()));
    }
    if path.len() >= UNIX_PATH_MAX {
        return Err(EndpointError::TooLong {
            path: path.to_owned(),
            len: path.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csi_names() {
        for ok in ["a", "hostpath.csi.k8s.io", "A-b.c9", &"x".repeat(63)] {
            assert_eq!(driver_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(driver_name(""), Err(NameError::Empty));
        assert!(matches!(
            driver_name(&"x".repeat(64)),
            Err(NameError::TooLong { len: 64, .. })
        ));
        assert!(matches!(
            driver_name("../etc"),
            Err(NameError::BadChar { found: '/', .. })
        ));
        assert!(matches!(
            driver_name("under_score"),
            Err(NameError::BadChar { found: '_', .. })
        ));
        assert!(matches!(
            driver_name("-lead"),
            Err(NameError::BadEnds { .. })
        ));
        assert!(matches!(
            driver_name("trail."),
            Err(NameError::BadEnds { .. })
        ));
        let msg = driver_name("a b").unwrap_err().to_string();
        assert!(
            msg.contains("' '") && msg.contains("CSI naming rule"),
            "{msg}"
        );
    }

    #[test]
    fn kubelet_version_parsing() {
        let p = |s: &str| KubeletVersion::parse(s).map(|v| v.to_string());
        assert_eq!(p("1.0.0"), Some("1.0.0".into()));
        assert_eq!(p(" v1.2 "), Some("1.2".into()));
        assert_eq!(p("1.0.0-rc1"), Some("1.0.0".into()));
        assert_eq!(p("1"), None, "one component is not enough");
        assert_eq!(p("01.0"), None, "leading zero in the major");
        assert_eq!(p("x1.0"), None);
        assert_eq!(p(""), None);
        assert_eq!(
            KubeletVersion::parse("1.0")
                .unwrap()
                .cmp(&KubeletVersion::parse("1.0.0").unwrap()),
            std::cmp::Ordering::Equal
        );
    }

    /// The shared vectors, which tests/peers/vectors_test.go checks against
    /// the kubelet's own parser: the two rules agree on every case.
    #[test]
    fn highest_version_rule_matches_the_kubelets_vectors() {
        #[derive(serde::Deserialize)]
        struct Case {
            versions: Vec<String>,
            highest: Option<String>,
        }
        #[derive(serde::Deserialize)]
        struct File {
            cases: Vec<Case>,
        }
        let file: File =
            serde_json::from_str(include_str!("../tests/vectors/kubelet-versions.json")).unwrap();
        assert!(file.cases.len() >= 20);
        for case in file.cases {
            let ours = highest_supported_version(&case.versions)
                .ok()
                .map(|v| v.to_string());
            assert_eq!(ours, case.highest, "versions {:?}", case.versions);
        }
    }

    #[test]
    fn highest_version_rule() {
        let v = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            highest_supported_version(&v(&["1.0.0"]))
                .unwrap()
                .to_string(),
            "1.0.0"
        );
        assert_eq!(
            highest_supported_version(&v(&["2.0.0", "junk", "1.3", "1.2.9"]))
                .unwrap()
                .to_string(),
            "1.3"
        );
        assert_eq!(highest_supported_version(&[]), Err(VersionsError::Empty));
        assert!(matches!(
            highest_supported_version(&v(&["0.3.0", "2.0.0"])),
            Err(VersionsError::NoV1(_))
        ));
    }

    #[test]
    fn endpoints() {
        assert_eq!(endpoint("/var/lib/kubelet/plugins/x/csi.sock"), Ok(()));
        assert!(matches!(
            endpoint("relative.sock"),
            Err(EndpointError::NotAbsolute(_))
        ));
        assert!(matches!(endpoint("/a\0b"), Err(EndpointError::Nul(_))));
        let long = format!("/{}", "a".repeat(107));
        assert!(matches!(
            endpoint(&long),
            Err(EndpointError::TooLong { len: 108, .. })
        ));
        assert_eq!(endpoint(&format!("/{}", "a".repeat(106))), Ok(()));
    }
}

//! Reaching a registry as the kubelet's image pulls do: anonymous or with the
//! credentials of a `.dockerconfigjson` (an image pull Secret), trusting the
//! system's CAs and an optional bundle, plain HTTP only for registries listed.
//!
//! A registry is as hostile as a plugin. Every body it or its token endpoint
//! sends is read as a stream under a size cap, and cut off there, never
//! buffered whole. Credentials never leave TLS: a token realm over plain HTTP
//! is refused unless its host is listed in `insecure_registries`, and no
//! redirect from HTTPS to HTTP is followed. The token dance is the
//! distribution spec's (`docs/spec/auth/token.md` of distribution/distribution):
//! `GET /v2/`, a `401` with `WWW-Authenticate: Bearer realm=…,service=…`, then
//! `GET realm?service=…&scope=repository:NAME:ACTIONS`, whose JSON answer
//! carries `token` (or `access_token`).
//!
//! Proxies come from the environment as curl and Go read them (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `NO_PROXY`, through reqwest); an error names the proxy when
//! the connection went through one.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;
use serde::Deserialize;

use super::store::StoreError;
use crate::policy::source::{OciReference, RegistryOptions};

/// The largest manifest (or index) read.
pub(super) const MAX_MANIFEST: u64 = 4 << 20;
/// Where [`MAX_MANIFEST`] comes from, for messages.
pub(super) const MANIFEST_LIMIT: (u64, &str) = (MAX_MANIFEST, "a manifest's 4 MiB");
/// The largest token response, or `/v2/` answer, read.
const TOKEN_LIMIT: (u64, &str) = (64 << 10, "a token response's 64 KiB");
/// The most a credentials or CA file may hold.
const MAX_SMALL_FILE: u64 = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_REDIRECTS: usize = 5;
const USER_AGENT: &str = concat!("csi-node-driver-registrar/", env!("CARGO_PKG_VERSION"));

/// Every manifest type a plugin may come as; the index types too, for images
/// built for several platforms.
pub(super) const ACCEPTED_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// What went wrong reaching a registry.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    /// The client cannot be set up (a CA or auth file).
    #[error("{0}")]
    Setup(String),
    /// No answer: connection, TLS, a refused redirect.
    #[error("{url}: {cause}{via}{hint}", via = via(proxy), hint = connect_hint(cause, proxy))]
    Connect {
        /// What was asked for.
        url: String,
        /// The proxy the request went through, and the variable that named it.
        proxy: Option<(String, &'static str)>,
        /// Every cause, on one line.
        cause: String,
    },
    /// `401`/`403`.
    #[error("{url}: {status}: {}", if *.anonymous {
        format!("the registry wants credentials: give a .dockerconfigjson with an entry for {registry} in registry_auth_file (--registry-auth-file)")
    } else {
        format!("the registry refused the credentials for {registry} in the registry auth file")
    })]
    Unauthorized {
        /// What was asked for.
        url: String,
        /// The answer.
        status: reqwest::StatusCode,
        /// `HOST:PORT`.
        registry: String,
        /// Whether no credentials were given.
        anonymous: bool,
    },
    /// `404`.
    #[error("{url}: {status}: no such manifest or blob in this repository")]
    NotFound {
        /// What was asked for.
        url: String,
        /// The answer.
        status: reqwest::StatusCode,
    },
    /// Any other answer that is not a success.
    #[error("{url}: {status}")]
    Status {
        /// What was asked for.
        url: String,
        /// The answer.
        status: reqwest::StatusCode,
    },
    /// A Content-Length over the bound.
    #[error("{url}: the registry announces {len} bytes, more than the {max} allowed ({limit})")]
    Announced {
        /// What was asked for.
        url: String,
        /// What it announced.
        len: u64,
        /// The bound.
        max: u64,
        /// Where the bound comes from.
        limit: &'static str,
    },
    /// More bytes than the bound: cut off.
    #[error(
        "{url}: the registry sent more than the {max} bytes allowed ({limit}); stopped reading"
    )]
    TooLarge {
        /// What was asked for.
        url: String,
        /// The bound.
        max: u64,
        /// Where the bound comes from.
        limit: &'static str,
    },
    /// The body broke off.
    #[error("{url}: {cause}")]
    Body {
        /// What was asked for.
        url: String,
        /// Every cause, on one line.
        cause: String,
    },
    /// A token realm that would take credentials out of TLS.
    #[error(
        "the registry {registry} sends for tokens to {realm}, which is plain HTTP: credentials and tokens are only sent over TLS; list {realm_host} in insecure_registries (--insecure-registry) only if it is a registry of your own on a network you trust"
    )]
    PlainHttpRealm {
        /// `HOST:PORT`.
        registry: String,
        /// The realm.
        realm: String,
        /// Its `HOST[:PORT]`.
        realm_host: String,
    },
    /// A token endpoint's answer that cannot be used.
    #[error("token endpoint {realm}: {why}")]
    Token {
        /// The realm.
        realm: String,
        /// Why.
        why: String,
    },
    /// Writing what was received.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn via(proxy: &Option<(String, &'static str)>) -> String {
    match proxy {
        Some((url, var)) => format!(" (through the proxy {url}, from {var})"),
        None => String::new(),
    }
}

fn connect_hint(cause: &str, proxy: &Option<(String, &'static str)>) -> &'static str {
    let refused = cause.contains("onnection refused") || cause.contains("dns error");
    if proxy.is_some() && refused {
        ": check that the proxy is up and reachable, or list the registry in NO_PROXY"
    } else if cause.contains("plain HTTP") {
        ""
    } else if refused {
        ": check the registry's address, and that it is up"
    } else if cause.contains("certificate") || cause.contains("InvalidCertificate") {
        ": trust its CA with registry_ca_file (--registry-ca-file), or, for a registry without TLS, list it in insecure_registries (--insecure-registry)"
    } else if cause.contains("HTTP/0.9") || cause.contains("corrupt message") {
        ": it may speak plain HTTP; list it in insecure_registries (--insecure-registry) if so"
    } else {
        ""
    }
}

/// The cause of an error and everything under it, on one line.
pub(super) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// One registry and repository, authenticated on first use.
pub(super) struct Registry {
    http: reqwest::Client,
    credentials: Option<(String, String)>,
    registry: String,
    repository: String,
    insecure: Vec<String>,
    scheme: &'static str,
    /// `Authorization` for requests, once authenticated (`""`: none needed).
    header: Option<String>,
}

/// What to ask the token endpoint for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    Pull,
    Push,
}

impl Registry {
    /// A client for `reference`'s registry with `options`' trust and credentials.
    pub(super) fn new(
        reference: &OciReference,
        options: &RegistryOptions,
    ) -> Result<Self, RegistryError> {
        // reqwest is built without a default crypto provider; ring is ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let insecure = options.is_insecure(&reference.registry);
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(USER_AGENT)
            .redirect(reqwest::redirect::Policy::custom(|attempt| {
                let from_tls = attempt.previous().iter().any(|u| u.scheme() == "https");
                if from_tls && attempt.url().scheme() != "https" {
                    let to = attempt.url().to_string();
                    attempt.error(format!(
                        "the registry redirected from HTTPS to {to}, which is plain HTTP: not followed"
                    ))
                } else if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error(format!("more than {MAX_REDIRECTS} redirects: not followed"))
                } else {
                    attempt.follow()
                }
            }));
        if let Some(ca) = &options.ca_file {
            let pem = crate::policy::read::read_regular_file(ca, MAX_SMALL_FILE).map_err(|e| {
                RegistryError::Setup(format!(
                    "cannot read registry CA file {}: {e}: give a PEM bundle (registry_ca_file, --registry-ca-file)",
                    ca.display()
                ))
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                RegistryError::Setup(format!(
                    "registry CA file {} is not a PEM bundle: {}",
                    ca.display(),
                    causes(&e)
                ))
            })?;
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http.build().map_err(|e| {
            RegistryError::Setup(format!("cannot set up the registry client: {}", causes(&e)))
        })?;
        let credentials = match &options.auth_file {
            Some(f) => credentials(f, &reference.registry).map_err(RegistryError::Setup)?,
            None => None,
        };
        Ok(Registry {
            http,
            credentials,
            registry: reference.registry.clone(),
            repository: reference.repository.clone(),
            insecure: options.insecure.clone(),
            scheme: if insecure { "http" } else { "https" },
            header: None,
        })
    }

    /// `scheme://host/v2/repository`.
    fn base(&self) -> String {
        format!("{}://{}/v2/{}", self.scheme, self.registry, self.repository)
    }

    fn connect_error(&self, url: &str, e: &reqwest::Error) -> RegistryError {
        RegistryError::Connect {
            url: url.to_owned(),
            proxy: proxy_for(url),
            cause: causes(e),
        }
    }

    /// Sends `req`, turning a failure to connect into the error that names
    /// the proxy, and any non-success status into its error.
    async fn send(
        &self,
        url: &str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, RegistryError> {
        let resp = req.send().await.map_err(|e| self.connect_error(url, &e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        Err(match status.as_u16() {
            401 | 403 => RegistryError::Unauthorized {
                url: url.to_owned(),
                status,
                registry: self.registry.clone(),
                anonymous: self.credentials.is_none(),
            },
            404 => RegistryError::NotFound {
                url: url.to_owned(),
                status,
            },
            _ => RegistryError::Status {
                url: url.to_owned(),
                status,
            },
        })
    }

    /// Asks the registry how to authenticate (`GET /v2/`), and does.
    pub(super) async fn authenticate(&mut self, access: Access) -> Result<(), RegistryError> {
        if self.header.is_some() {
            return Ok(());
        }
        let url = format!("{}://{}/v2/", self.scheme, self.registry);
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| self.connect_error(&url, &e))?;
        let challenge = resp
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = resp.status();
        // The body is not wanted; read none of it beyond the cap.
        drop(resp);
        if status.is_success() {
            self.header = Some(self.basic().unwrap_or_default());
            return Ok(());
        }
        if status != reqwest::StatusCode::UNAUTHORIZED {
            return Err(RegistryError::Status { url, status });
        }
        let challenge = challenge.unwrap_or_default();
        let (scheme, params) = parse_challenge(&challenge);
        if scheme.eq_ignore_ascii_case("basic") {
            self.header = Some(self.basic().ok_or(RegistryError::Unauthorized {
                url,
                status,
                registry: self.registry.clone(),
                anonymous: true,
            })?);
            return Ok(());
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(RegistryError::Token {
                realm: url,
                why: format!(
                    "the registry asks for authentication {challenge:?}, which is neither Basic nor Bearer"
                ),
            });
        }
        let token = self.token(&params, access).await?;
        self.header = Some(format!("Bearer {token}"));
        Ok(())
    }

    fn basic(&self) -> Option<String> {
        self.credentials.as_ref().map(|(user, pass)| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
            )
        })
    }

    /// A bearer token from the realm the challenge names.
    async fn token(
        &self,
        params: &BTreeMap<String, String>,
        access: Access,
    ) -> Result<String, RegistryError> {
        let realm = params.get("realm").cloned().unwrap_or_default();
        let bad = |why: String| RegistryError::Token {
            realm: realm.clone(),
            why,
        };
        let mut url = reqwest::Url::parse(&realm)
            .map_err(|e| bad(format!("the realm is not a URL ({e})")))?;
        let realm_host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => return Err(bad("the realm names no host".into())),
        };
        match url.scheme() {
            "https" => {}
            "http" if self.insecure.contains(&realm_host) => {}
            "http" => {
                return Err(RegistryError::PlainHttpRealm {
                    registry: self.registry.clone(),
                    realm,
                    realm_host,
                });
            }
            other => return Err(bad(format!("the realm's scheme {other:?} is not https"))),
        }
        let actions = match access {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        };
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = params.get("service") {
                query.append_pair("service", service);
            }
            query.append_pair(
                "scope",
                &format!("repository:{}:{actions}", self.repository),
            );
        }
        let text_url = url.to_string();
        let mut req = self.http.get(url);
        if let Some(basic) = self.basic() {
            req = req.header(reqwest::header::AUTHORIZATION, basic);
        }
        let resp = self.send(&text_url, req).await?;
        let mut body = Vec::new();
        read_capped(resp, &text_url, TOKEN_LIMIT, |c| {
            body.extend_from_slice(c);
            Ok(())
        })
        .await?;
        #[derive(Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let t: Token = serde_json::from_slice(&body)
            .map_err(|e| bad(format!("the answer is not a token response ({e})")))?;
        let token = t
            .token
            .or(t.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| bad("the answer has no token".into()))?;
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad("the token has characters a header cannot carry".into()));
        }
        Ok(token)
    }

    /// A request to `url` with the authorization found.
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, url);
        if let Some(h) = self.header.as_deref().filter(|h| !h.is_empty()) {
            req = req.header(reqwest::header::AUTHORIZATION, h);
        }
        req
    }

    /// GETs `path` under the repository, as a stream of at most `max` bytes
    /// (`limit` says where that bound comes from) handed to `sink`. Returns
    /// the response's content type.
    pub(super) async fn get(
        &mut self,
        path: &str,
        accept: &str,
        limit: (u64, &'static str),
        sink: impl FnMut(&[u8]) -> Result<(), StoreError>,
    ) -> Result<Option<String>, RegistryError> {
        self.authenticate(Access::Pull).await?;
        let url = format!("{}/{path}", self.base());
        let req = self
            .request(reqwest::Method::GET, &url)
            .header(reqwest::header::ACCEPT, accept);
        let resp = self.send(&url, req).await?;
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned());
        read_capped(resp, &url, limit, sink).await?;
        Ok(content_type)
    }

    /// Uploads a blob (monolithic: `POST` then `PUT ?digest=`), unless the
    /// registry has it.
    pub(super) async fn push_blob(
        &mut self,
        bytes: Vec<u8>,
        digest: &crate::policy::Digest,
    ) -> Result<(), RegistryError> {
        self.authenticate(Access::Push).await?;
        let head = format!("{}/blobs/{digest}", self.base());
        if let Ok(resp) = self.request(reqwest::Method::HEAD, &head).send().await
            && resp.status().is_success()
        {
            return Ok(());
        }
        let start = format!("{}/blobs/uploads/", self.base());
        let resp = self
            .send(&start, self.request(reqwest::Method::POST, &start))
            .await?;
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Body {
                url: start.clone(),
                cause: "the registry started an upload but sent no Location".into(),
            })?;
        let mut upload = reqwest::Url::parse(&start)
            .and_then(|base| base.join(location))
            .map_err(|e| RegistryError::Body {
                url: start.clone(),
                cause: format!("the upload Location {location:?} is not a URL ({e})"),
            })?;
        upload
            .query_pairs_mut()
            .append_pair("digest", &digest.to_string());
        let text = upload.to_string();
        let req = self
            .request(reqwest::Method::PUT, &text)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(bytes);
        self.send(&text, req).await?;
        Ok(())
    }

    /// `PUT`s a manifest by tag or digest.
    pub(super) async fn push_manifest(
        &mut self,
        reference: &str,
        media_type: &str,
        bytes: Vec<u8>,
    ) -> Result<(), RegistryError> {
        self.authenticate(Access::Push).await?;
        let url = format!("{}/manifests/{reference}", self.base());
        let req = self
            .request(reqwest::Method::PUT, &url)
            .header(reqwest::header::CONTENT_TYPE, media_type)
            .body(bytes);
        self.send(&url, req).await?;
        Ok(())
    }
}

/// Reads `resp`'s body into `sink`, at most `max` bytes.
async fn read_capped(
    resp: reqwest::Response,
    url: &str,
    (max, limit): (u64, &'static str),
    mut sink: impl FnMut(&[u8]) -> Result<(), StoreError>,
) -> Result<(), RegistryError> {
    if let Some(len) = resp.content_length()
        && len > max
    {
        return Err(RegistryError::Announced {
            url: url.to_owned(),
            len,
            max,
            limit,
        });
    }
    let mut read = 0u64;
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| RegistryError::Body {
            url: url.to_owned(),
            cause: causes(&e),
        })?;
        read += chunk.len() as u64;
        if read > max {
            return Err(RegistryError::TooLarge {
                url: url.to_owned(),
                max,
                limit,
            });
        }
        sink(&chunk)?;
    }
    Ok(())
}

/// `Bearer realm="…",service="…"` into its scheme and parameters (RFC 7235's
/// auth-param list; quoted strings may hold commas).
fn parse_challenge(header: &str) -> (String, BTreeMap<String, String>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = BTreeMap::new();
    let mut rest = rest.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key
            .trim()
            .trim_start_matches(',')
            .trim()
            .to_ascii_lowercase();
        let after = after.trim_start();
        let (value, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => value.push(c),
                }
            }
            (value, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_owned(), &after[end..])
        };
        params.insert(key, value);
        rest = next.trim_start().trim_start_matches(',').trim_start();
    }
    (scheme.to_owned(), params)
}

/// The proxy the environment gives for `url`, and the variable that names
/// it, unless `NO_PROXY` excludes its host: what reqwest's system proxy does,
/// read again here only to name the proxy in an error.
fn proxy_for(url: &str) -> Option<(String, &'static str)> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url
        .host_str()?
        .trim_matches(['[', ']'])
        .to_ascii_lowercase();
    let env = |names: &[&'static str]| {
        names.iter().find_map(|n| {
            std::env::var(n)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (v, *n))
        })
    };
    let no_proxy = env(&["NO_PROXY", "no_proxy"])
        .map(|(v, _)| v)
        .unwrap_or_default();
    let excluded = no_proxy.split(',').map(str::trim).any(|entry| {
        let entry = entry.to_ascii_lowercase();
        let name = entry.rsplit_once(':').map_or(entry.as_str(), |(h, _)| h);
        entry == "*"
            || name == host
            || (name.starts_with('.') && host.ends_with(name))
            || (!name.is_empty() && host.ends_with(&format!(".{name}")))
    });
    if excluded {
        return None;
    }
    match url.scheme() {
        "https" => env(&["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]),
        _ => env(&["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]),
    }
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuth>,
}

#[derive(Deserialize)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The host a `.dockerconfigjson` key names (`https://host/v1/` or `host`).
fn host_of(key: &str) -> &str {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

fn same_registry(a: &str, b: &str) -> bool {
    let hub = |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    a == b || (hub(a) && hub(b))
}

/// The credentials (user, password) for `registry` in a `.dockerconfigjson`
/// file; `None` when it has none for it.
pub(super) fn credentials(file: &Path, registry: &str) -> Result<Option<(String, String)>, String> {
    let fix = "give the .dockerconfigjson of an image pull Secret: {\"auths\": {\"HOST:PORT\": {\"auth\": \"<base64 of user:password>\"}}}";
    let bytes = crate::policy::read::read_regular_file(file, MAX_SMALL_FILE).map_err(|e| {
        format!(
            "cannot read registry auth file {}: {e}: {fix}",
            file.display()
        )
    })?;
    let cfg: DockerConfig = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "registry auth file {} is not a .dockerconfigjson ({e}): {fix}",
            file.display()
        )
    })?;
    let Some((key, entry)) = cfg
        .auths
        .iter()
        .find(|(k, _)| same_registry(host_of(k), registry))
    else {
        return Ok(None);
    };
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(Some((u.clone(), p.clone())));
    }
    let bad = |why: &str| {
        format!(
            "registry auth file {}: the entry for {key:?} {why}: {fix}",
            file.display()
        )
    };
    let encoded = entry
        .auth
        .as_deref()
        .ok_or_else(|| bad("has neither auth nor username and password"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| bad("has an auth that is not base64"))?;
    let text = String::from_utf8(decoded).map_err(|_| bad("has an auth that is not UTF-8"))?;
    let (u, p) = text
        .split_once(':')
        .ok_or_else(|| bad("has an auth that is not base64 of user:password"))?;
    Ok(Some((u.to_owned(), p.to_owned())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn credentials_from_a_pull_secret() {
        let f = file(
            r#"{"auths": {"https://127.0.0.1:5000/v1/": {"auth": "YWxpY2U6czNjcjN0"},
                "index.docker.io": {"username": "bob", "password": "pw"}}}"#,
        );
        let auth = |r| match credentials(f.path(), r).unwrap() {
            Some((u, p)) => format!("{u}:{p}"),
            None => "anonymous".into(),
        };
        assert_eq!(auth("127.0.0.1:5000"), "alice:s3cr3t");
        assert_eq!(auth("docker.io"), "bob:pw");
        assert_eq!(auth("ghcr.io"), "anonymous");
    }

    #[test]
    fn a_bad_pull_secret_names_the_file_and_the_entry() {
        let f = file(r#"{"auths": {"r:5000": {"auth": "not base64!"}}}"#);
        let err = credentials(f.path(), "r:5000").unwrap_err();
        assert!(
            err.starts_with(&format!(
                "registry auth file {}: the entry for \"r:5000\" has an auth that is not base64",
                f.path().display()
            )),
            "{err}"
        );
        let f = file("auths: {}");
        let err = credentials(f.path(), "r:5000").unwrap_err();
        assert!(err.contains("is not a .dockerconfigjson"), "{err}");
    }

    #[test]
    fn challenges_as_registries_send_them() {
        let (scheme, p) = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(p["realm"], "https://auth.docker.io/token");
        assert_eq!(p["service"], "registry.docker.io");
        assert_eq!(p["scope"], "repository:a/b:pull,push");
        let (scheme, p) = parse_challenge(r#"Basic realm="test""#);
        assert_eq!((scheme.as_str(), p["realm"].as_str()), ("Basic", "test"));
    }
}

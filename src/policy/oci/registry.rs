//! Reaching a registry as the kubelet's image pulls do: anonymous or with the
//! credentials of a `.dockerconfigjson` (an image pull Secret), trusting the
//! system's CAs and an optional bundle, plain HTTP only for registries listed.
//!
//! `oci-client` does the token dance (`auth`) and pushes. Manifests and blobs
//! are read here, on the same TLS settings, so that every body is read as a
//! stream under a size cap: a registry that sends too much is cut off, never
//! buffered.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use futures_util::StreamExt;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use serde::Deserialize;

use crate::policy::source::{OciReference, RegistryOptions};

/// The largest manifest (or index) read.
pub(super) const MAX_MANIFEST: u64 = 4 << 20;
/// Where [`MAX_MANIFEST`] comes from, for messages.
pub(super) const MANIFEST_LIMIT: (u64, &str) = (MAX_MANIFEST, "a manifest's 4 MiB");
/// The most a credentials or CA file may hold.
const MAX_SMALL_FILE: u64 = 1 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Every manifest type a plugin may come as; the index types too, for images
/// built for several platforms.
pub(super) const ACCEPTED_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// One registry and repository, authenticated on first use.
pub(super) struct Registry {
    client: oci_client::Client,
    http: reqwest::Client,
    auth: RegistryAuth,
    reference: Reference,
    base: String,
    /// `Authorization` for reads, once `authenticate` has run.
    header: Option<String>,
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

impl Registry {
    /// A client for `reference`'s registry with `options`' trust and credentials.
    pub(super) fn new(reference: &OciReference, options: &RegistryOptions) -> Result<Self, String> {
        // reqwest is built without a default crypto provider; ring is ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = Vec::new();
        if let Some(ca) = &options.ca_file {
            let pem = crate::policy::read::read_regular_file(ca, MAX_SMALL_FILE).map_err(|e| {
                format!(
                    "cannot read registry CA file {}: {e}: give a PEM bundle (registry_ca_file, --registry-ca-file)",
                    ca.display()
                )
            })?;
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                format!(
                    "registry CA file {} is not a PEM bundle: {}",
                    ca.display(),
                    causes(&e)
                )
            })?;
            roots.push(pem);
        }
        let insecure = options.is_insecure(&reference.registry);
        let config = ClientConfig {
            protocol: if insecure {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            extra_root_certificates: roots
                .iter()
                .map(|pem| Certificate {
                    encoding: CertificateEncoding::Pem,
                    data: pem.clone(),
                })
                .collect(),
            connect_timeout: Some(CONNECT_TIMEOUT),
            user_agent: concat!("csi-node-driver-registrar/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        let client = oci_client::Client::try_from(config)
            .map_err(|e| format!("cannot set up the registry client: {}", causes(&e)))?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!(
                "csi-node-driver-registrar/",
                env!("CARGO_PKG_VERSION")
            ));
        for pem in &roots {
            for cert in reqwest::Certificate::from_pem_bundle(pem).unwrap_or_default() {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| format!("cannot set up the registry client: {}", causes(&e)))?;
        let auth = match &options.auth_file {
            Some(f) => credentials(f, &reference.registry)?,
            None => RegistryAuth::Anonymous,
        };
        let oci_ref = Reference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            reference.tag.clone().unwrap_or_else(|| "latest".into()),
        );
        Ok(Registry {
            client,
            http,
            auth,
            base: format!(
                "{}://{}/v2/{}",
                if insecure { "http" } else { "https" },
                reference.registry,
                reference.repository
            ),
            reference: oci_ref,
            header: None,
        })
    }

    /// The client for pushes, authenticated for them.
    pub(super) async fn for_push(&self) -> Result<(&oci_client::Client, &RegistryAuth), String> {
        self.client
            .auth(&self.reference, &self.auth, RegistryOperation::Push)
            .await
            .map_err(|e| self.explain(causes(&e)))?;
        Ok((&self.client, &self.auth))
    }

    /// Asks the registry how to authenticate, and does.
    async fn authenticate(&mut self) -> Result<(), String> {
        if self.header.is_some() {
            return Ok(());
        }
        let token = self
            .client
            .auth(&self.reference, &self.auth, RegistryOperation::Pull)
            .await
            .map_err(|e| self.explain(causes(&e)))?;
        self.header = Some(match (token, &self.auth) {
            (Some(t), _) => format!("Bearer {t}"),
            (None, RegistryAuth::Basic(user, pass)) => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
            ),
            (None, _) => String::new(),
        });
        Ok(())
    }

    fn explain(&self, cause: String) -> String {
        let hint = if cause.contains("onnection refused") || cause.contains("dns error") {
            ": check the registry's address, and that it is up"
        } else if cause.contains("certificate") || cause.contains("InvalidCertificate") {
            ": trust its CA with registry_ca_file (--registry-ca-file), or, for a registry without TLS, list it in insecure_registries (--insecure-registry)"
        } else if cause.contains("HTTP/0.9") || cause.contains("corrupt message") {
            ": it may speak plain HTTP; list it in insecure_registries (--insecure-registry) if so"
        } else {
            ""
        };
        format!("{cause}{hint}")
    }

    /// GETs `path` under the repository, as a stream of at most `max` bytes
    /// (`limit` says where that bound comes from) handed to `sink`. Returns
    /// the response's content type.
    pub(super) async fn get(
        &mut self,
        path: &str,
        accept: &str,
        (max, limit): (u64, &str),
        mut sink: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<Option<String>, String> {
        self.authenticate().await?;
        let url = format!("{}/{path}", self.base);
        let mut req = self.http.get(&url).header(reqwest::header::ACCEPT, accept);
        if let Some(h) = self.header.as_deref().filter(|h| !h.is_empty()) {
            req = req.header(reqwest::header::AUTHORIZATION, h);
        }
        let resp = req.send().await.map_err(|e| self.explain(causes(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            let auth_file = matches!(self.auth, RegistryAuth::Anonymous);
            return Err(match status.as_u16() {
                401 | 403 if auth_file => format!(
                    "{url}: {status}: the registry wants credentials: give a .dockerconfigjson with an entry for {} in registry_auth_file (--registry-auth-file)",
                    self.reference.registry()
                ),
                401 | 403 => format!(
                    "{url}: {status}: the registry refused the credentials for {} in the registry auth file",
                    self.reference.registry()
                ),
                404 => format!("{url}: {status}: no such manifest or blob in this repository"),
                _ => format!("{url}: {status}"),
            });
        }
        if let Some(len) = resp.content_length()
            && len > max
        {
            return Err(format!(
                "{url}: the registry announces {len} bytes, more than the {max} allowed ({limit})"
            ));
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned());
        let mut read = 0u64;
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| format!("{url}: {}", causes(&e)))?;
            read += chunk.len() as u64;
            if read > max {
                return Err(format!(
                    "{url}: the registry sent more than the {max} bytes allowed ({limit}); stopped reading"
                ));
            }
            sink(&chunk)?;
        }
        Ok(content_type)
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

/// The credentials for `registry` in a `.dockerconfigjson` file; anonymous
/// when it has none for it.
pub(super) fn credentials(file: &Path, registry: &str) -> Result<RegistryAuth, String> {
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
        return Ok(RegistryAuth::Anonymous);
    };
    if let (Some(u), Some(p)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(u.clone(), p.clone()));
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
    Ok(RegistryAuth::Basic(u.to_owned(), p.to_owned()))
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
            RegistryAuth::Basic(u, p) => format!("{u}:{p}"),
            RegistryAuth::Anonymous => "anonymous".into(),
            RegistryAuth::Bearer(_) => "bearer".into(),
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
}

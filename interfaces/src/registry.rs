//! Any OCI registry a site trusts (issue 39, items 2 and 3): the
//! `[[registries]]` a VEEM and its VEEHs are configured with (host, CA,
//! credentials, whose repositories a provider may name), and what they do
//! there through `oci-client`: resolve an image reference to its manifest's
//! digest and read the VEE image artifact it names (VEEM, at admission),
//! pull its layers verified by digest and resumable (VEEH, into the image
//! cache), push an image artifact (`image-repo push-image`). A blob is
//! trusted because its sha256 matches, never because of where it came from;
//! layer descriptors are built from the digest and size alone, so that a
//! manifest's `urls` never send a request elsewhere.

mod delete;
mod push;
pub mod realm;

pub use delete::Dropped;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use oci_client::client::{BlobResponse, Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};

use crate::artifact::{self, ImageArtifact, Layer, OCI_MANIFEST};
use crate::error::{Error, Result};
use crate::manifest::RegistryImage;
use crate::repo_client::pull::partial_path;
use crate::repo_client::sink::HashingSink;
use crate::retry::RetryPolicy;
use crate::BlobId;

/// `[[registries]]`: one OCI registry the site trusts.
///
/// ```toml
/// [[registries]]
/// host = "registry.example.com:5000"   # as image references name it
/// ca = "/etc/vee/registry-ca.pem"      # default: the system's roots
/// username = "site-a"                  # with password_file: HTTP Basic
/// password_file = "/etc/vee/registry.password"
/// scope = "provider"                   # or "any"
/// realm_hosts = ["auth.example.com"]   # its token service, if elsewhere
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// `host[:port]`, exactly as image references name the registry.
    pub host: String,
    /// The CA (PEM) its certificate must chain to; the only one trusted
    /// for it. Default: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<PathBuf>,
    /// The user the site signs in as; with `password_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// A file whose first line is the password (or token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Which repositories a provider's manifest may name here.
    #[serde(default)]
    pub scope: Scope,
    /// Hosts (`host[:port]`, port 443 when not given) besides the
    /// registry's own that may receive its credentials as the token realm
    /// its `/v2/` challenge names (its token service); always over HTTPS
    /// (`registry::realm`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub realm_hosts: Vec<String>,
}

/// Which repositories of a registry a provider may name, since the site's
/// credentials read them for it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Only those under the provider's own name (`acme/...` for provider
    /// `acme`).
    #[default]
    Provider,
    /// Any (a mirror of public images).
    Any,
}

/// A site whose repository is an OCI registry (issue 39, item 6):
/// `image_repo = "oci://REGISTRY/NAMESPACE"` in the VEEM's and VEEHs'
/// configurations, the registry one of their `[[registries]]`. Its
/// checkpoints are artifacts in `NAMESPACE/checkpoints`, tagged by their
/// IDs; its images are registry images (`REGISTRY/...@sha256:...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteRegistry {
    /// `host[:port]`.
    pub registry: String,
    /// The site's namespace in it (`site-a`).
    pub namespace: String,
}

impl SiteRegistry {
    /// `url` (a configuration's `image_repo`) as a site registry: `None`
    /// unless it starts with `oci://`; an error naming the reason when it
    /// has no namespace or its registry is not one of `registries`.
    pub fn parse(url: &str, registries: &[RegistryConfig]) -> Option<Result<Self, String>> {
        let rest = url.strip_prefix("oci://")?;
        Some(match rest.split_once('/') {
            Some((registry, namespace)) if !registry.is_empty() && !namespace.is_empty() && !namespace.ends_with('/') => {
                if registries.iter().any(|r| r.host == registry) {
                    Ok(Self {
                        registry: registry.into(),
                        namespace: namespace.into(),
                    })
                } else {
                    Err(format!("registry {registry} is not one of the [[registries]]"))
                }
            }
            _ => Err(format!("{url:?} is not oci://REGISTRY/NAMESPACE")),
        })
    }

    /// The repository of the site's checkpoints, `NAMESPACE/checkpoints`.
    pub fn checkpoints(&self) -> RegistryImage {
        RegistryImage {
            registry: self.registry.clone(),
            repository: format!("{}/checkpoints", self.namespace),
            tag: None,
            digest: None,
        }
    }
}

/// The registries of a configuration, each with its client.
pub struct Registries {
    entries: Vec<Entry>,
    retry: RetryPolicy,
}

pub(crate) struct Entry {
    config: RegistryConfig,
    client: Client,
    auth: RegistryAuth,
    /// For what `oci-client` does not do (deleting a manifest, reading
    /// the token realm), with the same CA.
    http: reqwest::Client,
    /// When the token realm was last found to be one the credentials may
    /// go to (`realm`).
    realm_checked: tokio::sync::Mutex<Option<std::time::Instant>>,
}

fn registry_err(registry: &str, what: impl Into<String>, reason: impl ToString) -> Error {
    Error::Registry {
        registry: registry.to_string(),
        what: what.into(),
        reason: reason.to_string(),
    }
}

impl Registries {
    /// Clients for `configs`: CA and password files are read now. Errors:
    /// [`Error::Io`] naming an unreadable file, [`Error::Registry`] for a
    /// registry listed twice or a username without a password file.
    pub fn new(configs: &[RegistryConfig]) -> Result<Self> {
        let mut entries: Vec<Entry> = Vec::new();
        for c in configs {
            if entries.iter().any(|e| e.config.host == c.host) {
                return Err(registry_err(&c.host, "[[registries]]", "listed twice"));
            }
            let mut cfg = ClientConfig {
                protocol: ClientProtocol::Https,
                connect_timeout: Some(Duration::from_secs(10)),
                // A layer goes up in one streamed PUT: oci-client's chunked
                // upload sends one PATCH per piece of the stream.
                use_monolithic_push: true,
                read_timeout: Some(Duration::from_secs(60)),
                ..Default::default()
            };
            let mut http = crate::tls::http_client()
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(60))
                .https_only(true);
            if let Some(ca) = &c.ca {
                let data = std::fs::read(ca).map_err(|e| Error::io(ca, e))?;
                let cert = reqwest::Certificate::from_pem(&data).map_err(|e| registry_err(&c.host, "ca", e))?;
                http = http.tls_certs_only([cert]);
                cfg.tls_certs_only = vec![Certificate {
                    encoding: CertificateEncoding::Pem,
                    data,
                }];
            }
            let auth = match (&c.username, &c.password_file) {
                (Some(user), Some(file)) => RegistryAuth::Basic(
                    user.clone(),
                    crate::tokens::read_file(file).map_err(|e| registry_err(&c.host, "password_file", format!("{e:#}")))?,
                ),
                (None, None) => RegistryAuth::Anonymous,
                _ => return Err(registry_err(&c.host, "[[registries]]", "username and password_file go together")),
            };
            entries.push(Entry {
                config: c.clone(),
                client: Client::new(cfg),
                auth,
                http: http.build().map_err(|e| registry_err(&c.host, "client", e))?,
                realm_checked: Default::default(),
            });
        }
        Ok(Self {
            entries,
            retry: RetryPolicy::default(),
        })
    }

    /// This with `retry` for interrupted pulls (tests shorten it).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The entry of `registry`. Errors: [`Error::Registry`], not trusted.
    pub(crate) fn find(&self, registry: &str, what: &str) -> Result<&Entry> {
        self.entries
            .iter()
            .find(|e| e.config.host == registry)
            .ok_or_else(|| registry_err(registry, what, "not a registry this site trusts (`[[registries]]`)"))
    }

    fn entry(&self, image: &RegistryImage) -> Result<(&Entry, Reference)> {
        let e = self.find(&image.registry, &image.to_string())?;
        let reference = match (&image.digest, &image.tag) {
            (Some(d), _) => Reference::with_digest(image.registry.clone(), image.repository.clone(), d.to_string()),
            (None, Some(t)) => Reference::with_tag(image.registry.clone(), image.repository.clone(), t.clone()),
            (None, None) => return Err(registry_err(&image.registry, image.to_string(), "names neither a tag nor a digest")),
        };
        Ok((e, reference))
    }

    /// Whether `provider`'s manifest may name `image`: the registry is
    /// trusted and, with `scope = "provider"`, the repository is under the
    /// provider's name. Errors: [`Error::Registry`] with the reason.
    pub fn check_use(&self, image: &RegistryImage, provider: &str) -> Result<()> {
        let (e, _) = self.entry(image)?;
        if e.config.scope == Scope::Provider && image.namespace() != provider {
            return Err(registry_err(
                &image.registry,
                image.to_string(),
                format!(
                    "repository {:?} is not under provider {provider:?}'s name ({provider}/...), and this registry's scope is \"provider\"",
                    image.repository
                ),
            ));
        }
        Ok(())
    }

    /// The image artifact `image` names, read and checked
    /// ([`ImageArtifact::parse`]); a tag resolved to the manifest's digest
    /// (`RegistryImage::resolved`). The manifest's bytes must hash to the
    /// digest named. Errors: [`Error::Registry`] (untrusted, refused,
    /// unreachable, not a VEE image), [`Error::DigestMismatch`].
    pub async fn resolve(&self, image: &RegistryImage) -> Result<ImageArtifact> {
        Ok(self.manifest(image).await?.0)
    }

    /// [`Registries::resolve`] with the manifest's bytes.
    pub async fn manifest(&self, image: &RegistryImage) -> Result<(ImageArtifact, Vec<u8>)> {
        let raw = self.raw_manifest(image).await?;
        let what = format!("manifest of {image}");
        let a = ImageArtifact::parse(&raw).map_err(|why| registry_err(&image.registry, &what, format!("not a VEE image: {why}")))?;
        Ok((a, raw))
    }

    /// The bytes of the OCI image manifest `image` names (any artifact),
    /// at most [`artifact::MAX_MANIFEST_BYTES`], checked against the digest
    /// it names. Errors: [`Error::Registry`], [`Error::DigestMismatch`].
    pub async fn raw_manifest(&self, image: &RegistryImage) -> Result<Vec<u8>> {
        let (e, reference) = self.entry(image)?;
        let what = format!("manifest of {image}");
        let (raw, _) = e
            .client
            .pull_manifest_raw(&reference, e.signed_in().await?, &[OCI_MANIFEST])
            .await
            .map_err(|err| registry_err(&image.registry, &what, crate::error::chain(&err)))?;
        if raw.len() > artifact::MAX_MANIFEST_BYTES {
            return Err(registry_err(
                &image.registry,
                &what,
                format!("{} bytes; at most {}", raw.len(), artifact::MAX_MANIFEST_BYTES),
            ));
        }
        if let Some(d) = &image.digest {
            let actual = BlobId::of(&raw);
            if &actual != d {
                return Err(Error::DigestMismatch {
                    id: d.to_string(),
                    actual: actual.to_string(),
                });
            }
        }
        Ok(raw.to_vec())
    }

    /// Downloads `layer` of `image` (any blob of its repository: its tag
    /// or digest are not used) to `dest`: into `DEST.partial`, hashed
    /// on the fly, resumed from an earlier partial file or a broken
    /// connection (a `Range` request), cut off past the layer's size, and
    /// renamed to `dest` only when its sha256 is the layer's digest.
    /// Returns the bytes fetched now. Errors: [`Error::Registry`] (the
    /// partial file kept for a resume when some bytes came),
    /// [`Error::DigestMismatch`] (the partial file removed), [`Error::Io`].
    pub async fn pull_layer(&self, image: &RegistryImage, layer: &Layer, dest: &Path) -> Result<u64> {
        let (e, reference) = self.entry(&image.resolved(layer.digest.clone()))?;
        e.client.store_auth_if_needed(&image.registry, e.signed_in().await?).await;
        let partial = partial_path(dest);
        let what = format!("layer {} of {image}", layer.digest);
        let mut restarted = false;
        'whole: loop {
            let mut sink = HashingSink::resume(&partial).map_err(|err| Error::io(&partial, err))?;
            let resumed_from = sink.len();
            let mut attempt = 1;
            while sink.len() < layer.size {
                let before = sink.len();
                let failed = match self.attempt(e, &reference, layer, &mut sink).await {
                    Ok(Fetched::Appended) if sink.len() > before => continue,
                    Ok(Fetched::Appended) => registry_err(
                        &image.registry,
                        &what,
                        format!("the connection closed after {before} of {} bytes", layer.size),
                    ),
                    Ok(Fetched::RangeIgnored) if !restarted => {
                        tracing::warn!(%what, "the registry ignored a Range request; starting over");
                        restarted = true;
                        let _ = sink.finish().await;
                        let _ = std::fs::remove_file(&partial);
                        continue 'whole;
                    }
                    Ok(Fetched::RangeIgnored) => registry_err(&image.registry, &what, "the registry ignores Range requests"),
                    Err(err) => err,
                };
                if attempt < self.retry.attempts {
                    tracing::debug!(%what, attempt, error = %failed, "layer download interrupted; resuming");
                    tokio::time::sleep(self.retry.backoff(attempt)).await;
                    attempt += 1;
                    continue;
                }
                let len = sink.len();
                let _ = sink.finish().await;
                if len == 0 {
                    let _ = std::fs::remove_file(&partial);
                }
                return Err(failed);
            }
            let written = sink.finish().await.map_err(|err| Error::io(&partial, err))?;
            if written.id == layer.digest && written.len == layer.size {
                std::fs::rename(&partial, dest).map_err(|err| Error::io(dest, err))?;
                tracing::info!(%what, dest = %dest.display(), size = written.len, "pulled layer");
                return Ok(written.len - resumed_from);
            }
            let _ = std::fs::remove_file(&partial);
            if resumed_from == 0 || restarted {
                return Err(Error::DigestMismatch {
                    id: layer.digest.to_string(),
                    actual: written.id.to_string(),
                });
            }
            tracing::warn!(%what, "a resumed partial download did not match; starting over");
            restarted = true;
        }
    }

    /// One GET from `sink.len()` on, appended to `sink`.
    async fn attempt(&self, e: &Entry, reference: &Reference, layer: &Layer, sink: &mut HashingSink) -> Result<Fetched> {
        let registry = reference.registry();
        let what = format!("layer {}", layer.digest);
        let desc = OciDescriptor {
            media_type: layer.media_type.clone(),
            digest: layer.digest.to_string(),
            size: layer.size as i64,
            urls: None,
            annotations: None,
            artifact_type: None,
        };
        let offset = sink.len();
        let stream = match e.client.pull_blob_stream_partial(reference, &desc, offset, None).await {
            Ok(BlobResponse::Partial(s)) => s,
            Ok(BlobResponse::Full(s)) if offset == 0 => s,
            Ok(BlobResponse::Full(_)) => return Ok(Fetched::RangeIgnored),
            Err(err) => return Err(registry_err(registry, what, crate::error::chain(&err))),
        };
        let mut body = stream.stream;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|err| registry_err(registry, &what, err))?;
            if sink.len() + chunk.len() as u64 > layer.size {
                return Err(registry_err(
                    registry,
                    what,
                    format!("the registry sent more than the layer's {} bytes", layer.size),
                ));
            }
            sink.write(chunk).await.map_err(|err| Error::io(sink.path(), err))?;
        }
        Ok(Fetched::Appended)
    }
}

/// How one download attempt of a layer ended without an error.
enum Fetched {
    /// What the registry sent is in the partial file.
    Appended,
    /// It answered a `Range` request with the whole layer.
    RangeIgnored,
}

//! Connecting to a VEEM's VMI and authenticating every call.

use std::time::Duration;

use anyhow::{anyhow, Context};
use std::path::Path;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

/// A VMI client whose every call carries the bearer token.
pub type VmiServiceClient = interfaces::vmi::vmi_service_client::VmiServiceClient<InterceptedService<Channel, AuthInterceptor>>;

/// How long to wait for the TCP (and HTTP/2) connection to the VEEM.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Adds `authorization: Bearer TOKEN` to every request (nothing without a token).
#[derive(Debug, Clone, Default)]
pub struct AuthInterceptor {
    header: Option<MetadataValue<Ascii>>,
}

impl AuthInterceptor {
    /// An interceptor for `token`; `None` or an empty token sends no header.
    /// Fails if the token cannot be sent as gRPC metadata (e.g. non-ASCII).
    pub fn new(token: Option<&str>) -> anyhow::Result<Self> {
        let header = match token.map(str::trim) {
            None | Some("") => None,
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| anyhow!("the token contains characters not allowed in gRPC metadata"))?,
            ),
        };
        Ok(Self { header })
    }
}

impl Interceptor for AuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(h) = &self.header {
            request.metadata_mut().insert("authorization", h.clone());
        }
        Ok(request)
    }
}

/// Connect to the VMI at `endpoint` (e.g. `https://127.0.0.1:7200`); an
/// `https://` endpoint needs `ca`, the CA of the VEEM's certificate, which
/// must be for the endpoint's host name or address. The error names the
/// endpoint that could not be reached.
///
/// `endpoint` may name several VEEMs of one site, separated by commas (a
/// site on etcd, with a leader and standbys: docs/operator-guide.md "A site on etcd"):
/// each is asked whether it serves (gRPC health) until one does; a
/// standby's answer names the leader, which is asked next, and a leader
/// still starting is taken when none serves. The error then names each
/// endpoint's answer.
///
/// Each call is given up after `request_timeout` (DeadlineExceeded); a
/// stream's messages are not (the timeout ends with its first answer).
pub async fn connect(
    endpoint: &str,
    token: Option<&str>,
    ca: Option<&Path>,
    request_timeout: Duration,
) -> anyhow::Result<VmiServiceClient> {
    let auth = AuthInterceptor::new(token)?;
    let endpoints: Vec<String> = endpoint
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    if endpoints.len() <= 1 {
        let channel = channel(endpoint.trim(), ca, request_timeout).await?;
        return Ok(interfaces::vmi::vmi_service_client::VmiServiceClient::with_interceptor(
            channel, auth,
        ));
    }
    let leader = leading(endpoints, ca, request_timeout).await?;
    Ok(interfaces::vmi::vmi_service_client::VmiServiceClient::with_interceptor(
        leader, auth,
    ))
}

/// The channel to whichever of `endpoints` leads (see [`connect`]).
async fn leading(endpoints: Vec<String>, ca: Option<&Path>, request_timeout: Duration) -> anyhow::Result<Channel> {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut queue: std::collections::VecDeque<String> = endpoints.into();
    let mut asked = std::collections::HashSet::new();
    let (mut answers, mut starting): (Vec<String>, Option<Channel>) = (Vec::new(), None);
    while let Some(ep) = queue.pop_front() {
        if !asked.insert(ep.clone()) {
            continue;
        }
        let ch = match channel(&ep, ca, request_timeout).await {
            Ok(ch) => ch,
            Err(e) => {
                answers.push(format!("{ep}: {e:#}"));
                continue;
            }
        };
        let check = tonic_health::pb::HealthCheckRequest {
            service: crate::api::front::VMI_SERVICE.into(),
        };
        match tonic_health::pb::health_client::HealthClient::new(ch.clone()).check(check).await {
            Ok(r) if r.get_ref().status() == ServingStatus::Serving => return Ok(ch),
            Ok(_) => {
                answers.push(format!("{ep}: not serving yet"));
                starting.get_or_insert(ch);
            }
            Err(s) => {
                if let Some(leader) = s.metadata().get(interfaces::fencing::LEADER).and_then(|v| v.to_str().ok()) {
                    queue.push_front(leader.to_string());
                }
                answers.push(format!("{ep}: {}", s.message()));
            }
        }
    }
    starting.ok_or_else(|| anyhow!("no VEEM of the site serves as its leader: {}", answers.join("; ")))
}

/// A channel to the VMI at `endpoint` (see [`connect`]).
async fn channel(endpoint: &str, ca: Option<&Path>, request_timeout: Duration) -> anyhow::Result<Channel> {
    let mut ep = Endpoint::from_shared(endpoint.to_string())
        .map_err(|e| anyhow!("invalid endpoint URL {endpoint:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(request_timeout);
    if endpoint.starts_with("https://") {
        let ca =
            ca.ok_or_else(|| anyhow!("{endpoint} is https: give the CA of the VEEM's certificate (--ca, VEEM_CA or the context's `ca`)"))?;
        let pem = std::fs::read(ca).with_context(|| format!("cannot read CA {}", ca.display()))?;
        ep = ep
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            .map_err(|e| anyhow!("TLS towards {endpoint}: {e}"))?;
    }
    ep.connect()
        .await
        .map_err(|e| anyhow!("cannot reach the VEEM at {endpoint}: {}", interfaces::error::chain(&e)))
}

/// Read a manifest file for Negotiate/Deploy.
pub fn read_manifest(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read manifest {}", path.display()))
}

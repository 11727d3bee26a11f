//! Connecting to a VEEM's VMI and authenticating every call.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use std::path::Path;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

/// A VMI client whose every call carries the bearer token.
pub type VmiServiceClient = interfaces::vmi::vmi_service_client::VmiServiceClient<InterceptedService<Channel, AuthInterceptor>>;

/// How long to wait for the TCP connection to the VEEM, at most.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Adds `authorization: Bearer TOKEN` to every request (nothing without a
/// token), and the command's request ID (`vee-request-id`: the VEEM runs
/// a change once per ID, `api::server::replies`) when it has one.
#[derive(Debug, Clone, Default)]
pub struct AuthInterceptor {
    header: Option<MetadataValue<Ascii>>,
    request_id: Option<MetadataValue<Ascii>>,
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
        Ok(Self { header, request_id: None })
    }

    /// The same, every request also naming request ID `id` (letters,
    /// digits, `._:-`; the VEEM refuses others, naming the metadata).
    pub fn with_request_id(mut self, id: &str) -> anyhow::Result<Self> {
        self.request_id = Some(id.parse().map_err(|_| anyhow!("request ID {id:?}: not allowed in gRPC metadata"))?);
        Ok(self)
    }
}

impl Interceptor for AuthInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(h) = &self.header {
            request.metadata_mut().insert("authorization", h.clone());
        }
        if let Some(id) = &self.request_id {
            request.metadata_mut().insert(crate::api::server::replies::REQUEST_ID, id.clone());
        }
        Ok(request)
    }
}

/// How long the client waits, each a duration of its own.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// Each call is given up after this long (DeadlineExceeded); a
    /// stream's messages are not (the timeout ends with its first answer).
    pub request: Duration,
    /// With several endpoints, each one's connection (TCP, TLS and HTTP/2
    /// handshakes) and health check together: an endpoint slower than
    /// this is taken for gone (a VEEM stopped by SIGSTOP, a VM paused, a
    /// swap storm: the kernel still accepts its connections). Also the
    /// HTTP/2 keep-alive: a connection whose VEEM stops answering its
    /// pings within twice this long is closed (UNAVAILABLE).
    pub probe: Duration,
}

/// Connect to the VMI at `endpoint` (e.g. `https://127.0.0.1:7200`); an
/// `https://` endpoint needs `ca`, the CA of the VEEM's certificate, which
/// must be for the endpoint's host name or address. The error names the
/// endpoint that could not be reached.
///
/// `endpoint` may name several VEEMs of one site, separated by commas (a
/// site on etcd, with a leader and standbys: docs/operator-guide.md "A site on etcd"):
/// see [`leading`].
pub async fn connect(endpoint: &str, auth: AuthInterceptor, ca: Option<&Path>, deadlines: Deadlines) -> anyhow::Result<VmiServiceClient> {
    let endpoints: Vec<String> = endpoint
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    let channel = if endpoints.len() <= 1 {
        channel(endpoint.trim(), ca, deadlines, deadlines.request).await?
    } else {
        leading(endpoints, ca, deadlines).await?
    };
    Ok(interfaces::vmi::vmi_service_client::VmiServiceClient::with_interceptor(
        channel, auth,
    ))
}

/// What one endpoint said when asked whether it serves.
enum Probe {
    /// It leads and serves.
    Serving(Channel),
    /// It leads, still starting.
    Starting(Channel),
    /// A standby: it names the leader, or says why none leads.
    Standby(Option<String>, String),
    /// No answer within the probe deadline, or no connection.
    Gone(String),
}

/// Asks `ep` whether it serves, within `deadlines.probe` for the
/// connection and the health check together.
async fn probe(ep: &str, ca: Option<&Path>, deadlines: Deadlines) -> Probe {
    use tonic_health::pb::health_check_response::ServingStatus;
    let asked = async {
        let ch = channel(ep, ca, deadlines, deadlines.probe).await.map_err(|e| format!("{e:#}"))?;
        let check = tonic_health::pb::HealthCheckRequest {
            service: crate::api::front::VMI_SERVICE.into(),
        };
        Ok::<_, String>(
            match tonic_health::pb::health_client::HealthClient::new(ch.clone()).check(check).await {
                Ok(r) if r.get_ref().status() == ServingStatus::Serving => Probe::Serving(ch),
                Ok(_) => Probe::Starting(ch),
                Err(s) => match s.metadata().get(interfaces::fencing::LEADER).and_then(|v| v.to_str().ok()) {
                    Some(leader) => Probe::Standby(Some(leader.to_string()), s.message().to_string()),
                    None if interfaces::fencing::not_acting(&s) => Probe::Standby(None, s.message().to_string()),
                    None => Probe::Gone(s.message().to_string()),
                },
            },
        )
    };
    match tokio::time::timeout(deadlines.probe, asked).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => Probe::Gone(e),
        Err(_) => Probe::Gone(format!("no answer within {:?} (the probe deadline)", deadlines.probe)),
    }
}

/// The channel to whichever of `endpoints` leads: all are asked at once
/// whether they serve (gRPC health), each within the probe deadline, and
/// the first that serves is taken; a standby's answer names the leader,
/// which is asked too. While a standby names a leader that does not
/// answer, or stands by itself (it died, froze or stepped down, and a
/// standby takes over once its lease runs out), they are asked again
/// every half second, for as long as the request deadline; a leader still
/// starting is taken when none serves. A site whose VEEMs all say its
/// store does not answer (read-only) is an error at once.
/// The error names each endpoint's answer.
async fn leading(endpoints: Vec<String>, ca: Option<&Path>, deadlines: Deadlines) -> anyhow::Result<Channel> {
    use futures::stream::{FuturesUnordered, StreamExt};
    let give_up = tokio::time::Instant::now() + deadlines.request;
    let mut known: Vec<String> = endpoints;
    loop {
        let mut asking: FuturesUnordered<_> = known
            .iter()
            .map(|ep| async move { (ep.clone(), probe(ep, ca, deadlines).await) })
            .collect();
        let (mut answers, mut starting, mut named, mut gone) = (Vec::new(), None, Vec::new(), Vec::new());
        let mut standing_by = Vec::new();
        while let Some((ep, p)) = asking.next().await {
            match p {
                Probe::Serving(ch) => return Ok(ch),
                Probe::Starting(ch) => {
                    answers.push(format!("{ep}: not serving yet"));
                    starting.get_or_insert(ch);
                }
                Probe::Standby(leader, m) => {
                    answers.push(format!("{ep}: {m}"));
                    named.extend(leader);
                    standing_by.push(ep);
                }
                Probe::Gone(m) => {
                    answers.push(format!("{ep}: {m}"));
                    gone.push(ep);
                }
            }
        }
        drop(asking);
        let same = |a: &String, b: &String| a.trim_end_matches('/') == b.trim_end_matches('/');
        let new: Vec<String> = named.iter().filter(|l| !known.iter().any(|k| same(k, l))).cloned().collect();
        if !new.is_empty() {
            // A leader the endpoints given did not name: asked as well.
            known.extend(new);
            continue;
        }
        if let Some(ch) = starting {
            return Ok(ch);
        }
        // The leader named is gone, or stands by itself (its lease not
        // yet lapsed): an election is under way.
        let takeover = named.iter().any(|l| gone.iter().chain(&standing_by).any(|g| same(g, l)));
        if !takeover || tokio::time::Instant::now() + Duration::from_millis(500) >= give_up {
            bail!("no VEEM of the site serves as its leader: {}", answers.join("; "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A channel to the VMI at `endpoint` (see [`connect`]), made within
/// `handshake` (TCP, TLS, HTTP/2).
async fn channel(endpoint: &str, ca: Option<&Path>, deadlines: Deadlines, handshake: Duration) -> anyhow::Result<Channel> {
    let mut ep = Endpoint::from_shared(endpoint.to_string())
        .map_err(|e| anyhow!("invalid endpoint URL {endpoint:?}: {e}"))?
        .connect_timeout(handshake.min(CONNECT_TIMEOUT))
        .timeout(deadlines.request)
        .http2_keep_alive_interval(deadlines.probe)
        .keep_alive_timeout(deadlines.probe)
        .keep_alive_while_idle(true);
    if endpoint.starts_with("https://") {
        let ca =
            ca.ok_or_else(|| anyhow!("{endpoint} is https: give the CA of the VEEM's certificate (--ca, VEEM_CA or the context's `ca`)"))?;
        let pem = std::fs::read(ca).with_context(|| format!("cannot read CA {}", ca.display()))?;
        ep = ep
            .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)))
            .map_err(|e| anyhow!("TLS towards {endpoint}: {e}"))?;
    }
    match tokio::time::timeout(handshake, ep.connect()).await {
        Ok(r) => r.map_err(|e| anyhow!("cannot reach the VEEM at {endpoint}: {}", interfaces::error::chain(&e))),
        Err(_) => bail!("cannot reach the VEEM at {endpoint}: no handshake within {handshake:?}"),
    }
}

/// Read a manifest file for Negotiate/Deploy.
pub fn read_manifest(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read manifest {}", path.display()))
}

//! The fuzz targets' bodies (issue 13, deliverable 8): each takes the
//! fuzzer's bytes, feeds them to the code that meets that input at a trust
//! boundary, and asserts what must hold for every input, not only that
//! nothing panics. `fuzz_targets/*.rs` are one-line libFuzzer entry points;
//! `scripts/fuzz` runs them for a bounded time, from the seeds in
//! `fuzz/seeds/<target>/`.

use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use interfaces::manifest::Manifest;
use tower::ServiceExt;
use veeh::domain_xml::{self, DomainSpec, NicXml, PathMap};

/// One runtime for the async targets, made once per fuzzing process.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap())
}

/// A directory that lives as long as the fuzzing process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vee-fuzz-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Service manifests (a provider's TOML): any text is parsed and
/// validated without panicking; a manifest that is accepted prints to TOML
/// that parses back to the same manifest (nothing the provider wrote is
/// lost or changed on the way to the database); a refused one says which
/// field or why.
pub fn manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Manifest::from_toml(text) {
        Ok(m) => {
            let printed = m.to_toml().expect("an accepted manifest prints");
            let again = Manifest::from_toml(&printed).unwrap_or_else(|e| panic!("printed manifest refused: {e}\n{printed}"));
            assert_eq!(m, again, "round trip changed the manifest:\n{printed}");
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// What a VEE spec gives the domain XML: strings from the VHI, the
/// manifest (cmdline) and the host's paths.
#[derive(Arbitrary, Debug)]
struct SpecInput {
    vee_id: String,
    service_id: String,
    owner: String,
    kvm: bool,
    vcpus: u32,
    memory_mib: u64,
    /// Added to `vcpus` and `memory_mib` for the resize maxima.
    extra_vcpus: u8,
    extra_memory_mib: u16,
    disk: Option<String>,
    kernel: Option<String>,
    initrd: Option<String>,
    cmdline: String,
    console: String,
    nics: Vec<(String, String, u32)>,
    seed: Option<String>,
    /// The rewrite for a migration: new paths, new owner, new bridges.
    to_disk: Option<String>,
    to_seed: Option<String>,
    to_console: Option<String>,
    new_owner: String,
    to_bridges: Vec<(String, String)>,
}

/// Characters XML 1.0 cannot carry at all, even escaped: libvirt refuses
/// such a document (an error, not an injection), so they are left out.
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
}

/// The domain XML path: whatever the strings of a spec hold, the generated
/// XML parses, has exactly the elements the spec asks for (one per NIC, no
/// more: no injected devices), and reads back the same owner, service and
/// (MAC, bridge) pairs; a migration's rewrite keeps all of that true with
/// the new owner and bridges.
pub fn domain_xml(data: &[u8]) {
    let Ok(s) = SpecInput::arbitrary(&mut Unstructured::new(data)) else { return };
    let texts = [&s.vee_id, &s.service_id, &s.owner, &s.cmdline, &s.console, &s.new_owner]
        .into_iter()
        .chain([&s.disk, &s.kernel, &s.initrd, &s.seed, &s.to_disk, &s.to_seed, &s.to_console].into_iter().flatten())
        .chain(s.nics.iter().flat_map(|(m, b, _)| [m, b]))
        .chain(s.to_bridges.iter().flat_map(|(m, b)| [m, b]));
    if texts.clone().any(|t| !t.chars().all(xml_char)) || texts.clone().any(|t| t.contains('\0')) {
        return;
    }
    // A VEE's MACs are distinct (the VEEM gives them); a rewrite finds an
    // interface by its MAC.
    let macs: std::collections::HashSet<&String> = s.nics.iter().map(|(m, _, _)| m).collect();
    if macs.len() != s.nics.len() {
        return;
    }
    let spec = DomainSpec {
        vee_id: s.vee_id.clone(),
        service_id: s.service_id.clone(),
        owner: s.owner.clone(),
        accel: if s.kvm { veeh::accel::Accel::Kvm } else { veeh::accel::Accel::Tcg },
        vcpus: s.vcpus,
        memory_mib: s.memory_mib,
        max_vcpus: s.vcpus.saturating_add(u32::from(s.extra_vcpus)),
        max_memory_mib: s.memory_mib.saturating_add(u64::from(s.extra_memory_mib)),
        disk: s.disk.as_ref().map(PathBuf::from),
        kernel: s.kernel.as_ref().map(PathBuf::from),
        initrd: s.initrd.as_ref().map(PathBuf::from),
        cmdline: s.cmdline.clone(),
        console: PathBuf::from(&s.console),
        seed: s.seed.as_ref().map(PathBuf::from),
        nics: s.nics.iter().map(|(mac, bridge, mtu)| NicXml { mac: mac.clone(), bridge: bridge.clone(), mtu: *mtu }).collect(),
    };
    let xml = domain_xml::generate(&spec);
    let disks = usize::from(spec.disk.is_some()) + usize::from(spec.seed.is_some());
    check_domain(&xml, &s.owner, &s.service_id, &spec.nics.iter().map(|n| (n.mac.clone(), n.bridge.clone())).collect::<Vec<_>>(), disks);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let name = doc.descendants().find(|n| n.has_tag_name("name")).and_then(|n| n.text()).unwrap_or_default();
    assert_eq!(name, domain_xml::domain_name(&s.vee_id), "the domain's name");
    let cmdline = doc.descendants().find(|n| n.has_tag_name("cmdline")).map(|n| n.text().unwrap_or_default());
    if spec.kernel.is_some() {
        assert_eq!(cmdline, Some(s.cmdline.as_str()), "the kernel command line as given");
    }

    let to = PathMap {
        disk: s.to_disk.as_ref().map(PathBuf::from),
        kernel: None,
        initrd: None,
        console: s.to_console.as_ref().map(PathBuf::from),
        seed: s.to_seed.as_ref().map(PathBuf::from),
        bridges: s.to_bridges.clone(),
    };
    let moved = match domain_xml::rewrite_for(&xml, &to, &s.new_owner) {
        Ok(moved) => moved,
        // Refused: the rewrite names an element the XML lacks (a disk
        // for a diskless VEE).
        Err(e) => {
            let lacks = |to: &Option<PathBuf>, has: &Option<PathBuf>| to.is_some() && has.is_none();
            assert!(lacks(&to.disk, &spec.disk) || lacks(&to.seed, &spec.seed), "rewrite refused: {e:#}\n{xml}");
            return;
        }
    };
    let want: Vec<(String, String)> = spec
        .nics
        .iter()
        .map(|n| {
            let new = to.bridges.iter().find(|(mac, _)| *mac == n.mac).map(|(_, b)| b.clone());
            (n.mac.clone(), new.unwrap_or_else(|| n.bridge.clone()))
        })
        .collect();
    check_domain(&moved, &s.new_owner, &s.service_id, &want, disks);
}

/// `xml` parses; its owner mark says `owner` and `service`; its bridged
/// interfaces are `nics` in order; it has `disks` disks.
fn check_domain(xml: &str, owner: &str, service: &str, nics: &[(String, String)], disks: usize) {
    let doc = roxmltree::Document::parse(xml).unwrap_or_else(|e| panic!("generated XML does not parse: {e}\n{xml}"));
    let own = domain_xml::ownership(xml).expect("the owner mark");
    assert_eq!((own.owner.as_str(), own.service_id.as_str()), (owner, service), "{xml}");
    assert_eq!(domain_xml::bridges(xml).unwrap(), nics, "{xml}");
    let count = |tag: &str| doc.descendants().filter(|n| n.has_tag_name(tag)).count();
    assert_eq!(count("interface"), nics.len(), "{xml}");
    assert_eq!(count("disk"), disks, "{xml}");
    assert_eq!(count("domain"), 1, "{xml}");
    assert_eq!(count("serial"), 1, "{xml}");
}

/// The image repository's server: one store per fuzzing process, with the
/// operator, a site and two providers.
fn repo_app() -> &'static axum::Router {
    static APP: OnceLock<axum::Router> = OnceLock::new();
    APP.get_or_init(|| {
        let dir = scratch("repo");
        let cfg = dir.join("config.toml");
        std::fs::write(
            &cfg,
            format!(
                "data = \"{}\"\ntoken = \"operator-token\"\ninsecure = true\nmax_bytes = 1000000\n\
                 [[tokens]]\nname = \"site-a\"\nrole = \"site\"\ntoken = \"site-a-token\"\n\
                 [[tokens]]\nname = \"acme\"\nrole = \"provider\"\ntoken = \"acme-token\"\n\
                 [[tokens]]\nname = \"globex\"\nrole = \"provider\"\ntoken = \"globex-token\"\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let config = image_repo::server::Config::load(Some(&cfg), Default::default()).unwrap();
        let store = image_repo::server::store::Store::open(&config.data).unwrap();
        let app = std::sync::Arc::new(image_repo::server::App::new(config, store).unwrap());
        image_repo::server::routes::router(app)
    })
}

/// One HTTP request to the repository.
#[derive(Arbitrary, Debug)]
struct RepoRequest {
    method: u8,
    /// Index into the known paths' shapes, or a free path.
    shape: u8,
    id: String,
    tail: String,
    query: String,
    token: u8,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The image repository's HTTP handlers: any request, with any token, path,
/// headers and body, is answered (no panic) and never with 500 (an
/// internal error); without a known token only the health check succeeds;
/// a blob a provider stored is never shown to the other provider.
pub fn repo_http(data: &[u8]) {
    let Ok(r) = RepoRequest::arbitrary(&mut Unstructured::new(data)) else { return };
    const METHODS: [&str; 6] = ["GET", "HEAD", "PUT", "POST", "DELETE", "PATCH"];
    const TOKENS: [Option<&str>; 5] = [None, Some("operator-token"), Some("site-a-token"), Some("acme-token"), Some("wrong-token")];
    let path = match r.shape % 8 {
        0 => "/v1/health".to_string(),
        1 => "/v1/blobs".to_string(),
        2 => format!("/v1/blobs/{}", r.id),
        3 => format!("/v1/blobs/{}/meta", r.id),
        4 => format!("/v1/blobs/{}/check", r.id),
        5 => format!("/v1/blobs/{}/pins/{}", r.id, r.tail),
        6 => format!("/v1/blobs/{}/readers/{}", r.id, r.tail),
        _ => format!("/v1/blobs/{}/{}", r.id, r.tail),
    };
    let uri = if r.query.is_empty() { path } else { format!("{path}?{}", r.query) };
    let token = TOKENS[usize::from(r.token) % TOKENS.len()];
    let mut req = http::Request::builder().method(METHODS[usize::from(r.method) % METHODS.len()]).uri(&uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in r.headers.iter().take(4) {
        if k.eq_ignore_ascii_case("authorization") {
            continue;
        }
        req = req.header(k.as_str(), v.as_str());
    }
    // A request the HTTP layer (hyper) would refuse never reaches a handler.
    let Ok(req) = req.body(axum::body::Body::from(r.body.clone())) else { return };
    let status = runtime().block_on(async { repo_app().clone().oneshot(req).await.unwrap().status() });
    assert_ne!(status, http::StatusCode::INTERNAL_SERVER_ERROR, "{uri}");
    if matches!(token, None | Some("wrong-token")) && !uri.starts_with("/v1/health") {
        assert!(!status.is_success(), "{uri} answered {status} without a known token");
    }
}

/// The VMI's unary calls, by path, that the fuzzer may make.
const VMI_CALLS: [&str; 30] = [
    "Negotiate",
    "Deploy",
    "GetService",
    "ExtendService",
    "ScaleComponent",
    "UpdateComponent",
    "GetRollout",
    "DeleteService",
    "ListServices",
    "ListVees",
    "GetVee",
    "VeeAction",
    "Migrate",
    "ListMigrations",
    "ApproveMigration",
    "RejectMigration",
    "Drain",
    "ListHosts",
    "ListUsageLimits",
    "GetUsage",
    "PrepareIncoming",
    "CompleteIncoming",
    "AbortIncoming",
    "Withdraw",
    "SendVee",
    "PushUsage",
    "UpdateNetwork",
    "ReserveSpare",
    "ConfirmSpare",
    "ReleaseSpare",
];

/// A VEEM of site A with no hosts and one peer, served in-process.
fn vmi_service_server() -> &'static interfaces::vmi::vmi_service_server::VmiServiceServer<veem::server::VmiService> {
    static VMI: OnceLock<interfaces::vmi::vmi_service_server::VmiServiceServer<veem::server::VmiService>> = OnceLock::new();
    VMI.get_or_init(|| {
        let dir = scratch("veem");
        let cfg = format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:1\"\ninsecure = true\n\
             [[tokens]]\ntoken = \"acme-token\"\nrole = \"provider\"\nname = \"acme\"\n\
             [[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n\
             [[tokens]]\ntoken = \"site-b-token\"\nrole = \"peer\"\nname = \"site-b\"\n\
             [[peers]]\nsite_id = \"site-b\"\nendpoint = \"http://127.0.0.1:1\"\ntoken = \"a-at-b-token\"\n\
             [peers.agreement]\nprice_per_vee_hour = 0.5\n",
            dir.join("db").display()
        );
        let cfg = veem::config::VeemConfig::parse(&cfg).unwrap();
        let _rt = runtime().enter();
        let veem = veem::manager::Veem::open(cfg).unwrap();
        veem::server::VmiService::new(veem).unwrap()
    })
}

/// The VMI's message decoding and handlers: any bytes as any unary call's
/// message, with any role's token or none, are answered with a status (no
/// panic), never Internal or Unknown (an error not mapped to its code),
/// and without a known token only with Unauthenticated (or tonic's answer
/// to a message that does not decode).
pub fn vmi(data: &[u8]) {
    let Some((&call, rest)) = data.split_first() else { return };
    let Some((&who, message)) = rest.split_first() else { return };
    let tokens = [None, Some("acme-token"), Some("operator-token"), Some("site-b-token"), Some("wrong-token")];
    let token = tokens[usize::from(who) % tokens.len()];
    let path = format!("/vmi.v1.VmiService/{}", VMI_CALLS[usize::from(call) % VMI_CALLS.len()]);
    // A gRPC frame: uncompressed, 4-byte big-endian length, the message.
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    let mut req = http::Request::builder()
        .method("POST")
        .uri(&path)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(frame))).unwrap();
    let (code, message) = runtime().block_on(async {
        let resp = vmi_service_server().clone().oneshot(req).await.unwrap();
        let head = resp.headers().clone();
        let trailers = resp.into_body().collect().await.ok().and_then(|b| b.trailers().cloned());
        let get = |k: &str| {
            let v = head.get(k).or_else(|| trailers.as_ref().and_then(|t| t.get(k)));
            v.and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
        };
        (tonic::Code::from_i32(get("grpc-status").parse().unwrap_or(0)), get("grpc-message"))
    });
    // tonic answers a message that does not decode with Internal.
    let undecodable = code == tonic::Code::Internal && message.starts_with("failed%20to%20decode");
    assert!(
        undecodable || !matches!(code, tonic::Code::Internal | tonic::Code::Unknown),
        "{path}: {code:?} {message}"
    );
    if matches!(token, None | Some("wrong-token")) {
        assert!(
            undecodable || code == tonic::Code::Unauthenticated,
            "{path} without a known token: {code:?} {message}"
        );
    }
}

/// The front of a VEEM of site A with no hosts (`veem::front`: REST and
/// gRPC on one port), started, with a throttle of failed authentications
/// that never holds the fuzzer up.
fn vmi_front() -> &'static axum::Router {
    static FRONT: OnceLock<axum::Router> = OnceLock::new();
    FRONT.get_or_init(|| {
        let dir = scratch("veem-front");
        let cfg = format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:1\"\ninsecure = true\n\
             [listener]\nauth_failures_burst = 4000000000\nmax_body_size = \"64 KiB\"\n\
             [[tokens]]\ntoken = \"acme-token\"\nrole = \"provider\"\nname = \"acme\"\n\
             [[tokens]]\ntoken = \"operator-token\"\nrole = \"operator\"\n",
            dir.join("db").display()
        );
        let cfg = veem::config::VeemConfig::parse(&cfg).unwrap();
        let limits = cfg.listener;
        runtime().block_on(async {
            let veem = veem::manager::Veem::open(cfg).unwrap();
            let front = veem::front::Front::of(veem, &limits).await.unwrap();
            front.started().await;
            front.router()
        })
    })
}

/// One HTTP request to the VMI's port, as a REST client (or anyone) sends.
#[derive(Arbitrary, Debug)]
struct RestRequest {
    method: u8,
    /// Index into the routes' shapes, or a free path.
    shape: u8,
    segments: Vec<String>,
    query: String,
    token: u8,
    from: u8,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Whether `METHOD PATH` of the REST routes (`veem::rest::ROUTES`, in
/// OpenAPI's syntax) has `path` (a `{param}` is any one segment, even
/// empty, as axum matches it), and whether with `method` (HEAD is GET's).
fn route_of(method: &str, path: &str) -> (bool, bool) {
    let method = if method == "HEAD" { "GET" } else { method };
    let mut path_known = false;
    for route in veem::rest::ROUTES {
        let (m, pattern) = route.split_once(' ').unwrap();
        let (want, got): (Vec<_>, Vec<_>) = (pattern.split('/').collect(), path.split('/').collect());
        let same = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(w, g)| w.starts_with('{') || w == g);
        if same {
            path_known = true;
            if m == method {
                return (true, true);
            }
        }
    }
    (path_known, false)
}

/// The VMI's REST layer behind its front (issue 36): any method, path,
/// headers, body and token is answered (no panic); a request no route has
/// is never 200 (404, or 405 for a route's path with another method) and
/// never reaches gRPC; no answer is a 5xx of the VEEM's own (500, 501: an
/// error not mapped to its code; 503 only says a dependency is out of
/// reach); an error's body is bounded (its message at most
/// `interfaces::excerpt::MESSAGE_BYTES`, JSON-escaped).
pub fn vmi_rest(data: &[u8]) {
    let Ok(r) = RestRequest::arbitrary(&mut Unstructured::new(data)) else { return };
    const METHODS: [&str; 8] = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"];
    const TOKENS: [Option<&str>; 4] = [None, Some("acme-token"), Some("operator-token"), Some("wrong-token")];
    const SHAPES: [&str; 8] = [
        "/v1/services",
        "/v1/services/{}",
        "/v1/services/{}/vees",
        "/v1/vees/{}",
        "/v1/vees/{}/{}",
        "/v1/migrations/{}/approve",
        "/v1/negotiations",
        "/v1/openapi.json",
    ];
    let mut segs = r.segments.iter().map(|s| s.replace(['/', '?', '#'], ""));
    let path = match SHAPES.get(usize::from(r.shape)) {
        Some(shape) => shape
            .split("{}")
            .enumerate()
            .map(|(i, part)| if i == 0 { part.to_string() } else { format!("{}{part}", segs.next().unwrap_or_default()) })
            .collect(),
        None => format!("/{}", r.segments.join("/")),
    };
    let uri = if r.query.is_empty() { path } else { format!("{path}?{}", r.query) };
    let Ok(uri) = uri.parse::<http::Uri>() else { return };
    let method = METHODS[usize::from(r.method) % METHODS.len()];
    let token = TOKENS[usize::from(r.token) % TOKENS.len()];
    let mut req = http::Request::builder().method(method).uri(uri.clone());
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    for (k, v) in r.headers.iter().take(4) {
        // gRPC is the `vmi` target's; the front's choice by content type
        // is what this one checks.
        if k.eq_ignore_ascii_case("authorization") || k.eq_ignore_ascii_case("content-type") && v.starts_with("application/grpc") {
            continue;
        }
        req = req.header(k.as_str(), v.as_str());
    }
    // A request the HTTP layer (hyper) would refuse never reaches a handler.
    let Ok(mut req) = req.body(axum::body::Body::from(r.body.clone())) else { return };
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from(([192, 0, 2, r.from], 40000))));
    let front = vmi_front().clone();
    let (status, grpc, body) = runtime().block_on(async {
        let resp = front.oneshot(req).await.unwrap();
        let grpc = resp.headers().contains_key("grpc-status");
        let status = resp.status();
        (status, grpc, resp.into_body().collect().await.unwrap().to_bytes())
    });
    let (path_known, route_known) = route_of(method, uri.path());
    assert!(!grpc, "{method} {uri}: answered by gRPC");
    if !route_known {
        // 404, or 405 for a route's path (where an empty segment counts
        // as a path parameter is the router's own call: either is a
        // refusal), or 413 for a body too large to read first.
        assert!(
            status == 404 || status == 405 && (path_known || uri.path().contains("//")) || status == 413,
            "{method} {uri}: {status}"
        );
    }
    assert!(status.as_u16() < 500 || status == 503, "{method} {uri}: {status} {body:?}");
    // A HEAD answer has no body, by HTTP's rules.
    if status.as_u16() >= 400 && method != "HEAD" {
        assert!(body.len() <= 6 * interfaces::excerpt::MESSAGE_BYTES + 200, "{method} {uri}: {} bytes", body.len());
        let e: serde_json::Value = serde_json::from_slice(&body).unwrap_or_else(|_| panic!("{method} {uri}: not JSON: {body:?}"));
        assert_eq!(e["error"]["code"], status.as_u16(), "{method} {uri}: {e}");
    }
}

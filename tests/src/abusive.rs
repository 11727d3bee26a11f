//! Clients of a TLS listener that misbehave as an attacker's tools do
//! (issue 36): many connections from chosen loopback addresses that finish
//! their TLS handshake and then say nothing, or trickle a request head, or
//! hold most of one unfinished; and the memory the server holds meanwhile.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// A TLS client trusting the CA in PEM file `ca`, offering `alpn`
/// (`http/1.1`, `h2`).
pub fn connector(ca: &Path, alpn: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.as_bytes().to_vec()];
    TlsConnector::from(Arc::new(cfg))
}

/// A TCP connection to `to` from address `from` (any local address: all of
/// 127.0.0.0/8 is this machine's, so each is another client to the
/// server).
pub async fn tcp_from(from: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let sock = if from.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.bind(SocketAddr::new(from, 0))?;
    sock.connect(to).await
}

/// A TLS connection to `to` from `from`, its handshake done (the server's
/// certificate checked for `name`). Errors: the connection or handshake
/// failed or took over 20 s.
pub async fn tls_from(tls: &TlsConnector, from: IpAddr, to: SocketAddr, name: &str) -> std::io::Result<TlsStream<TcpStream>> {
    let name = ServerName::try_from(name.to_string()).map_err(std::io::Error::other)?;
    let handshake = async { tls.connect(name, tcp_from(from, to).await?).await };
    tokio::time::timeout(Duration::from_secs(20), handshake)
        .await
        .map_err(|_| std::io::Error::other("handshake timed out"))?
}

/// Whether the server has closed `s` (EOF, reset or a TLS alert), waiting
/// up to `within`; bytes it sends meanwhile are read and dropped.
pub async fn closed_within<S: tokio::io::AsyncRead + Unpin>(s: &mut S, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// Writes `bytes` one at a time, `every` apart, until done or the server
/// closes. Returns how many it wrote.
pub async fn trickle<S: tokio::io::AsyncWrite + Unpin>(s: &mut S, bytes: &[u8], every: Duration) -> usize {
    for (i, b) in bytes.iter().enumerate() {
        if s.write_all(&[*b]).await.is_err() || s.flush().await.is_err() {
            return i;
        }
        tokio::time::sleep(every).await;
    }
    bytes.len()
}

/// The resident memory of process `pid` in KiB (`VmRSS`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The number of file descriptors process `pid` has open.
pub fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// `127.0.0.N`.
pub fn loopback(n: u8) -> IpAddr {
    IpAddr::from([127, 0, 0, n])
}

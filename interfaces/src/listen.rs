//! How the daemons bind their listening port: a port another process holds
//! is refused at start-up with the holder named (from `ss -ltnp`, iproute2),
//! so that a daemon never runs without its port and an operator sees whom
//! to stop; and the accept loop that outlives a failed accept (`accept`).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

/// Binds `addr`. Errors: the address is in use (naming the process that
/// listens there when `ss` can tell), or cannot be bound for another reason.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    match TcpListener::bind(addr).await {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let by = holder(addr.port()).map(|h| format!(" by {h}")).unwrap_or_default();
            anyhow::bail!("listen address {addr} is in use{by}: stop it or choose another port")
        }
        Err(e) => Err(e).with_context(|| format!("cannot listen on {addr}")),
    }
}

/// The next connection `listener` accepts, with `TCP_NODELAY` set; an
/// accept error (such as running out of file descriptors) is logged and
/// retried after 100 ms. Cancel-safe: a connection is only taken when it
/// is returned.
///
/// Without `TCP_NODELAY`, the last small segment of each response waits
/// for the client's delayed ACK (Nagle's algorithm): a checkpoint's 3,000
/// chunks pulled 8 at a time went at 100 MiB/s with both cores mostly
/// idle.
pub async fn accept(listener: &TcpListener) -> tokio::net::TcpStream {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) => {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "TCP_NODELAY not set");
                }
                return tcp;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
}

/// The connections `listener` accepts, as a stream ([`accept`]: with
/// `TCP_NODELAY`, accept errors logged and retried), for a server that
/// takes its connections from one (tonic's `serve_with_incoming`).
pub fn incoming(listener: TcpListener) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures::stream::unfold(listener, |l| async move {
        let tcp = accept(&l).await;
        Some((Ok(tcp), l))
    })
}

/// The process listening on TCP `port` as `ss` shows it, e.g.
/// `veeh (pid 1234)`.
fn holder(port: u16) -> Option<String> {
    let out = std::process::Command::new("ss")
        .args(["-Hltnp", &format!("sport = :{port}")])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // users:(("veeh",pid=1234,fd=9))
    let users = text.lines().find_map(|l| l.split("users:((").nth(1))?;
    let mut parts = users.split(',');
    let name = parts.next()?.trim_matches('"');
    let pid = parts.find_map(|p| p.strip_prefix("pid="))?;
    Some(format!("{name} (pid {pid})"))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_port_in_use_is_refused_naming_its_holder() {
        let held = super::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = held.local_addr().unwrap();
        let e = super::bind(addr).await.unwrap_err().to_string();
        assert!(e.contains(&format!("{addr} is in use")), "{e}");
        assert!(e.contains(&format!("(pid {})", std::process::id())), "{e}");
    }

    #[tokio::test]
    async fn an_accepted_connection_sends_without_waiting_for_acks() {
        let listener = super::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (accepted, _client) = tokio::join!(super::accept(&listener), client);
        assert!(accepted.nodelay().unwrap(), "TCP_NODELAY is not set");
        // The same through the stream a gRPC server takes.
        let addr = listener.local_addr().unwrap();
        let mut incoming = std::pin::pin!(super::incoming(listener));
        let (accepted, _client) = tokio::join!(futures::StreamExt::next(&mut incoming), tokio::net::TcpStream::connect(addr));
        assert!(
            accepted.unwrap().unwrap().nodelay().unwrap(),
            "TCP_NODELAY is not set on the stream's"
        );
    }
}

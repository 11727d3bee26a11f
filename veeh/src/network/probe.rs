//! Whether a VEE answers on a port it declares (VHI Probe): a TCP
//! connection from this host to the VEE's address on the network whose
//! external side forwards the port. The host reaches that address over
//! the network's bridge, which holds the gateway address (the isolation
//! table lets this host's own connections in and their answers back). Used
//! by the VEEM to know that a replaced instance serves before the next is
//! replaced (a rolling update).

use std::time::Duration;

use interfaces::vhi::{Nic, ProbeResponse};

use crate::error::HostError;

/// The longest probe, seconds.
pub const MAX_TIMEOUT_S: u64 = 10;
/// A probe's timeout when the request gives none, seconds.
pub const DEFAULT_TIMEOUT_S: u64 = 2;

/// `ADDRESS:PORT` of the NIC of `nics` that declares `port`. Errors
/// (InvalidArgument): no NIC declares it, naming the ports that are.
pub fn target(nics: &[Nic], port: u32) -> Result<String, HostError> {
    let nic = nics.iter().find(|n| n.ports.contains(&port)).ok_or_else(|| {
        let declared: Vec<String> = nics.iter().flat_map(|n| n.ports.iter().map(u32::to_string)).collect();
        HostError::field(
            "port",
            format!(
                "{port} is not a port this VEE declares (declared: {})",
                if declared.is_empty() {
                    "none".to_string()
                } else {
                    declared.join(", ")
                }
            ),
        )
    })?;
    let address = nic.address.split('/').next().unwrap_or_default();
    Ok(format!("{address}:{port}"))
}

/// Opens (and closes) a TCP connection to `target` within `timeout`.
pub async fn probe(target: String, timeout: Duration) -> ProbeResponse {
    let detail = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target)).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {} ms", timeout.as_millis())),
    };
    ProbeResponse {
        answered: detail.is_none(),
        target,
        detail: detail.unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nic(address: &str, ports: &[u32]) -> Nic {
        Nic {
            address: address.into(),
            ports: ports.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_declared_port_is_probed_at_its_nic_address() {
        let nics = [nic("10.240.3.5/24", &[]), nic("10.240.4.7/24", &[80, 7000])];
        assert_eq!(target(&nics, 7000).unwrap(), "10.240.4.7:7000");
        let e = target(&nics, 22).unwrap_err().to_string();
        assert!(
            e.contains("port") && e.contains("22 is not a port") && e.contains("80, 7000"),
            "{e}"
        );
        let e = target(&nics[..1], 80).unwrap_err().to_string();
        assert!(e.contains("declared: none"), "{e}");
    }

    #[tokio::test]
    async fn a_listening_port_answers_and_a_closed_one_does_not() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let r = probe(format!("127.0.0.1:{port}"), Duration::from_secs(2)).await;
        assert!(r.answered && r.detail.is_empty(), "{r:?}");
        drop(l);
        let r = probe(format!("127.0.0.1:{port}"), Duration::from_secs(2)).await;
        assert!(!r.answered && !r.detail.is_empty(), "{r:?}");
    }
}

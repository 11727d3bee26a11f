//! The kernel's networking as the network tests see it: shell commands,
//! the isolation table's drop counters, IPv4 forwarding for a test, HTTP
//! from the host.

use std::process::Command;

/// `sh -c CMD`: (success, stdout + stderr).
pub fn sh(cmd: &str) -> (bool, String) {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The packets the counted drop rules of the isolation table's `chain`
/// (`input` or `forward`) have dropped so far, together.
pub fn dropped(chain: &str) -> u64 {
    let (_, text) = sh(&format!("nft list chain inet vee_isolation {chain}"));
    text.split("counter packets ")
        .skip(1)
        .filter_map(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Sets `net.ipv4.ip_forward` for the test (the host routes, as it must for
/// external access) and puts the old value back.
pub struct Forwarding(String);

impl Forwarding {
    pub fn on() -> Forwarding {
        let old = std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap();
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").unwrap();
        Forwarding(old.trim().to_string())
    }
}

impl Drop for Forwarding {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", &self.0);
    }
}

/// `GET url` from this host (10 s at most): the body of a 2xx answer, or
/// `None`.
pub async fn http_get(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .ok()?;
    let r = client.get(url).send().await.ok()?.error_for_status().ok()?;
    r.text().await.ok()
}

/// Polls `GET url` every 250 ms until it answers (at most `timeout`): the
/// body and how long it took, or `None`.
pub async fn wait_http(url: &str, timeout: std::time::Duration) -> Option<(String, std::time::Duration)> {
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if let Some(body) = http_get(url).await {
            return Some((body, start.elapsed()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    None
}

//! The kernel's networking as the network tests see it: shell commands,
//! the isolation table's drop counters, IPv4 forwarding for a test, HTTP
//! from the host, the lab's outside and a TCP client there.

use std::process::Command;
use std::time::Instant;

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
    let client = interfaces::tls::http_client()
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

/// The lab's outside (scripts/setup-host): a namespace with a client at
/// 10.79.0.2 to which the sites' external pools (10.80.0.0/16) are routed.
pub const OUTSIDE: &str = "vee-outside";

/// `CMD` run in the outside namespace: (success, output).
pub fn outside(cmd: &str) -> (bool, String) {
    sh(&format!("ip netns exec {OUTSIDE} {cmd}"))
}

/// A TCP client in the outside namespace reading `tick N` lines from
/// `addr:port`: each line with the instant it arrived.
pub struct TickClient {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<(Instant, String)>>>,
}

impl TickClient {
    pub fn connect(addr: &str, port: u16) -> TickClient {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut child = Command::new("ip")
            .args(["netns", "exec", OUTSIDE, "busybox", "nc", addr, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push((Instant::now(), l));
            }
        });
        TickClient { child, lines }
    }

    pub fn count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits (at most `timeout`) until `n` lines have come.
    pub async fn wait_count(&self, n: usize, timeout: std::time::Duration) {
        let start = Instant::now();
        while self.count() < n && start.elapsed() < timeout {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The tick numbers received, and the largest gap between two lines.
    pub fn ticks_and_gap(&self) -> (Vec<u64>, std::time::Duration) {
        let lines = self.lines.lock().unwrap();
        let ticks = lines
            .iter()
            .filter_map(|(_, l)| l.strip_prefix("tick ")?.trim().parse().ok())
            .collect();
        let gap = lines.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or_default();
        (ticks, gap)
    }
}

impl Drop for TickClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET url` from the outside namespace every 300 ms in the background
/// (`curl -m 2`, a new TCP connection each): each try with its instant
/// and whether it got a 2xx answer.
pub struct HttpPoller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tries: std::sync::Arc<std::sync::Mutex<Vec<(Instant, bool)>>>,
}

impl HttpPoller {
    pub fn start(url: &str) -> HttpPoller {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tries = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, t, url) = (stop.clone(), tries.clone(), url.to_string());
        std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                let (ok, _) = outside(&format!("curl -sf -o /dev/null -m 2 {url}"));
                t.lock().unwrap().push((Instant::now(), ok));
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        });
        HttpPoller { stop, tries }
    }

    /// (tries, failed tries, the longest run of failures).
    pub fn summary(&self) -> (usize, usize, std::time::Duration) {
        let tries = self.tries.lock().unwrap();
        let failed = tries.iter().filter(|(_, ok)| !ok).count();
        let (mut longest, mut since) = (std::time::Duration::ZERO, None);
        for (at, ok) in tries.iter() {
            match (ok, since) {
                (false, None) => since = Some(*at),
                (true, Some(s)) => {
                    longest = longest.max(*at - s);
                    since = None;
                }
                _ => {}
            }
        }
        if let (Some(s), Some((last, _))) = (since, tries.last()) {
            longest = longest.max(*last - s);
        }
        (tries.len(), failed, longest)
    }

    /// Whether the last try got an answer.
    pub fn last_ok(&self) -> bool {
        self.tries.lock().unwrap().last().is_some_and(|(_, ok)| *ok)
    }
}

impl Drop for HttpPoller {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

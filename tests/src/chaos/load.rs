//! The load of a chaos round: `veem` commands as a provider and an
//! operator send them, given both VEEMs' endpoints, and the prober's
//! `veem ls` every quarter second.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::MAX_VEES;
use crate::site::{self, ACME, OPERATOR};

/// The load's parameters for a round.
pub(super) struct Plan {
    pub(super) hosts: Vec<String>,
    pub(super) manifest: PathBuf,
    pub(super) seed: u64,
}

/// `veem ARGS` at site A (see [`Lab::cli`]), in a blocking task.
pub(super) async fn cli(endpoints: String, dir: PathBuf, token: &str, args: Vec<String>) -> (bool, String) {
    cli_of("site-a", endpoints, dir, token, args).await
}

/// [`cli`] at site `site_id`.
pub(super) async fn cli_of(site_id: &'static str, endpoints: String, dir: PathBuf, token: &str, args: Vec<String>) -> (bool, String) {
    let token = token.to_string();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = site::cli_of(site_id, &endpoints, &dir, &token, &args);
        (
            out.status.success(),
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        )
    })
    .await
    .unwrap()
}

/// One `veem ls` of the prober: when it was asked, when it ended, and
/// its error's first line if it failed.
#[derive(Clone, Debug)]
pub(super) struct Probe {
    pub(super) asked: Instant,
    pub(super) ended: Instant,
    pub(super) error: Option<String>,
}

/// `veem ls` every quarter second until `stop`, each into `probes`, on
/// a thread of its own: what the test's tasks block (a daemon restarted,
/// an etcd member started) does not hold it up.
pub(super) fn probe(endpoints: String, dir: PathBuf, stop: Arc<AtomicBool>, probes: Arc<Mutex<Vec<Probe>>>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            let asked = Instant::now();
            let out = site::cli_at(&endpoints, &dir, OPERATOR, &["ls", "-q"]);
            let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            probes.lock().unwrap().push(Probe {
                asked,
                ended: Instant::now(),
                error: (!out.status.success()).then(|| first_line(&said)),
            });
            std::thread::sleep(Duration::from_millis(250));
        }
    })
}

/// The longest gap between two answered probes (from `from` to `to`,
/// the round's start and end), and what the probes asked within it saw:
/// how long each took and why it failed.
pub(super) fn longest_gap(probes: &[Probe], from: Instant, to: Instant) -> (Duration, Vec<String>) {
    let mut answered: Vec<Instant> = vec![from];
    answered.extend(probes.iter().filter(|p| p.error.is_none()).map(|p| p.ended));
    answered.push(to);
    let Some((a, b)) = answered.windows(2).map(|w| (w[0], w[1])).max_by_key(|(a, b)| *b - *a) else {
        return (Duration::ZERO, vec![]);
    };
    let seen = probes
        .iter()
        .filter(|p| p.ended > a && p.asked < b)
        .map(|p| {
            format!(
                "{:.1} s: {}",
                (p.ended - p.asked).as_secs_f64(),
                p.error.as_deref().unwrap_or("answered")
            )
        })
        .collect();
    (b - a, seen)
}

/// What the load of a round did.
#[derive(Default)]
pub(super) struct Done {
    /// How many commands answered.
    pub(super) ok: usize,
    /// The first line of each failure.
    pub(super) failed: Vec<String>,
    /// The VEEs it proposed to migrate.
    pub(super) migrated: HashSet<String>,
}

/// Commands as a provider and an operator send them, one a second until
/// `stop`: checkpoints, migrations (proposed, then approved), scaling
/// `shop` between 2 and 3, deploying and undeploying `extra`.
pub(super) async fn load(plan: Plan, endpoints: String, dir: PathBuf, stop: Arc<AtomicBool>) -> Done {
    let mut rng = fastrand::Rng::with_seed(plan.seed);
    // The `extra` services this load deployed, oldest first.
    let mut extras: Vec<String> = Vec::new();
    let mut done = Done::default();
    let run = |token: &'static str, args: Vec<String>| cli(endpoints.clone(), dir.clone(), token, args);
    while !stop.load(Ordering::SeqCst) {
        let (_, listed) = run(OPERATOR, vec!["ls".into(), "-o".into(), "json".into()]).await;
        let vees: Vec<(String, String)> = serde_json::from_str::<serde_json::Value>(&listed)
            .ok()
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|v| v["state"] == "running")
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                (s("vee_id"), s("location"))
            })
            .collect();
        let args: Vec<String> = match (rng.u8(0..4), vees.get(rng.usize(0..vees.len().max(1)))) {
            (0, Some((vee, ..))) => vec!["checkpoint".into(), vee.clone()],
            (1, Some((vee, location))) => {
                let to = plan
                    .hosts
                    .iter()
                    .find(|h| !location.contains(h.as_str()))
                    .cloned()
                    .unwrap_or_default();
                done.migrated.insert(vee.clone());
                let (proposed, said) = run(
                    OPERATOR,
                    vec!["migrate".into(), vee.clone(), "--to-host".into(), to, "-o".into(), "json".into()],
                )
                .await;
                let id = serde_json::from_str::<serde_json::Value>(&said)
                    .ok()
                    .and_then(|m| m["migration_id"].as_str().map(String::from));
                match (proposed, id) {
                    (true, Some(id)) => vec!["approve".into(), id],
                    _ => {
                        done.failed.push(first_line(&said));
                        continue;
                    }
                }
            }
            (2, _) => {
                let n = if vees.len() < MAX_VEES { "3" } else { "2" };
                vec!["scale".into(), "shop".into(), "web".into(), n.into()]
            }
            _ if vees.len() < MAX_VEES => vec!["deploy".into(), plan.manifest.display().to_string(), "-q".into()],
            _ if !extras.is_empty() => vec!["undeploy".into(), extras.remove(0)],
            _ => continue,
        };
        let token = if args[0] == "approve" { OPERATOR } else { ACME };
        let deploy = args[0] == "deploy";
        match run(token, args).await {
            (true, said) => {
                done.ok += 1;
                if deploy {
                    extras.extend(said.lines().next().map(str::to_string));
                }
            }
            (false, said) => done.failed.push(first_line(&said)),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    done
}

pub(super) fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or(s.lines().next().unwrap_or(""))
        .chars()
        .take(200)
        .collect()
}

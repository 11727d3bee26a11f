//! The control plane under chaos (`scripts/chaos`, `tests/tests/chaos.rs`):
//! site A on a 3-member etcd cluster with two VEEMs (leader and standby,
//! a 3 s lease) and three VEEHs on the lab's two libvirtds, and site B (one
//! VEEM, one VEEH in B's namespaces) peering with both of A's VEEMs, under
//! a load of clients, each the `veem` CLI given both of A's endpoints as a
//! user gives them (checkpoints, migrations approved by the operator,
//! scale-outs and -ins, deploys and undeploys), B's operator moving B's
//! VEE to site A and home again (a peer's migrations in and out,
//! [`peer`]), and a prober asking `veem ls` every quarter second. Each
//! round, one fault drawn at random: kill -9 or SIGSTOP (past the lease,
//! then SIGCONT) of the leading VEEM, a partition of the leading VEEM from
//! etcd (past the lease: each VEEM reaches the members by ports of its
//! own, which an nftables table cuts off, [`vee_testkit::partition`]),
//! kill -9 of the standby, of one etcd member, of one VEEH, each brought
//! back after it. Once the load stops, the round checks what a user and an
//! operator count on ([`checks`]):
//! - one VEEM leads;
//! - no VEE stuck: none checkpointing, migrating, deploying or recovering,
//!   no migration approved or running, at either site, for a minute or
//!   more within [`SETTLE`] of the fault;
//! - none doubled: each VEE's domain runs on one host at most, of either
//!   site;
//! - none lost: each VEE recorded running on a host has its domain there,
//!   and B's VEE runs where B says (its host, or one of A's);
//! - usage records continuous: each VEE that ran on one host through the
//!   round (not moved in it or the round before) has usage records that
//!   cover the round without a gap, up to the last metering rounds.
//!
//! The client-visible unavailability of a round is the longest gap
//! between two `veem ls` that answered, from the round's start to the
//! load's stop.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::daemons::{GuestIds, ImageRepo, Veeh};
use crate::ha::{config, list, spawn};
use crate::site::{self, manifest, Veem, ACME};
use crate::{guest, lab};
use load::{cli, load, longest_gap, probe, Plan};
use peer::SiteB;
use vee_testkit::partition::Partition;

/// The leader's lease.
pub const TTL: Duration = Duration::from_secs(3);
/// How long after a fault's end every VEE and migration must be at rest.
pub const SETTLE: Duration = Duration::from_secs(120);
/// How far behind now usage records may end: the last metering rounds
/// (the lab's `usage_interval` is 3 s).
const METERED: Duration = Duration::from_secs(10);
/// At most this many VEEs, so that TCG guests stay few on two cores.
const MAX_VEES: usize = 4;

/// One fault of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    KillLeader,
    StopLeader,
    PartitionLeader,
    KillStandby,
    KillEtcdMember,
    KillVeeh,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::KillLeader,
        Fault::StopLeader,
        Fault::PartitionLeader,
        Fault::KillStandby,
        Fault::KillEtcdMember,
        Fault::KillVeeh,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill -9 leader",
            Fault::StopLeader => "SIGSTOP leader",
            Fault::PartitionLeader => "leader cut off from etcd",
            Fault::KillStandby => "kill -9 standby",
            Fault::KillEtcdMember => "kill -9 etcd member",
            Fault::KillVeeh => "kill -9 VEEH",
        }
    }
}

/// What one round saw.
#[derive(Debug)]
pub struct Round {
    pub fault: Fault,
    /// The longest gap between two answered `veem ls`.
    pub unavailable: Duration,
    /// The probes asked within that gap: how long each took, and why it
    /// failed.
    pub in_gap: Vec<String>,
    /// VEEMs leading once it settled (1 expected).
    pub leaders: usize,
    pub lost: Vec<String>,
    pub doubled: Vec<String>,
    pub stuck: Vec<String>,
    /// Gaps in the usage records of VEEs that ran through the round.
    pub unmetered: Vec<String>,
    /// How many VEEs' usage records were checked for gaps.
    pub metered: usize,
    /// The load's commands that answered, and those that failed (each
    /// failure's first line).
    pub ok: usize,
    pub failed: Vec<String>,
    /// Whether a new leader opened from its standby's copy (a takeover
    /// happened in the round).
    pub from_copy: Option<bool>,
    /// What the fault hit: the VEEM's log, the etcd member, the host.
    pub target: Option<String>,
}

impl Round {
    pub fn violations(&self) -> usize {
        self.lost.len() + self.doubled.len() + self.stuck.len() + self.unmetered.len() + usize::from(self.leaders != 1)
    }

    /// The failed commands no VEEM answered (the CLI gave up on the
    /// site), as opposed to those a VEEM refused (no room, a name that
    /// names several services).
    pub fn unanswered(&self) -> usize {
        self.failed.iter().filter(|f| unanswered(f)).count()
    }
}

/// Whether a failed command's error says no VEEM answered it.
fn unanswered(error: &str) -> bool {
    [
        "went away mid-call",
        "Unavailable",
        "no VEEM of the site serves",
        "DeadlineExceeded",
        "cannot reach",
    ]
    .iter()
    .any(|w| error.contains(w))
}

/// The rounds of a run.
#[derive(Debug, Default)]
pub struct Report {
    pub rounds: Vec<Round>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Report {
    /// Lost, doubled and stuck VEEs and rounds without one leader.
    pub fn violations(&self) -> usize {
        self.rounds.iter().map(Round::violations).sum()
    }

    /// A Markdown table: per fault, rounds, unavailability p50/p99,
    /// commands answered and failed, violations (VEEs lost, doubled,
    /// stuck; gaps in usage records; rounds without one leader); then all
    /// rounds.
    pub fn table(&self) -> String {
        let mut t = String::from(
            "| fault | rounds | unavailable p50 | unavailable p99 | commands answered | refused | unanswered | lost | doubled | stuck | usage gaps | not one leader |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut kinds: Vec<Option<Fault>> = Fault::ALL.iter().copied().map(Some).collect();
        kinds.push(None);
        for kind in kinds {
            let rs: Vec<&Round> = self.rounds.iter().filter(|r| kind.is_none_or(|k| r.fault == k)).collect();
            if rs.is_empty() {
                continue;
            }
            let mut gaps: Vec<Duration> = rs.iter().map(|r| r.unavailable).collect();
            gaps.sort();
            let sum = |f: &dyn Fn(&Round) -> usize| rs.iter().map(|r| f(r)).sum::<usize>();
            t += &format!(
                "| {} | {} | {:.1} s | {:.1} s | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                kind.map_or("all", Fault::name),
                rs.len(),
                percentile(&gaps, 0.5).as_secs_f64(),
                percentile(&gaps, 0.99).as_secs_f64(),
                sum(&|r| r.ok),
                sum(&|r| r.failed.len() - r.unanswered()),
                sum(&|r| r.unanswered()),
                sum(&|r| r.lost.len()),
                sum(&|r| r.doubled.len()),
                sum(&|r| r.stuck.len()),
                sum(&|r| r.unmetered.len()),
                sum(&|r| usize::from(r.leaders != 1)),
            );
        }
        let copies: Vec<bool> = self.rounds.iter().filter_map(|r| r.from_copy).collect();
        t += &format!(
            "\nTakeovers opened from the standby's copy: {} of {}.\n",
            copies.iter().filter(|c| **c).count(),
            copies.len()
        );
        t
    }
}

/// The lab of a run (see the module doc).
pub struct Lab {
    dir: PathBuf,
    cluster: vee_testkit::etcd::EtcdCluster,
    _repo: ImageRepo,
    ids: GuestIds,
    hosts: Vec<Veeh>,
    /// Each VEEM with its configuration and port.
    veems: Vec<(Veem, PathBuf, u16)>,
    /// The peer site moving its VEE in and out.
    b: SiteB,
    /// The VEEs the last round's load moved.
    moved: HashSet<String>,
    started: usize,
    rng: fastrand::Rng,
}

impl Lab {
    /// Starts the cluster, the repository, three VEEHs and two VEEMs, and
    /// deploys acme's `shop` of two instances. `seed`: the faults' and
    /// the load's draws.
    pub async fn start(seed: u64) -> Self {
        let dir = lab::test_dir("chaos");
        let cluster = tokio::task::block_in_place(|| vee_testkit::etcd::EtcdCluster::start(&dir, 3)).unwrap();
        let repo = ImageRepo::start(&dir).await;
        let ids = repo.push_guest(&guest::image()).await;
        let mut hosts = Vec::new();
        for (name, uri) in [("c1", lab::SITE_A_URI), ("c2", lab::SITE_A2_URI), ("c3", lab::SITE_A_URI)] {
            hosts.push(Veeh::start_sized(&dir, name, "site-a", uri, &repo, (4, 2048)).await);
        }
        let refs: Vec<&Veeh> = hosts.iter().collect();
        // Site B peers with both of A's VEEMs.
        let (ports, pb) = ([site::port(), site::port()], site::port());
        let (to_b, mut to_a) = site::peer_links(ports[0], pb, false);
        to_a.endpoint = ports.map(|p| site::endpoint("site-a", p)).join(",");
        let mut veems = Vec::new();
        for (way, (name, port)) in ["chaos-veem-1", "chaos-veem-2"].into_iter().zip(ports).enumerate() {
            // Each VEEM reaches etcd by a way of its own, to be cut off alone.
            let store = cluster.store_toml_leased_via("/vee/site-a", TTL, way);
            let cfg = config(&dir, name, port, &repo, &refs, std::slice::from_ref(&to_b), &store);
            veems.push((spawn(&dir, name, port, &cfg), cfg, port));
        }
        let start = Instant::now();
        while futures::future::join_all(veems.iter().map(|(v, ..)| list(v)))
            .await
            .iter()
            .all(Result::is_err)
        {
            assert!(start.elapsed() < Duration::from_secs(60), "no VEEM leads");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let b = SiteB::start(&dir, &repo, &ids, pb, to_a).await;
        let lab = Lab {
            dir,
            cluster,
            _repo: repo,
            ids,
            hosts,
            veems,
            b,
            moved: HashSet::new(),
            started: 0,
            rng: fastrand::Rng::with_seed(seed),
        };
        let file = lab.dir.join("shop.toml");
        std::fs::write(&file, manifest("shop", "acme", &lab.ids, 2, "checkpoint_interval = \"20s\"\n")).unwrap();
        let out = lab
            .cli(ACME, &["deploy", file.to_str().unwrap(), "--wait", "--timeout", "180s"])
            .await;
        assert!(out.0, "deploy: {}", out.1);
        lab
    }

    fn endpoints(&self) -> String {
        self.veems.iter().map(|(v, ..)| v.endpoint.clone()).collect::<Vec<_>>().join(",")
    }

    /// `veem ARGS` as `token`, given both endpoints: whether it
    /// succeeded, and its output (stdout, then stderr).
    async fn cli(&self, token: &str, args: &[&str]) -> (bool, String) {
        cli(
            self.endpoints(),
            self.dir.clone(),
            token,
            args.iter().map(|a| a.to_string()).collect(),
        )
        .await
    }

    /// The index of the VEEM that leads now, if one does.
    async fn leader(&self) -> Option<usize> {
        for (i, (v, ..)) in self.veems.iter().enumerate() {
            if list(v).await.is_ok() {
                return Some(i);
            }
        }
        None
    }

    /// How many VEEMs answer as leaders.
    async fn leaders(&self) -> usize {
        let mut n = 0;
        for (v, ..) in &self.veems {
            n += usize::from(list(v).await.is_ok());
        }
        n
    }

    /// Kills VEEM `i` and starts it again (a standby then).
    fn restart_veem(&mut self, i: usize) {
        self.started += 1;
        let (v, cfg, port) = &mut self.veems[i];
        v.daemon.kill();
        let name = format!("chaos-veem-{}-{}", i + 1, self.started);
        *v = spawn(&self.dir, &name, *port, cfg);
    }

    /// Applies `fault` and brings back what it took; the index of the
    /// leader before it, and what the fault hit.
    async fn inject(&mut self, fault: Fault) -> (Option<usize>, Option<String>) {
        let leader = self.leader().await;
        let standby = leader.map(|l| 1 - l);
        let target = match fault {
            Fault::KillLeader | Fault::StopLeader | Fault::PartitionLeader => leader.map(|l| self.veems[l].0.daemon.name.clone()),
            Fault::KillStandby => standby.map(|s| self.veems[s].0.daemon.name.clone()),
            Fault::KillEtcdMember | Fault::KillVeeh => None,
        };
        let mut hit = None;
        match fault {
            Fault::KillLeader => {
                if let Some(l) = leader {
                    self.veems[l].0.daemon.kill();
                    tokio::time::sleep(TTL + Duration::from_secs(2)).await;
                    self.restart_veem(l);
                }
            }
            Fault::StopLeader => {
                if let Some(pid) = leader.and_then(|l| self.veems[l].0.daemon.pid()) {
                    signal("-STOP", pid);
                    tokio::time::sleep(TTL + Duration::from_secs(3)).await;
                    signal("-CONT", pid);
                }
            }
            Fault::PartitionLeader => {
                if let Some(l) = leader {
                    // VEEM l reaches the members by way l.
                    let cut = Partition::cut("vee_chaos", &self.cluster.client_ports(l)).unwrap();
                    tokio::time::sleep(TTL + Duration::from_secs(4)).await;
                    drop(cut);
                }
            }
            Fault::KillStandby => {
                if let Some(s) = standby {
                    self.veems[s].0.daemon.kill();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    self.restart_veem(s);
                }
            }
            Fault::KillEtcdMember => {
                let i = self.rng.usize(0..3);
                hit = Some(format!("etcd member m{i}"));
                self.cluster.kill_member(i);
                tokio::time::sleep(Duration::from_secs(3)).await;
                tokio::task::block_in_place(|| self.cluster.start_member(i)).unwrap();
            }
            Fault::KillVeeh => {
                let i = self.rng.usize(0..self.hosts.len());
                hit = Some(self.hosts[i].host.clone());
                self.hosts[i].daemon.kill();
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.hosts[i].restart().await;
            }
        }
        (leader, target.or(hit))
    }

    /// One round of `fault` under load (see the module doc).
    pub async fn round(&mut self, fault: Fault) -> Round {
        let stop = Arc::new(AtomicBool::new(false));
        let from = Instant::now();
        let probes = Arc::new(Mutex::new(Vec::new()));
        let prober = probe(self.endpoints(), self.dir.clone(), stop.clone(), probes.clone());
        let load = tokio::spawn(load(self.load_plan(), self.endpoints(), self.dir.clone(), stop.clone()));
        let moves = self.b.moves(self.dir.clone(), stop.clone());
        let began = (self.vees().await.unwrap_or_default(), chrono::Utc::now().timestamp());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (before, target) = self.inject(fault).await;
        let injected = Instant::now();
        // The load and the prober go on until a leader answers again.
        while self.leader().await.is_none() && injected.elapsed() < SETTLE {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::SeqCst);
        let stopped = Instant::now();
        let mut done = load.await.unwrap();
        let peer = moves.await.unwrap();
        done.ok += peer.ok;
        done.failed.extend(peer.failed);
        done.migrated.extend(peer.migrated);
        prober.join().unwrap();
        let (unavailable, in_gap) = longest_gap(&probes.lock().unwrap(), from, stopped);
        let mut round = Round {
            fault,
            unavailable,
            in_gap,
            leaders: 0,
            lost: vec![],
            doubled: vec![],
            stuck: vec![],
            unmetered: vec![],
            metered: 0,
            ok: done.ok,
            failed: done.failed,
            from_copy: None,
            target,
        };
        self.check(&mut round, injected).await;
        // A VEE moved in the round before has its first record on its new
        // host a metering round or two into this one.
        let moved: HashSet<String> = done.migrated.union(&self.moved).cloned().collect();
        (round.unmetered, round.metered) = self.usage_gaps(&began.0, &moved, began.1).await;
        self.moved = done.migrated;
        let after = self.leader().await;
        if let Some(now) = after.filter(|_| after != before) {
            let log = self.veems[now].0.daemon.log_text();
            round.from_copy = log
                .rsplit("opening the site's state from_copy=")
                .next()
                .filter(|_| log.contains("opening the site's state from_copy="))
                .map(|rest| rest.starts_with("true"));
        }
        round
    }

    /// What the load of a round does: the IDs its commands name.
    fn load_plan(&mut self) -> Plan {
        Plan {
            hosts: self.hosts.iter().map(|h| h.host.clone()).collect(),
            manifest: {
                let f = self.dir.join("extra.toml");
                std::fs::write(&f, manifest("extra", "acme", &self.ids, 1, "")).unwrap();
                f
            },
            seed: self.rng.u64(..),
        }
    }
}

fn signal(sig: &str, pid: u32) {
    let _ = std::process::Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Runs `rounds` rounds on a lab of its own, faults drawn from `seed`;
/// prints each round as it ends. The report.
pub async fn run(rounds: usize, seed: u64) -> Report {
    let mut lab = Lab::start(seed).await;
    let mut report = Report::default();
    // Each fault once in the first rounds (in a drawn order), then drawn.
    let mut order = Fault::ALL.to_vec();
    lab.rng.shuffle(&mut order);
    for n in 0..rounds {
        let fault = order
            .get(n)
            .copied()
            .unwrap_or_else(|| Fault::ALL[lab.rng.usize(0..Fault::ALL.len())]);
        let began = chrono::Utc::now().format("%H:%M:%S%.3f");
        let r = lab.round(fault).await;
        println!(
            "round {} ({began} UTC): {} {}unavailable {:.1} s, {} ok, {} failed, usage of {} VEEs checked, violations {}{}",
            n + 1,
            fault.name(),
            r.target.as_deref().map(|t| format!("({t}) ")).unwrap_or_default(),
            r.unavailable.as_secs_f64(),
            r.ok,
            r.failed.len(),
            r.metered,
            r.violations(),
            if r.violations() > 0 {
                format!(
                    ": lost {:?} doubled {:?} stuck {:?} usage gaps {:?} leaders {}",
                    r.lost, r.doubled, r.stuck, r.unmetered, r.leaders
                )
            } else {
                String::new()
            }
        );
        for f in &r.failed {
            println!("    a command failed: {f}");
        }
        if r.unavailable > Duration::from_secs(5) {
            println!("    probes within the longest gap: {:?}", r.in_gap);
        }
        report.rounds.push(r);
    }
    report
}

mod checks;
mod load;
mod peer;

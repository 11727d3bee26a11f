//! Site B of a chaos run: a peer of site A (one VEEM, its host in B's
//! namespaces) whose operator moves B's VEE to site A and home again,
//! round after round, while site A is under its faults: a peer's
//! migrations in and out of the site under chaos. After each round, B's
//! view is checked with A's: B's VEE runs once, where B says, and neither
//! site has it or a migration of it in a transitional state.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use interfaces::vmi::{MigrationState, VeeState};

use super::load::{cli_of, first_line, Done};
use crate::daemons::{GuestIds, ImageRepo, Veeh};
use crate::lab;
use crate::site::{self, host_of, manifest, PeerLink, Veem, ACME, OPERATOR};

/// Site B (see the module doc).
pub(super) struct SiteB {
    pub(super) veem: Veem,
    pub(super) host: Veeh,
    /// B's VEE that goes back and forth.
    pub(super) vee: String,
}

impl SiteB {
    /// Starts B's host and VEEM on `port`, peering with A by `to_a`, and
    /// deploys `away` (one instance) at B.
    pub(super) async fn start(dir: &Path, repo: &ImageRepo, ids: &GuestIds, port: u16, to_a: PeerLink) -> Self {
        let host = Veeh::start_sized(dir, "b1", "site-b", lab::SITE_B_URI, repo, (4, 2048)).await;
        let cfg = site::write_config(dir, "site-b", port, repo, &[&host], &[to_a], "");
        let veem = Veem::start(dir, "site-b", port, cfg).await;
        let mut acme = veem.client(ACME).await;
        let svc = site::deploy(&mut acme, manifest("away", "acme", ids, 1, "")).await.unwrap();
        let vee = svc.vees[0].vee_id.clone();
        veem.wait_vee(&vee, "running at B", Duration::from_secs(180), |i| i.state() == VeeState::Running)
            .await;
        SiteB { veem, host, vee }
    }

    /// B's operator's moves until `stop` (see [`moves`]).
    pub(super) fn moves(&self, dir: PathBuf, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Done> {
        tokio::spawn(moves(
            self.veem.endpoint.clone(),
            dir,
            self.vee.clone(),
            self.host.host.clone(),
            stop,
        ))
    }

    /// What B says of its VEE, and B's open migrations; `None` while B
    /// does not answer.
    async fn view(&self) -> Option<(interfaces::vmi::VeeInfo, Vec<String>)> {
        let mut op = self.veem.client(OPERATOR).await;
        let info = op
            .list_vees(interfaces::vmi::ListVeesRequest::default())
            .await
            .ok()?
            .into_inner()
            .vees
            .into_iter()
            .find(|i| i.vee_id == self.vee)?;
        let open = op
            .list_migrations(interfaces::vmi::ListMigrationsRequest::default())
            .await
            .ok()?
            .into_inner()
            .migrations
            .into_iter()
            .filter(|m| matches!(m.state(), MigrationState::Approved | MigrationState::Running))
            .map(|m| {
                format!(
                    "site B: migration {} of VEE {} {}",
                    m.migration_id,
                    m.vee_id,
                    m.state().as_str_name()
                )
            })
            .collect();
        Some((info, open))
    }

    /// What is stuck at B: its VEE in a transitional state or a
    /// migration approved or running (empty once it settled).
    pub(super) async fn stuck(&self) -> Option<Vec<String>> {
        let (info, mut open) = self.view().await?;
        if !matches!(info.state(), VeeState::Running | VeeState::Stopped | VeeState::Failed) {
            open.push(format!("site B: VEE {} {}", info.vee_id, info.state().as_str_name()));
        }
        Some(open)
    }

    /// Whether B's VEE is lost: B records it running at `at` (its host,
    /// or site A) where `on` (the hosts running its domain, both sites')
    /// has none. A message when it is.
    pub(super) async fn lost(&self, on: &[String], a_hosts: &[String]) -> Option<String> {
        let (info, _) = self.view().await?;
        if info.state() != VeeState::Running {
            return None;
        }
        let there = match host_of(&info) {
            Some(h) => on.contains(&h),
            None => on.iter().any(|h| a_hosts.contains(h)),
        };
        (!there).then(|| format!("site B's VEE {} recorded running {}, its domain on {on:?}", self.vee, info.location))
    }
}

/// B's operator, every 3 s until `stop`: B's VEE, when it runs, is moved
/// to the other side (from B's host to site A, from site A home to B's
/// `home` host), proposed and approved; a move still under way is waited
/// for.
async fn moves(endpoint: String, dir: PathBuf, vee: String, home: String, stop: Arc<AtomicBool>) -> Done {
    let mut done = Done::default();
    let run = |args: Vec<String>| cli_of("site-b", endpoint.clone(), dir.clone(), OPERATOR, args);
    while !stop.load(Ordering::SeqCst) {
        let (_, listed) = run(vec!["ls".into(), "-o".into(), "json".into()]).await;
        let location = serde_json::from_str::<serde_json::Value>(&listed)
            .ok()
            .and_then(|v| v["items"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .find(|v| v["vee_id"] == vee.as_str() && v["state"] == "running")
            .and_then(|v| v["location"].as_str().map(String::from));
        if let Some(location) = location {
            let to = if location.starts_with("remote") {
                ["--to-host", home.as_str()]
            } else {
                ["--to-site", "site-a"]
            };
            let mut args: Vec<String> = vec!["migrate".into(), vee.clone()];
            args.extend(to.iter().map(|a| a.to_string()));
            args.extend(["-o".into(), "json".into()]);
            let (proposed, said) = run(args).await;
            let id = serde_json::from_str::<serde_json::Value>(&said)
                .ok()
                .and_then(|m| m["migration_id"].as_str().map(String::from));
            match (proposed, id) {
                (true, Some(id)) => match run(vec!["approve".into(), id]).await {
                    (true, _) => done.ok += 1,
                    (false, said) => done.failed.push(format!("site B: {}", first_line(&said))),
                },
                _ => done.failed.push(format!("site B: {}", first_line(&said))),
            }
            done.migrated.insert(vee.clone());
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    done
}

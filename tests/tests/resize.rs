//! Vertical elasticity on a real guest (issue 40, item 5): a VEE deployed
//! with `max_memory_mib` and `max_vcpus` is resized while it runs (`veem
//! resize`), and the guest sees it: its MemTotal grows as the balloon
//! gives memory back, its processor count as a vCPU is hot-plugged.

use std::time::{Duration, Instant};

use e2e::daemons::{console, ImageRepo, Veeh};
use e2e::site::{self, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vmi::*;

/// The guest says every second how much memory and how many processors
/// it has: `vee-guest: mem KB cpus N`.
const REPORT: &str = "user_data = \"\"\"\n#!/bin/sh\n( while sleep 1; do echo \"vee-guest: mem $(awk '/MemTotal/ {print $2}' /proc/meminfo) cpus $(grep -c ^processor /proc/cpuinfo)\"; done > /dev/ttyS0 ) &\n\"\"\"\n";

/// The last `(MemTotal kB, processors)` the guest reported.
fn last_report(text: &str) -> Option<(u64, u32)> {
    let line = text.lines().rev().find(|l| l.starts_with("vee-guest: mem "))?;
    let mut words = line.split_whitespace().skip(2);
    let mem = words.next()?.parse().ok()?;
    let cpus = words.nth(1)?.parse().ok()?;
    Some((mem, cpus))
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_live_memory_and_vcpu_resize_of_a_running_guest_is_visible_inside_it() {
    let _lab = lab::lock();
    let dir = lab::test_dir("resize");
    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::image()).await;
    let host = Veeh::start(&dir, "resize-1", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&host], &[], "");
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let m = site::manifest("sized", "acme", &ids, 1, "").replace(
        "memory_mib = 128\n",
        &format!("memory_mib = 128\nmax_memory_mib = 256\nmax_vcpus = 2\n{REPORT}"),
    );
    let svc = site::deploy(&mut acme, m).await.unwrap();
    let id = svc.vees[0].vee_id.clone();
    veem.wait_vee(&id, "running", Duration::from_secs(180), |i| i.state() == VeeState::Running)
        .await;
    let mut vhi = host.client().await;
    let report = |text: &str| last_report(text);
    let before = e2e::daemons::wait_console(&mut vhi, &id, 4096, "a size report", Duration::from_secs(120), report).await;
    // The balloon holds the guest to 128 MiB of its 256.
    assert!(before.0 < 128 * 1024, "MemTotal {} kB with 128 MiB", before.0);
    assert_eq!(before.1, 1);

    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let endpoint = site::endpoint("site-a", port);
    let asked = Instant::now();
    let out = site::cli_at(&endpoint, &home, ACME, &["resize", &id, "--memory", "224", "--vcpus", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("2 (at most 2)") && shown.contains("224 (at most 256)"), "{shown}");
    let grown = |text: &str| last_report(text).filter(|(mem, cpus)| *mem >= before.0 + 80 * 1024 && *cpus == 2);
    let after = e2e::daemons::wait_console(&mut vhi, &id, 4096, "the new size", Duration::from_secs(60), grown).await;
    println!(
        "resize 1 -> 2 vCPUs, 128 -> 224 MiB: the guest saw MemTotal {} -> {} kB and {} -> {} processors {:.1?} after it was asked",
        before.0,
        after.0,
        before.1,
        after.1,
        asked.elapsed()
    );
    // And back down: the balloon takes memory again.
    let out = site::cli_at(&endpoint, &home, ACME, &["resize", &id, "--memory", "160"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let shrunk = |text: &str| last_report(text).filter(|(mem, _)| *mem + 48 * 1024 <= after.0);
    e2e::daemons::wait_console(&mut vhi, &id, 4096, "the smaller size", Duration::from_secs(60), shrunk).await;
    // Beyond the maximum set at deploy: refused, naming the field.
    let out = site::cli_at(&endpoint, &home, ACME, &["resize", &id, "--memory", "512"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("memory_mib") && stderr.contains("maximum of 256"),
        "{stderr}"
    );
    let tail = console(&mut vhi, &id).await;
    assert!(last_report(&tail).is_some_and(|(_, cpus)| cpus == 2), "{tail}");
}

//! A rolling image update on real guests (issue 40, item 4): `veem update
//! SERVICE web --image NEW --wait` replaces both web instances, one at a
//! time, in place (same VEE, host and addresses), while a client outside
//! the site (the lab's `vee-outside` namespace) keeps asking either
//! instance's external address for its page; the client's longest gap
//! without an answer is printed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use e2e::daemons::{ImageRepo, Veeh};
use e2e::net::{outside, OUTSIDE};
use e2e::site::{self, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vmi::*;

const BOOT: Duration = Duration::from_secs(180);

/// Two `web` instances on two hosts, port 80 on an external network.
fn manifest(ids: &e2e::daemons::GuestIds) -> String {
    format!(
        "[service]\nname = \"rolling\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\npenalty_per_hour = 1.0\n\
         [[network]]\nname = \"public\"\nkind = \"external\"\nports = [80]\n\
         [[component]]\nname = \"web\"\ninstances = 2\nvcpus = 1\nmemory_mib = 128\ndisk_gib = 1\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\nnetworks = [\"public\"]\n\
         [[constraint]]\nkind = \"anti-affinity\"\nlevel = \"host\"\nscope = \"instance\"\ncomponents = [\"web\"]\n",
        ids.disk, ids.kernel, ids.initrd, ids.cmdline
    )
}

/// A client outside asking each of `addresses` in turn for its page (1 s
/// timeout each): the instants at which one answered.
struct Client {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Instant>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Client {
    fn start(addresses: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let (s, a) = (stop.clone(), answers.clone());
        let thread = std::thread::spawn(move || {
            for address in addresses.iter().cycle() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let (ok, page) = outside(&format!("curl -sf -m 1 http://{address}/"));
                if ok && page.starts_with("tick ") {
                    a.lock().unwrap().push(Instant::now());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Self { stop, answers, thread }
    }

    /// Stops; the longest time without an answer from `since` to now,
    /// and how many answers.
    fn longest_gap(self, since: Instant) -> (Duration, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let now = Instant::now();
        self.thread.join().unwrap();
        let answers = self.answers.lock().unwrap();
        let mut times: Vec<Instant> = vec![since];
        times.extend(answers.iter().filter(|t| **t > since && **t < now));
        times.push(now);
        let gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or_default();
        (gap, times.len() - 2)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_rolling_update_replaces_both_web_instances_while_one_answers_http_from_outside() {
    let _lab = lab::lock();
    assert!(outside("true").0, "no namespace {OUTSIDE}: run scripts/setup-host");
    let dir = lab::test_dir("rollout");
    let repo = ImageRepo::start(&dir).await;
    let g = guest::image();
    let ids = repo.push_guest(&g).await;
    // The new image: the same data disk as raw (another content ID).
    let new = repo.push_guest_disk_v2(&g, &dir).await;

    let hosts = [
        Veeh::start(&dir, "roll-1", "site-a", lab::SITE_A_URI, &repo).await,
        Veeh::start(&dir, "roll-2", "site-a", lab::SITE_A_URI, &repo).await,
    ];
    let port = site::port();
    let pools = "[networks]\nexternal_pool = \"10.80.4.0/28\"\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&hosts[0], &hosts[1]], &[], pools);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest(&ids)).await.unwrap();
    for v in &svc.vees {
        veem.wait_vee(&v.vee_id, "running", BOOT, |i| i.state() == VeeState::Running).await;
    }
    let before = site::vees(&mut acme, &svc.service_id).await;
    let external: Vec<String> = before.iter().map(|v| v.nics[0].external_address.clone()).collect();
    for address in &external {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !outside(&format!("curl -sf -m 1 http://{address}/")).0 {
            assert!(Instant::now() < deadline, "{address} does not answer from outside");
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    let client = Client::start(external.clone());
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let endpoint = site::endpoint("site-a", port);
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        site::cli_at(
            &endpoint,
            &home,
            ACME,
            &["update", "rolling", "web", "--image", &new, "--wait", "--timeout", "10m"],
        )
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let (gap, answers) = client.longest_gap(started);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("done") && stdout.contains("2 of 2"), "{stdout}");
    println!("rolling update of 2 instances: {took:.1?}; the client outside got {answers} answers, longest gap {gap:.1?}");

    let after = site::vees(&mut acme, &svc.service_id).await;
    let new_image = after[0].image.clone();
    for (b, a) in before.iter().zip(&after) {
        assert_eq!((&a.vee_id, a.instance, &a.nics), (&b.vee_id, b.instance, &b.nics), "in place");
        assert_eq!(a.state(), VeeState::Running);
        assert_ne!(a.image, b.image, "booted from the new image");
        assert_eq!(a.image, new_image);
    }
    // One instance answered the whole time: the longest gap (from the
    // command's start to its end) is a poll or two (each up to 1 s), never
    // a whole instance's reboot.
    assert!(answers > 5, "{answers}");
    assert!(gap < Duration::from_secs(3), "the outside went {gap:?} without an answer");
    let events: Vec<String> = site::history(&mut acme, &svc.service_id)
        .await
        .into_iter()
        .filter(|e| e.kind.starts_with("rollout") || e.kind == "replaced")
        .map(|e| format!("{}: {}", e.kind, e.detail))
        .collect();
    assert!(events.iter().filter(|e| e.starts_with("replaced")).count() == 2, "{events:?}");
    assert!(events.iter().any(|e| e.starts_with("rollout-done")), "{events:?}");
}

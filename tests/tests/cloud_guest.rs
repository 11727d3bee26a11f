//! A stock Debian 12 cloud guest (scripts/build-cloud-guest: systemd,
//! cloud-init, openssh-server, qemu-guest-agent; nothing of this project)
//! deployed through a real VEEM and VEEH, as a provider would deploy a
//! distribution's cloud image: cloud-init applies the manifest's user data
//! and installs its SSH keys from the VEE's NoCloud seed, the guest takes
//! its address by DHCP, a client outside logs in with SSH through the
//! VEE's external address, and `stop` is a clean systemd shutdown.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::daemons::{console_tail, wait_console, ImageRepo, Veeh};
use e2e::net::{outside, Forwarding, OUTSIDE};
use e2e::site::{self, Veem, ACME};
use e2e::{guest, lab};
use interfaces::vhi::vhi_service_client::VhiServiceClient;
use interfaces::vmi::*;
use tonic::transport::Channel;

/// Boot to cloud-init's last stage: about 2 minutes under TCG, more on a
/// loaded machine.
const BOOT: Duration = Duration::from_secs(420);

/// The manifest's first-boot data: cloud-config that writes a file and
/// runs a command, the standard way a provider configures a cloud image.
const USER_DATA: &str = r#"#cloud-config
write_files:
  - path: /etc/vee/greeting
    content: "configured by the manifest's user data\n"
runcmd:
  - [sh, -c, 'echo "vee-cloud: runcmd ran on $(hostname) as $(id -un)" > /dev/console']
"#;

/// Service `shop` of acme: one `web` VEE of the cloud guest (512 MiB, its
/// cmdline), on an external network with SSH (22) declared, with
/// `USER_DATA` and the key `public_key`.
fn manifest(ids: &e2e::daemons::GuestIds, public_key: &str) -> String {
    format!(
        "[service]\nname = \"shop\"\nprovider = \"acme\"\n[sla]\nguarantee = \"standard\"\npenalty_per_hour = 1.0\n\
         [[network]]\nname = \"front\"\nkind = \"external\"\nports = [22]\n\
         [[component]]\nname = \"web\"\nvcpus = 1\nmemory_mib = 512\ndisk_gib = 2\nimage = \"{}\"\nkernel = \"{}\"\ninitrd = \"{}\"\ncmdline = \"{}\"\nnetworks = [\"front\"]\n\
         ssh_authorized_keys = [\"{}\"]\nuser_data = '''\n{USER_DATA}'''\n",
        ids.disk,
        ids.kernel,
        ids.initrd,
        ids.cmdline,
        public_key.trim()
    )
}

/// The console's last 4 MiB: all of it for this test's boot.
const WHOLE: u64 = 4 << 20;

/// Waits until the console has a line containing `needle`; returns it.
async fn wait_line(c: &mut VhiServiceClient<Channel>, vee: &str, needle: &str, timeout: Duration) -> String {
    wait_console(c, vee, WHOLE, &format!("with {needle:?}"), timeout, |text| {
        text.lines().find(|l| l.contains(needle)).map(|l| l.trim().to_string())
    })
    .await
}

/// A new ed25519 key pair at `path` (the public key at `path.pub`);
/// returns `path`.
fn keygen(path: &Path) -> std::path::PathBuf {
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "alice@laptop", "-f"])
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "ssh-keygen {}", path.display());
    path.to_path_buf()
}

/// `ssh -i key debian@address command` from the lab's outside, trusting
/// only the host keys in `known_hosts`: (success, output).
fn ssh(key: &Path, known_hosts: &Path, address: &str, command: &str) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", OUTSIDE, "ssh", "-i"])
        .arg(key)
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            &format!("UserKnownHostsFile={}", known_hosts.display()),
            "-o",
            "ConnectTimeout=10",
            "-o",
            "LogLevel=ERROR",
            &format!("debian@{address}"),
            command,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread")]
async fn lab_a_stock_cloud_image_boots_configured_by_its_manifest_and_stops_cleanly() {
    let _lab = lab::lock();
    let _forwarding = Forwarding::on();
    assert!(outside("true").0, "no namespace {OUTSIDE}: run scripts/setup-host");
    let dir = lab::test_dir("cloud-guest");
    let key = keygen(&dir.join("id_ed25519"));
    let public_key = std::fs::read_to_string(key.with_extension("pub")).unwrap();

    let repo = ImageRepo::start(&dir).await;
    let ids = repo.push_guest(&guest::cloud_image()).await;
    let a1 = Veeh::start(&dir, "cg-a1", "site-a", lab::SITE_A_URI, &repo).await;
    let port = site::port();
    // The guest's systemd shutdown takes about 9 s under TCG: room for a
    // loaded machine.
    let extra = "stop_timeout = \"180s\"\n[networks]\nexternal_pool = \"10.80.5.0/28\"\n";
    let cfg = site::write_config(&dir, "site-a", port, &repo, &[&a1], &[], extra);
    let veem = Veem::start(&dir, "site-a", port, cfg).await;
    let mut acme = veem.client(ACME).await;
    let svc = site::deploy(&mut acme, manifest(&ids, &public_key)).await.unwrap();
    let vee = svc.vees[0].vee_id.clone();
    let info = veem
        .wait_vee(&vee, "running", Duration::from_secs(120), |i| i.state() == VeeState::Running)
        .await;
    let external = info.nics[0].external_address.clone();
    assert!(external.starts_with("10.80.5."), "{external}");

    // cloud-init read the seed: the runcmd of the user data ran, as root,
    // on the host name the VEEM gave the VEE, and cloud-init finished.
    let mut c = a1.client().await;
    let ran = wait_line(&mut c, &vee, "vee-cloud: runcmd ran on", BOOT).await;
    assert!(ran.ends_with("vee-cloud: runcmd ran on web-0 as root"), "{ran}");
    let finished = wait_line(&mut c, &vee, " finished at ", Duration::from_secs(120)).await;
    assert!(
        finished.contains("Cloud-init v.") && finished.contains("DataSourceNoCloud [seed=/dev/vdb]"),
        "{finished}"
    );

    // As a user of any cloud does, the provider takes the SSH host key the
    // guest made at first boot from its console, trusts only that, and
    // logs in from outside with the manifest's key at the external address
    // (DHCP gave the guest its internal one): the file of the user data is
    // there, cloud-init reports no error, no systemd unit failed.
    let text = console_tail(&mut c, &vee, WHOLE).await;
    let host_key = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN SSH HOST KEY KEYS-----"))
        .find(|l| l.starts_with("ssh-ed25519 "))
        .unwrap_or_else(|| panic!("no host key on the console:\n{}", site::tail(&text, 3000)));
    let known_hosts = dir.join("known_hosts");
    std::fs::write(&known_hosts, format!("{external} {host_key}\n")).unwrap();
    let start = Instant::now();
    let mut last = (false, String::new());
    while start.elapsed() < Duration::from_secs(120) {
        last = ssh(
            &key,
            &known_hosts,
            &external,
            "cat /etc/vee/greeting; hostname; cloud-init status; systemctl is-system-running --wait",
        );
        if last.0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let (ok, text) = last;
    assert!(ok, "ssh debian@{external} with the manifest's key: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        ["configured by the manifest's user data", "web-0", "status: done", "running"],
        "{text}"
    );
    // Another key is refused.
    let other = keygen(&dir.join("other_ed25519"));
    let (ok, text) = ssh(&other, &known_hosts, &external, "true");
    assert!(!ok, "a key not in the manifest logged in: {text}");

    // stop: systemd shuts the guest down and it powers itself off; no
    // destroy after stop_timeout.
    let t = Instant::now();
    site::vee_action(&mut acme, &vee, Action::Stop).await.unwrap();
    let took = t.elapsed();
    let events = site::history(&mut acme, &svc.service_id).await;
    let stopped: Vec<&str> = events
        .iter()
        .filter(|e| e.vee_id == vee && e.detail.contains("-> stopped"))
        .map(|e| e.detail.as_str())
        .collect();
    assert!(
        stopped.iter().any(|d| d.ends_with("-> stopped: the guest shut down")),
        "the stop after {took:?}: {stopped:?}"
    );
    drop((a1, veem, repo));
    let _ = std::fs::remove_dir_all(&dir);
}

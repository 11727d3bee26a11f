//! Isolation of service networks on a host, with the kernel's own
//! networking: "guests" here are network namespaces joined to a network's
//! bridge by a veth pair (what a VEE's tap is to QEMU), so that every packet
//! a guest sends can be made and checked without a VM. Within a network
//! guests reach each other; from one network to another, and from a guest
//! to the host's own addresses and services, packets are dropped by the
//! VEEH's nftables rules (their counters prove it); everything goes with the
//! networks. A second "host" with a kernel network stack of its own (a
//! network namespace running the same VEEH code) joins a network over a
//! real VXLAN tunnel, whose forwarding entries follow the member table.

use e2e::lab;
use e2e::net::{dropped, sh, Forwarding};
use interfaces::vhi::{NetworkMember, NetworkUpdate, Nic};
use veeh::network::{bridge_name, ensure_networks, release_networks, update_network};

/// A network namespace playing a guest on `bridge` at `address` (with
/// prefix) behind `gateway`; deleted on drop (its veth with it).
struct Guest {
    ns: String,
}

impl Guest {
    fn new(name: &str, bridge: &str, address: &str, gateway: &str) -> Guest {
        Guest::on_host("", name, bridge, address, gateway)
    }

    /// [`Guest::new`] on the host whose network namespace is `host_ns`
    /// (empty: this one).
    fn on_host(host_ns: &str, name: &str, bridge: &str, address: &str, gateway: &str) -> Guest {
        let g = Guest::attach(host_ns, name, bridge);
        let ns = &g.ns;
        for cmd in [
            format!("ip -n {ns} addr add {address} dev eth0"),
            format!("ip -n {ns} link set eth0 up"),
            format!("ip -n {ns} route add default via {gateway}"),
        ] {
            let (ok, out) = sh(&cmd);
            assert!(ok, "{cmd}: {out}");
        }
        g
    }

    /// A namespace whose `eth0` (down, no address) is joined to `bridge`
    /// on the host whose network namespace is `host_ns` (empty: this one).
    fn attach(host_ns: &str, name: &str, bridge: &str) -> Guest {
        let ns = format!("vg-{name}");
        let host_end = format!("v{name}");
        let on = if host_ns.is_empty() {
            String::new()
        } else {
            format!("-n {host_ns} ")
        };
        for cmd in [
            format!("ip netns add {ns}"),
            format!("ip {on}link add {host_end} type veth peer name eth0 netns {ns}"),
            format!("ip {on}link set {host_end} master {bridge} up"),
            format!("ip -n {ns} link set lo up"),
        ] {
            let (ok, out) = sh(&cmd);
            assert!(ok, "{cmd}: {out}");
        }
        Guest { ns }
    }

    /// One ping from this guest to `to`; whether it was answered.
    fn ping(&self, to: &str) -> bool {
        sh(&format!("ip netns exec {} busybox ping -c 1 -W 2 {to}", self.ns)).0
    }

    /// Whether a TCP connection from this guest to `to:port` opens.
    fn connects(&self, to: &str, port: u16) -> bool {
        sh(&format!("echo | ip netns exec {} busybox nc -w 2 {to} {port}", self.ns)).0
    }
}

impl Drop for Guest {
    /// Deletes the namespace and waits until the kernel has taken its
    /// veth off the bridge (it does so in the background).
    fn drop(&mut self) {
        let _ = sh(&format!("ip netns del {}", self.ns));
        let host_end = self.ns.replacen("vg-", "v", 1);
        for _ in 0..100 {
            if !sh(&format!("ip link show dev {host_end}")).0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// Runs `work` with every command it starts in network namespace `ns`:
/// the VEEH's own code, run as if on another host (its own bridges, VXLAN
/// interfaces and tables; the file system is shared).
fn in_namespace<T: Send + 'static>(ns: &str, work: impl std::future::Future<Output = T> + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path).unwrap();
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join()
    .unwrap()
}

fn member(name: &str, mac: &str, address: &str, vtep: &str) -> NetworkMember {
    NetworkMember {
        name: name.into(),
        mac: mac.into(),
        address: address.into(),
        vtep: vtep.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn lab_a_network_spans_two_kernels_over_vxlan_as_its_member_table_says() {
    let _lab = lab::lock();
    let r = uuid::Uuid::new_v4();
    let tag = &r.simple().to_string()[..4];
    let vni = 40_000 + u32::from(r.as_bytes()[0]) * 8;
    let x = u32::from(r.as_bytes()[1]) % 250;
    let net = format!("10.253.{x}");
    // The other host: its own network stack, joined to this one by an
    // underlay link (10.76.<x>.1 here, .2 there).
    let (remote, under) = (format!("vh-{tag}"), format!("vu{tag}"));
    let (here_vtep, there_vtep) = (format!("10.76.{x}.1"), format!("10.76.{x}.2"));
    for cmd in [
        format!("ip netns add {remote}"),
        format!("ip link add {under} type veth peer name eth0 netns {remote}"),
        format!("ip addr add {here_vtep}/30 dev {under}"),
        format!("ip link set {under} up"),
        format!("ip -n {remote} addr add {there_vtep}/30 dev eth0"),
        format!("ip -n {remote} link set eth0 up"),
        format!("ip -n {remote} link set lo up"),
    ] {
        let (ok, out) = sh(&cmd);
        assert!(ok, "{cmd}: {out}");
    }
    let (mac_a, mac_b) = ("02:00:9c:40:00:02", "02:00:9c:40:00:03");
    let table = |b_vtep: &str| {
        vec![
            member("a-0", mac_a, &format!("{net}.2"), &here_vtep),
            member("b-0", mac_b, &format!("{net}.3"), b_vtep),
        ]
    };
    let nic_of = |mac: &str, host: u32| Nic {
        members: table(&there_vtep),
        domain: "span.internal".into(),
        ..nic(vni, mac, &format!("{net}.{host}/24"), &format!("{net}.1"))
    };
    let (nic_a, nic_b) = (nic_of(mac_a, 2), nic_of(mac_b, 3));
    ensure_networks(&here_vtep, std::slice::from_ref(&nic_a)).await.unwrap();
    let (vtep, nb) = (there_vtep.clone(), nic_b.clone());
    in_namespace(&remote, async move { ensure_networks(&vtep, &[nb]).await }).unwrap();
    let vx = format!("vx{vni}");
    let (_, fdb) = sh(&format!("bridge fdb show dev {vx}"));
    assert!(
        fdb.contains(&format!("{mac_b} dst {there_vtep}")),
        "b-0 is behind the other host: {fdb}"
    );
    assert!(
        fdb.contains(&format!("00:00:00:00:00:00 dst {there_vtep}")),
        "flooding reaches it: {fdb}"
    );
    assert!(!fdb.contains(&format!("{mac_a} dst")), "a-0 is here: no entry: {fdb}");
    {
        let a = Guest::new(&format!("{tag}a"), &bridge_name(vni), &format!("{net}.2/24"), &format!("{net}.1"));
        let b = Guest::on_host(
            &remote,
            &format!("{tag}b"),
            &bridge_name(vni),
            &format!("{net}.3/24"),
            &format!("{net}.1"),
        );
        assert!(a.ping(&format!("{net}.3")), "a-0 -> b-0 through the VXLAN tunnel");
        assert!(b.ping(&format!("{net}.2")), "b-0 -> a-0");
        // The table says b-0 moved to a third host: this one stops sending
        // its frames to the second.
        let moved = NetworkUpdate {
            vni,
            domain: "span.internal".into(),
            members: table(&format!("10.76.{x}.3")),
            ..Default::default()
        };
        update_network(&here_vtep, &moved).await.unwrap();
        let (_, fdb) = sh(&format!("bridge fdb show dev {vx}"));
        assert!(!fdb.contains(&format!("dst {there_vtep}")), "entries for the old host stay: {fdb}");
        assert!(!a.ping(&format!("{net}.3")), "frames still reach the old host");
        // Nor does this host take the old host's frames any more (the copy
        // there is cut off): they are dropped on the way in, counted.
        let before = dropped("input");
        assert!(!b.ping(&format!("{net}.2")), "the old host's frames still come in");
        assert!(dropped("input") > before, "the isolation table dropped them");
        // And back.
        let back = NetworkUpdate {
            members: table(&there_vtep),
            ..moved
        };
        update_network(&here_vtep, &back).await.unwrap();
        assert!(a.ping(&format!("{net}.3")), "a-0 -> b-0 again");
    }
    release_networks(&[nic_a]).await;
    assert!(
        !sh(&format!("ip link show dev {vx}")).0,
        "the VXLAN interface goes with the network"
    );
    let _ = sh(&format!("ip netns del {remote}"));
    let _ = sh(&format!("ip link del {under}"));
}

fn nic(vni: u32, mac: &str, address: &str, gateway: &str) -> Nic {
    Nic {
        network: format!("net-{vni}"),
        vni,
        mac: mac.into(),
        address: address.into(),
        gateway: gateway.into(),
        mtu: 1450,
        ..Default::default()
    }
}

#[tokio::test]
async fn lab_service_networks_are_isolated_from_each_other_and_from_the_host() {
    let _lab = lab::lock();
    let r = uuid::Uuid::new_v4();
    let tag = &r.simple().to_string()[..4];
    let (vni_a, vni_b) = (30_000 + u32::from(r.as_bytes()[0]) * 8, 30_001 + u32::from(r.as_bytes()[0]) * 8);
    let x = u32::from(r.as_bytes()[1]) % 250;
    let (net_a, net_b) = (format!("10.252.{x}"), format!("10.252.{}", x + 1));
    let a = nic(vni_a, "02:00:75:30:00:02", &format!("{net_a}.2/24"), &format!("{net_a}.1"));
    let b = nic(vni_b, "02:00:75:31:00:02", &format!("{net_b}.2/24"), &format!("{net_b}.1"));
    ensure_networks("127.0.0.1", std::slice::from_ref(&a)).await.unwrap();
    ensure_networks("127.0.0.1", std::slice::from_ref(&b)).await.unwrap();
    let _forwarding = Forwarding::on();
    {
        let a1 = Guest::new(
            &format!("{tag}a1"),
            &bridge_name(vni_a),
            &format!("{net_a}.2/24"),
            &format!("{net_a}.1"),
        );
        let a2 = Guest::new(
            &format!("{tag}a2"),
            &bridge_name(vni_a),
            &format!("{net_a}.3/24"),
            &format!("{net_a}.1"),
        );
        let b1 = Guest::new(
            &format!("{tag}b1"),
            &bridge_name(vni_b),
            &format!("{net_b}.2/24"),
            &format!("{net_b}.1"),
        );

        // Within a network: reachable.
        assert!(a1.ping(&format!("{net_a}.3")), "a1 -> a2 on the same network");
        assert!(a2.ping(&format!("{net_a}.2")));

        // To another service's network: dropped in the host's forward path.
        let before = dropped("forward");
        assert!(!a1.ping(&format!("{net_b}.2")), "a1 reached b1 on another network");
        assert!(!b1.ping(&format!("{net_a}.2")), "b1 reached a1 on another network");
        assert!(dropped("forward") >= before + 2, "the forward rule dropped them");

        // To the host's own services, at its gateway address or any other.
        let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(
            std::net::TcpStream::connect((format!("{net_a}.1").as_str(), port)).is_ok(),
            "the service answers on the host itself"
        );
        let before = dropped("input");
        assert!(!a1.connects(&format!("{net_a}.1"), port), "a guest reached a host service");
        assert!(
            !a1.connects(&format!("{net_b}.1"), port),
            "a guest reached the host at another address"
        );
        assert!(dropped("input") > before, "the input rule dropped them");
    }
    // The guests are gone; the networks go with their last NIC, the rules
    // with the last network.
    release_networks(&[a]).await;
    release_networks(&[b]).await;
    for vni in [vni_a, vni_b] {
        assert!(!sh(&format!("ip link show dev {}", bridge_name(vni))).0, "bridge left behind");
    }
    let (_, tables) = sh("nft list tables");
    assert!(
        !tables.contains("vee_isolation") || sh("ip -o link show type bridge | grep -q ': vb'").0,
        "rules left behind: {tables}"
    );
}

/// A DHCP client with MAC `mac` on `bridge` (a namespace, removed after):
/// the address it was given, if any (busybox `udhcpc`, 4 tries).
fn dhcp_lease(tag: &str, bridge: &str, mac: &str) -> Option<String> {
    let g = Guest::attach("", tag, bridge);
    let script = std::env::temp_dir().join(format!("lease-{tag}.sh"));
    std::fs::write(&script, "#!/bin/sh\n[ \"$1\" = bound ] && echo \"LEASE $ip\"\nexit 0\n").unwrap();
    let _ = sh(&format!("chmod +x {}", script.display()));
    for cmd in [
        format!("ip -n {} link set eth0 address {mac}", g.ns),
        format!("ip -n {} link set eth0 up", g.ns),
    ] {
        let (ok, out) = sh(&cmd);
        assert!(ok, "{cmd}: {out}");
    }
    let (_, out) = sh(&format!(
        "ip netns exec {} busybox udhcpc -i eth0 -n -q -t 4 -T 1 -s {}",
        g.ns,
        script.display()
    ));
    drop(g);
    let _ = std::fs::remove_file(&script);
    out.lines().find_map(|l| l.strip_prefix("LEASE ").map(str::to_string))
}

#[tokio::test]
async fn lab_dhcp_answers_reserved_macs_only() {
    let _lab = lab::lock();
    let r = uuid::Uuid::new_v4();
    let tag = &r.simple().to_string()[..4];
    let vni = 50_000 + u32::from(r.as_bytes()[0]) * 8;
    let net = format!("10.251.{}", u32::from(r.as_bytes()[1]) % 250);
    let reserved = "02:00:c3:50:00:02";
    let n = Nic {
        members: vec![member("r-0", reserved, &format!("{net}.2"), "")],
        ..nic(vni, reserved, &format!("{net}.2/24"), &format!("{net}.1"))
    };
    ensure_networks("127.0.0.1", std::slice::from_ref(&n)).await.unwrap();
    let br = bridge_name(vni);
    assert_eq!(
        dhcp_lease(&format!("{tag}s"), &br, "02:00:c3:50:00:09"),
        None,
        "a MAC nobody reserved got an address"
    );
    assert_eq!(
        dhcp_lease(&format!("{tag}r"), &br, reserved),
        Some(format!("{net}.2")),
        "the reserved MAC gets its address"
    );
    release_networks(&[n]).await;
    assert!(!sh(&format!("ip link show dev {br}")).0, "bridge left behind");
}

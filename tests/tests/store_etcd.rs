//! The VEEM's store on a real etcd cluster (issue 38, item 1; Debian's
//! etcd 3.4, started by the test on loopback ports with client
//! certificates): the same contract the sled and memory engines keep, a
//! commit fenced by an election key its holder lost, and quorum lost and
//! regained. No guest: these tests do not take the lab lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vee_testkit::etcd::EtcdCluster;
use vee_testkit::lab;
use veem::store::{Engine, EtcdEngine, EtcdOptions, Store, StoreError, Tree, Writes};

fn engine(cluster: &EtcdCluster, prefix: &str) -> EtcdEngine {
    EtcdEngine::connect(&EtcdOptions {
        endpoints: cluster.endpoints(),
        tls: Some(cluster.client_tls()),
        prefix: prefix.into(),
        timeout: Duration::from_secs(5),
    })
    .unwrap()
}

#[test]
fn the_etcd_engine_keeps_the_store_contract() {
    let dir = lab::test_dir("etcd-contract");
    let cluster = EtcdCluster::start(&dir, 1).unwrap();
    veem::sim::engine_contract(&engine(&cluster, "/contract"));
    // A second site's prefix on the same cluster sees none of it.
    let other = engine(&cluster, "/contract-other");
    let mut keys = 0;
    other
        .scan(Tree::Vees, &mut |_, _| {
            keys += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(keys, 0, "prefixes keep sites apart");
}

/// The store over etcd reads what it wrote, pages of a large tree
/// included, and a database of another site is refused.
#[test]
fn a_store_on_etcd_reads_a_tree_larger_than_a_page_in_key_order() {
    let dir = lab::test_dir("etcd-store");
    let cluster = EtcdCluster::start(&dir, 1).unwrap();
    let store = Store::on(Arc::new(engine(&cluster, "/vee/site-a")), "etcd").unwrap();
    let n = veem::store::ETCD_PAGE as usize * 2 + 17;
    let mut w = Writes::default();
    for i in 0..n {
        w.put(Tree::Usage, &format!("r{i:06}"), &i).unwrap();
    }
    store.commit(w).unwrap();
    let all: Vec<usize> = store.list(Tree::Usage).unwrap();
    assert_eq!(all, (0..n).collect::<Vec<_>>());
    // Reopened: the format is current, the records there.
    let again = Store::on(Arc::new(engine(&cluster, "/vee/site-a")), "etcd").unwrap();
    assert_eq!(again.get::<usize>(Tree::Usage, "r000042").unwrap(), Some(42));
}

/// A leader's commits carry the election key it holds (its epoch): once
/// its lease is gone, whatever it believes, it writes nothing.
#[test]
fn a_commit_fenced_by_an_election_key_its_holder_lost_writes_nothing() {
    let dir = lab::test_dir("etcd-fence");
    let cluster = EtcdCluster::start(&dir, 1).unwrap();
    let e = engine(&cluster, "/vee/site-a");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = e.client();
    let (lease, epoch) = rt.block_on(async {
        let lease = c.lease_grant(30, None).await.unwrap().id();
        let put = c
            .put(
                "/vee-election/site-a/leader",
                "veem-1",
                Some(etcd_client::PutOptions::new().with_lease(lease)),
            )
            .await
            .unwrap();
        (lease, put.header().unwrap().revision())
    });
    e.fence_with(Some((b"/vee-election/site-a/leader".to_vec(), epoch)));
    let put = |v: &[u8]| vec![(Tree::Vees, b"v1".to_vec(), Some(v.to_vec()))];
    e.commit(put(b"while leading"), &[]).unwrap();
    assert!(e.insert_new(Tree::Meta, b"n", b"1".to_vec()).unwrap());
    rt.block_on(c.lease_revoke(lease)).unwrap();
    let err = e.commit(put(b"after the lease"), &[]).unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:#}");
    assert!(matches!(
        e.insert_new(Tree::Meta, b"m", b"1".to_vec()).unwrap_err(),
        StoreError::Fenced(_)
    ));
    assert_eq!(
        e.get(Tree::Vees, b"v1").unwrap().as_deref(),
        Some(&b"while leading"[..]),
        "nothing written"
    );
    assert_eq!(e.get(Tree::Meta, b"m").unwrap(), None);
    // Another leader's key of a later epoch does not let it write either.
    rt.block_on(c.put("/vee-election/site-a/leader", "veem-2", None)).unwrap();
    assert!(matches!(e.commit(put(b"as if"), &[]).unwrap_err(), StoreError::Fenced(_)));
}

/// Without quorum a write is refused within the timeout, loudly, and
/// nothing of it is there once quorum returns; then writes go on.
#[test]
fn without_quorum_a_commit_is_refused_and_the_store_resumes_when_quorum_returns() {
    let dir = lab::test_dir("etcd-quorum");
    let mut cluster = EtcdCluster::start(&dir, 3).unwrap();
    let e = engine(&cluster, "/vee/site-a");
    e.commit(vec![(Tree::Vees, b"v1".to_vec(), Some(b"one".to_vec()))], &[]).unwrap();
    // A follower stops: nothing changes for the store. (The raft leader's
    // loss costs an election, a second or two, in which a write sent to
    // it may time out.)
    let leader = cluster.raft_leader().expect("a raft leader");
    let (follower, other) = match leader {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    };
    cluster.kill_member(follower);
    e.commit(vec![(Tree::Vees, b"v2".to_vec(), Some(b"two".to_vec()))], &[])
        .expect("two of three members are a quorum");
    cluster.kill_member(other);
    let t = Instant::now();
    let err = e
        .commit(vec![(Tree::Vees, b"v3".to_vec(), Some(b"three".to_vec()))], &[])
        .unwrap_err();
    eprintln!("refused after {:?}: {err:#}", t.elapsed());
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:#}");
    assert!(format!("{err:#}").contains("read-only"), "{err:#}");
    assert!(t.elapsed() < Duration::from_secs(10), "bounded by the timeout: {:?}", t.elapsed());
    cluster.start_member(follower).unwrap();
    cluster.start_member(other).unwrap();
    cluster.wait_healthy(Duration::from_secs(30)).unwrap();
    // The refused write may only have timed out (etcd does not say): it
    // is not there, or whole.
    let v3 = e.get(Tree::Vees, b"v3").unwrap();
    assert!(v3.is_none() || v3.as_deref() == Some(&b"three"[..]));
    e.commit(vec![(Tree::Vees, b"v4".to_vec(), Some(b"four".to_vec()))], &[])
        .expect("the site resumes by itself");
    assert_eq!(e.get(Tree::Vees, b"v2").unwrap().as_deref(), Some(&b"two"[..]));
}

/// `veem store migrate` moves a site's records from sled onto etcd and
/// back, each record checked; a target that holds records, or an etcd
/// prefix a VEEM leads, is refused.
#[test]
fn veem_store_migrate_moves_a_site_from_sled_to_etcd_and_back() {
    let dir = lab::test_dir("etcd-migrate");
    let cluster = EtcdCluster::start(&dir, 1).unwrap();
    let db = dir.join("site-a.db");
    {
        let store = Store::open(&db).unwrap();
        store.put(Tree::Meta, "site_id", &"site-a").unwrap();
        let mut w = Writes::default();
        for i in 0..250 {
            w.put(Tree::Vees, &format!("v{i:04}"), &i).unwrap();
        }
        w.put(Tree::Services, "s1", &"shop").unwrap();
        store.commit(w).unwrap();
    }
    let config = dir.join("veem.toml");
    std::fs::write(
        &config,
        format!(
            "site_id = \"site-a\"\nlisten = \"127.0.0.1:1\"\ndb = \"{}\"\nimage_repo = \"http://127.0.0.1:1\"\n{}",
            db.display(),
            cluster.store_toml("/vee/site-a")
        ),
    )
    .unwrap();
    let migrate = |from: &str, to: &str| {
        let out = std::process::Command::new(lab::binary("veem"))
            .args(["store", "migrate", "--config", config.to_str().unwrap(), "--from", from, "--to", to])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let sled = format!("sled:{}", db.display());
    let (code, out) = migrate(&sled, "etcd");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("vees: 250") && out.contains("services: 1"), "{out}");
    let e = engine(&cluster, "/vee/site-a");
    assert_eq!(e.get(Tree::Vees, b"v0042").unwrap().as_deref(), Some(&b"42"[..]));
    // Again: the target holds records now.
    let (code, out) = migrate(&sled, "etcd");
    assert_eq!(code, Some(1));
    assert!(out.contains("must be empty"), "{out}");
    // Back into a new sled database, while no VEEM leads: identical.
    let back = dir.join("back.db");
    let (code, out) = migrate("etcd", &format!("sled:{}", back.display()));
    assert_eq!(code, Some(0), "{out}");
    let store = Store::open(&back).unwrap();
    assert_eq!(store.list::<usize>(Tree::Vees).unwrap(), (0..250).collect::<Vec<_>>());
    drop(store);
    // A VEEM leads the site on etcd: its records are in use.
    cluster
        .etcdctl(
            &cluster.endpoints(),
            &["put", "/vee/site-a/leader/694d7a", "https://10.0.0.21:7200"],
        )
        .unwrap();
    let (code, out) = migrate("etcd", &format!("sled:{}", dir.join("third.db").display()));
    assert_eq!(code, Some(1));
    assert!(out.contains("leads or campaigns"), "{out}");
}

/// A standby's copy of the site's records and planner (issue 38, item
/// 2): read once, then kept current from etcd's watch; what a new leader
/// takes is what reading the store then gives, and a copy that met a
/// record it could not decode is not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_copy_kept_by_the_watch_is_what_reading_the_store_gives() {
    use veem::core::replica::Replica;
    use veem::core::Loaded;
    let dir = lab::test_dir("etcd-replica");
    let cluster = EtcdCluster::start(&dir, 1).unwrap();
    let store = Store::on(Arc::new(engine(&cluster, "/vee/site-a")), "etcd").unwrap();
    let site = veem::sim::FakeSite::start_on("site-a", &["h1", "h2"], "", store.clone());
    let first = site.running_service(veem::sim::STANDARD);
    site.veem.core.persist_planner().unwrap();
    let cfg = site.veem.core.config().clone();
    let standby = Arc::new(engine(&cluster, "/vee/site-a"));
    let replica = Replica::follow(
        standby.clone(),
        veem::core::renew_ahead_s(&cfg),
        std::sync::Arc::new(veem::ports::SystemClock),
    );
    assert!(
        replica.wait_for(store.revision().unwrap(), Duration::from_secs(10)).await,
        "the first read"
    );
    // The leader goes on: a second service, a VEE changed, one removed.
    let second = site.running_service(veem::sim::STANDARD);
    let mut v = site.veem.core.vee(&first[0]).unwrap();
    v.last_checkpoint_ms = Some(1234);
    site.veem.core.save_vee(&v).unwrap();
    site.veem.core.remove_vee(&second[0]).unwrap();
    site.veem.core.persist_planner().unwrap();
    let taken = replica
        .take(&store, 0, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a copy that reached the barrier");
    let read = Loaded::read(&cfg, &store).unwrap();
    let json = |l: &Loaded| serde_json::to_value(l.vees().collect::<Vec<_>>()).unwrap();
    assert_eq!(json(&taken), json(&read), "the VEE records");
    assert_eq!(taken.vees().count(), first.len() + second.len() - 1);
    let planner = |l: &Loaded| {
        let p = l.planner().expect("a planner");
        let mut e = p.entries();
        e.sort_by(|a, b| a.0.cmp(&b.0));
        (p.header(), e)
    };
    assert_eq!(planner(&taken), planner(&read), "the planner");

    // A record the copy cannot decode: not taken (the leader reads the
    // store, which says what is wrong).
    let replica = Replica::follow(
        standby,
        veem::core::renew_ahead_s(&cfg),
        std::sync::Arc::new(veem::ports::SystemClock),
    );
    assert!(replica.wait_for(store.revision().unwrap(), Duration::from_secs(10)).await);
    let mut w = Writes::default();
    w.put_raw(Tree::Vees, "broken", b"{not json".to_vec());
    store.commit(w).unwrap();
    assert!(replica.take(&store, 0, Duration::from_secs(10)).await.unwrap().is_none());
}

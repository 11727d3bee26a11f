//! The contract every store engine keeps ([`crate::store::Engine`]), as
//! the `Store` relies on it: the unit tests hold sled and memory to it,
//! the e2e tests a real etcd.

use crate::store::{Conflict, Engine, Revision, Tree, Unchanged};

/// What every engine must do, as the `Store` relies on it: asserts it of
/// `e`, a new, empty engine (or an empty key prefix of one) that nothing
/// else writes meanwhile. Panics where `e` breaks the contract.
pub fn engine_contract(e: &dyn Engine) {
    assert_eq!(e.get(Tree::Vees, b"v1").unwrap(), None);
    let start = e.revision().unwrap();
    let first = e
        .commit(
            vec![
                (Tree::Vees, b"v2".to_vec(), Some(b"two".to_vec())),
                (Tree::Vees, b"v1".to_vec(), Some(b"one".to_vec())),
                (Tree::Services, b"s1".to_vec(), Some(b"svc".to_vec())),
                (Tree::Services, b"s1".to_vec(), None),
                (Tree::Services, b"s2".to_vec(), Some(b"svc2".to_vec())),
            ],
            &[],
        )
        .unwrap();
    assert!(first > start, "a commit makes a revision");
    assert_eq!(e.revision().unwrap(), first);
    assert_eq!(e.get(Tree::Vees, b"v1").unwrap().as_deref(), Some(&b"one"[..]));
    assert_eq!(e.get(Tree::Services, b"s1").unwrap(), None, "a later write of the same key wins");
    // Trees are apart and in key order.
    let mut seen = Vec::new();
    e.scan(Tree::Vees, &mut |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, [(b"v1".to_vec(), b"one".to_vec()), (b"v2".to_vec(), b"two".to_vec())]);
    let stop = e.scan(Tree::Vees, &mut |_, _| anyhow::bail!("enough"));
    assert!(stop.is_err());
    assert!(e.insert_new(Tree::Meta, b"n", b"1".to_vec()).unwrap());
    assert!(!e.insert_new(Tree::Meta, b"n", b"2".to_vec()).unwrap());
    assert_eq!(e.get(Tree::Meta, b"n").unwrap().as_deref(), Some(&b"1"[..]));
    let (a, b) = (e.next_id().unwrap(), e.next_id().unwrap());
    assert!(b > a);
    keeps_conditions(e, first);
    reads_and_removes_pages(e);
}

/// A page of a tree from a key, the last keys backwards, the count, and
/// the removal of the keys before one (the event log's reads and
/// retention), on a tree no other tree's keys leak into.
fn reads_and_removes_pages(e: &dyn Engine) {
    let key = |i: u64| i.to_be_bytes().to_vec();
    let writes = (1..=5).map(|i| (Tree::Events, key(i), Some(vec![i as u8]))).collect();
    e.commit(writes, &[]).unwrap();
    e.commit(vec![(Tree::Fenced, key(9), Some(vec![9]))], &[]).unwrap();
    let read = |scan: &dyn Fn(crate::store::Visit) -> crate::store::Result<()>| {
        let mut seen = Vec::new();
        scan(&mut |_, v| {
            seen.push(v[0]);
            Ok(())
        })
        .unwrap();
        seen
    };
    assert_eq!(
        read(&|f| e.scan_from(Tree::Events, &key(2), 3, f)),
        [2, 3, 4],
        "from a key, at most limit"
    );
    assert_eq!(read(&|f| e.scan_from(Tree::Events, &key(4), 10, f)), [4, 5], "to the tree's end");
    assert_eq!(read(&|f| e.scan_from(Tree::Events, b"", 0, f)), Vec::<u8>::new());
    assert_eq!(read(&|f| e.scan_back(Tree::Events, 2, f)), [5, 4], "the last first");
    assert_eq!(read(&|f| e.scan_back(Tree::Events, 10, f)), [5, 4, 3, 2, 1]);
    assert_eq!(e.count(Tree::Events).unwrap(), 5);
    let before = e.revision().unwrap();
    let removed = e.remove_before(Tree::Events, &key(3)).unwrap();
    assert!(removed > before, "a removal is a commit");
    assert_eq!(read(&|f| e.scan(Tree::Events, f)), [3, 4, 5], "the keys before it removed");
    assert_eq!(e.count(Tree::Events).unwrap(), 3);
    assert_eq!(
        e.get(Tree::Fenced, &key(9)).unwrap().as_deref(),
        Some(&[9u8][..]),
        "other trees untouched"
    );
    e.remove_before(Tree::Events, &key(6)).unwrap();
    assert_eq!(e.count(Tree::Events).unwrap(), 0);
    e.commit(vec![(Tree::Fenced, key(9), None)], &[]).unwrap();
}

/// Commits conditioned on what was read (compare-and-swap): a key
/// written after the revision its writer read it at refuses the whole
/// commit; a key not written since lets it through.
fn keeps_conditions(e: &dyn Engine, first: Revision) {
    let unchanged = |t: Tree, key: &[u8], since: Revision| Unchanged {
        tree: t,
        key: key.to_vec(),
        since,
        existed: e.get(t, key).unwrap().is_some(),
    };
    let put = |t: Tree, key: &[u8], v: &[u8]| (t, key.to_vec(), Some(v.to_vec()));
    // insert_new above was a commit of its own, after `first`.
    let read_at = e.revision().unwrap();
    assert!(read_at > first);
    let other = e.commit(vec![put(Tree::Vees, b"v1", b"theirs")], &[]).unwrap();
    assert!(other > read_at, "every commit makes a higher revision");
    let stale = e.commit(
        vec![put(Tree::Vees, b"v1", b"mine"), put(Tree::Services, b"s9", b"new")],
        &[unchanged(Tree::Vees, b"v1", read_at)],
    );
    let conflict = stale.unwrap_err();
    assert_eq!(
        match &conflict {
            crate::store::StoreError::Conflict(c) => Some(c),
            _ => None,
        },
        Some(&Conflict {
            tree: Tree::Vees,
            key: "v1".into(),
            since: read_at,
            written: other
        })
    );
    assert_eq!(
        e.get(Tree::Vees, b"v1").unwrap().as_deref(),
        Some(&b"theirs"[..]),
        "nothing written"
    );
    assert_eq!(e.get(Tree::Services, b"s9").unwrap(), None, "nothing of the commit written");
    assert_eq!(e.revision().unwrap(), other, "no revision made");
    // Read again at `other`: the commit goes through; so does one on a
    // key never written (since 0) and one on a key another commit left
    // alone.
    let mine = e
        .commit(
            vec![put(Tree::Vees, b"v1", b"mine")],
            &[
                unchanged(Tree::Vees, b"v1", other),
                unchanged(Tree::Vees, b"never", 0),
                unchanged(Tree::Vees, b"v2", first),
            ],
        )
        .unwrap();
    assert_eq!(e.get(Tree::Vees, b"v1").unwrap().as_deref(), Some(&b"mine"[..]));
    // A removal is a write; so is a key written by insert_new.
    let v2_read = unchanged(Tree::Vees, b"v2", mine);
    e.commit(vec![(Tree::Vees, b"v2".to_vec(), None)], &[]).unwrap();
    assert!(e.commit(vec![], &[v2_read]).is_err(), "removed after it was read");
    assert!(
        e.commit(vec![], &[unchanged(Tree::Meta, b"n", first)]).is_err(),
        "inserted after it was read"
    );
    assert!(e.commit(vec![], &[unchanged(Tree::Meta, b"n", e.revision().unwrap())]).is_ok());
}

use super::*;

/// `chunks` as a part: its bytes and its index (and the index's ID).
fn part(chunks: &[&[u8]]) -> (Vec<u8>, ChunkIndex, BlobId) {
    let index = ChunkIndex::of("application/octet-stream", chunks);
    let id = BlobId::of(&index.to_bytes());
    (chunks.concat(), index, id)
}

fn kept(cache: &Arc<ChunkCache>, dir: &Path, data: &[u8], key: &str, index: &ChunkIndex, id: &BlobId) {
    let file = dir.join(format!("{key}.state"));
    std::fs::write(&file, data).unwrap();
    cache.stage(&file, true).unwrap().commit(key, id, index).unwrap();
    assert!(!file.exists(), "an adopted file is moved, not copied");
}

#[test]
fn an_adopted_part_is_read_whole_and_by_chunk_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("chunks");
    let cache = Arc::new(ChunkCache::open(&cdir, 1 << 20).unwrap());
    let (a, b) = (vec![1u8; 5000], vec![2u8; 3000]);
    let (data, index, id) = part(&[&a, &b]);
    kept(&cache, dir.path(), &data, "vee-1-memory", &index, &id);
    assert_eq!(std::fs::read(cache.whole(&id).unwrap()).unwrap(), data);
    assert_eq!(cache.get(&BlobId::of(&b)).unwrap(), b);
    // A part of the wrong size is refused, and nothing is kept of it.
    let file = dir.path().join("short");
    std::fs::write(&file, &data[..100]).unwrap();
    assert!(cache.stage(&file, false).unwrap().commit("vee-2-memory", &id, &index).is_err());
    assert!(file.exists(), "a linked file stays where it was");
    assert_eq!(std::fs::read_dir(&cdir).unwrap().count(), 2, "nothing is kept of a refused part");
    // A restart finds the part; interrupted writes are removed.
    drop(cache);
    std::fs::write(cdir.join("7.tmp"), b"half").unwrap();
    std::fs::write(cdir.join("8.part"), b"no metadata").unwrap();
    std::fs::write(cdir.join("9.json"), b"{}").unwrap();
    let again = Arc::new(ChunkCache::open(&cdir, 1 << 20).unwrap());
    assert_eq!(std::fs::read(again.whole(&id).unwrap()).unwrap(), data);
    for f in ["7.tmp", "8.part", "9.json"] {
        assert!(!cdir.join(f).exists(), "{f} left behind");
    }
    // A part changed on disk is not used for its chunks, and goes.
    let path = again.whole(&id).unwrap();
    std::fs::write(&path, vec![9u8; data.len()]).unwrap();
    assert_eq!(again.get(&BlobId::of(&a)), None);
    assert!(again.whole(&id).is_none() && !path.exists());
}

#[test]
fn a_newer_part_of_a_vee_supersedes_the_older_and_its_chunks_stay_readable() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ChunkCache::open(&dir.path().join("chunks"), 1 << 20).unwrap());
    let (a, b, c) = (vec![1u8; 4096], vec![2u8; 4096], vec![3u8; 4096]);
    let (d1, i1, id1) = part(&[&a, &b]);
    let (d2, i2, id2) = part(&[&a, &c]);
    kept(&cache, dir.path(), &d1, "vee-1-memory", &i1, &id1);
    kept(&cache, dir.path(), &d2, "vee-1-memory", &i2, &id2);
    assert!(cache.whole(&id1).is_none(), "the older part of the key is gone");
    assert!(cache.whole(&id2).is_some());
    assert_eq!(cache.get(&BlobId::of(&a)).unwrap(), a, "a shared chunk is read from the newer part");
    assert!(!cache.has(&BlobId::of(&b)));
    // Another VEE's part is kept beside them; forgetting one keeps the other's
    // chunks readable where it holds them.
    let (d3, i3, id3) = part(&[&c]);
    kept(&cache, dir.path(), &d3, "vee-2-memory", &i3, &id3);
    cache.forget(&id2);
    assert_eq!(cache.get(&BlobId::of(&c)).unwrap(), c);
    assert!(!cache.has(&BlobId::of(&a)));
}

#[test]
fn the_least_recently_used_part_goes_first() {
    let dir = tempfile::tempdir().unwrap();
    // Parts of 16 KiB of non-zero bytes (no holes), a limit of 40 KiB.
    let cache = Arc::new(ChunkCache::open(&dir.path().join("chunks"), 40 << 10).unwrap());
    let chunks: Vec<Vec<u8>> = (1..=3u8).map(|i| vec![i; 16 << 10]).collect();
    let parts: Vec<_> = chunks.iter().map(|c| part(&[c])).collect();
    for (i, (d, index, id)) in parts.iter().enumerate().take(2) {
        kept(&cache, dir.path(), d, &format!("vee-{i}-memory"), index, id);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(cache.whole(&parts[0].2).is_some()); // the first used after the second
    std::thread::sleep(std::time::Duration::from_millis(5));
    let (d, index, id) = &parts[2];
    kept(&cache, dir.path(), d, "vee-2-memory", index, id);
    assert!(cache.whole(&parts[0].2).is_some() && cache.whole(&parts[1].2).is_none() && cache.whole(id).is_some());
    assert!(cache.size() <= 40 << 10, "{} bytes held", cache.size());
}

#[test]
fn a_written_part_is_kept_only_when_every_chunk_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let cdir = dir.path().join("chunks");
    let cache = Arc::new(ChunkCache::open(&cdir, 1 << 20).unwrap());
    let (a, zeros, c) = (vec![1u8; 3000], vec![0u8; 65536], vec![3u8; 2000]);
    let (data, index, id) = part(&[&a, &zeros, &c]);
    // Out of order, one twice; one chunk never given: nothing is kept.
    let w = cache.writer("vee-1-disk").unwrap();
    w.put(68536, &c);
    w.put(0, &a);
    assert!(w.finish(&id, &index).is_err());
    drop(w);
    assert!(cache.whole(&id).is_none());
    assert_eq!(std::fs::read_dir(&cdir).unwrap().count(), 0, "a part given up leaves no file");
    // All given: the part is the file, its zeros a hole.
    let w = cache.writer("vee-1-disk").unwrap();
    for (o, d) in [(68536, &c), (0, &a), (3000, &zeros), (0, &a)] {
        w.put(o, d);
    }
    w.finish(&id, &index).unwrap();
    drop(w);
    let path = cache.whole(&id).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), data);
    assert!(std::fs::metadata(&path).unwrap().blocks() * 512 <= 16384, "the zeros are a hole");
}

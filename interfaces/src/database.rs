//! Opening the sled databases of the daemons (the VEEM's state, the image
//! repository's metadata) the same way everywhere.

use std::path::Path;
use std::time::Duration;

/// Opens the sled database at `path` with a page cache of `cache_mib` MiB and
/// without sled's background flusher: every writer flushes its own writes,
/// so a dropped database is not kept alive by a flusher thread.
///
/// sled's I/O worker threads may still hold a database that this process
/// has just dropped for a few milliseconds, so a held lock is retried for up
/// to 2 s. Errors: sled cannot open the database, or another process holds
/// it for longer than that.
pub fn open_database(path: &Path, cache_mib: u64) -> sled::Result<sled::Db> {
    let config = sled::Config::new().path(path).flush_every_ms(None).cache_capacity(cache_mib << 20);
    let mut tries = 0;
    loop {
        match config.open() {
            // sled reports a held lock as an `Other` I/O error with this text.
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Closes `db`, opened at `path`, so that its next open starts from a
/// snapshot of its state now: flushed, dropped, then opened once more and
/// dropped at once. sled 0.34 writes its snapshot (the page table at a
/// log position) only when it opens a database, and an open replays the
/// log written since the last one: after a long run that is most of the
/// file (about 1 s at the VEEM's 600 MiB of 100,000 VEEs), paid here, at
/// the stop, instead of at the next start. Every other handle of `db` (its
/// trees) must be dropped first. Errors: the flush, or the reopen (another
/// handle still holds the database after 2 s).
pub fn close_database(db: sled::Db, path: &Path) -> sled::Result<()> {
    db.flush()?;
    drop(db);
    drop(open_database(path, 1)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopens_at_once_after_drop_and_keeps_flushed_writes() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..20u32 {
            let db = open_database(dir.path(), 8).unwrap();
            if i > 0 {
                assert_eq!(db.get("n").unwrap().unwrap().as_ref(), (i - 1).to_be_bytes());
            }
            db.insert("n", &i.to_be_bytes()).unwrap();
            db.flush().unwrap();
        }
    }

    /// The log positions of the snapshots sled keeps beside `dir`'s
    /// database (`snap.<LSN in hex>`).
    fn snapshots(dir: &Path) -> Vec<u64> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().ok()?;
                u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok()
            })
            .collect()
    }

    #[test]
    fn a_closed_database_keeps_a_snapshot_of_its_last_writes() {
        let dir = tempfile::tempdir().unwrap();
        let db = open_database(dir.path(), 8).unwrap();
        for i in 0..5_000u32 {
            db.insert(i.to_be_bytes(), vec![7u8; 100]).unwrap();
        }
        let before = snapshots(dir.path()).into_iter().max().unwrap_or(0);
        close_database(db, dir.path()).unwrap();
        let after = snapshots(dir.path()).into_iter().max().unwrap_or(0);
        // 500 KB written since the open's snapshot: the next open need not
        // replay them.
        assert!(after > before + 500_000, "snapshot at {after:#x}, the open's at {before:#x}");
        let db = open_database(dir.path(), 8).unwrap();
        assert_eq!(db.len(), 5_000);
    }

    #[test]
    fn a_database_held_open_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let _held = open_database(dir.path(), 8).unwrap();
        let err = open_database(dir.path(), 8).unwrap_err().to_string();
        assert!(err.contains("could not acquire lock"), "{err}");
    }
}

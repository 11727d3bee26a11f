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

    #[test]
    fn a_database_held_open_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let _held = open_database(dir.path(), 8).unwrap();
        let err = open_database(dir.path(), 8).unwrap_err().to_string();
        assert!(err.contains("could not acquire lock"), "{err}");
    }
}

//! Room held atomically with the writes (issue 13, R7; issue 39): an
//! upload holds its bytes before it writes them, against the quota
//! (`max_size`) and against the free space of the data disk less its
//! reserve. Uploads side by side cannot each find the same room: the sum
//! of what is stored and what uploads hold never exceeds the quota, and
//! the bytes uploads have promised but not yet received never exceed the
//! free space less the reserve (ten uploads side by side ate 2.5 MB past
//! the reserve before issue 39).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What the uploads under way hold, all together.
#[derive(Debug, Default)]
pub struct Quota {
    totals: Arc<Mutex<Totals>>,
}

#[derive(Debug, Default)]
struct Totals {
    /// Bytes held (promised) by all uploads under way.
    held: u64,
    /// Each upload's bytes held and the file they go to: what of them is
    /// not in the file yet is still to come out of the free space.
    uploads: HashMap<u64, (u64, PathBuf)>,
    next: u64,
}

impl Totals {
    /// Bytes held by uploads and not yet in their files (which the free
    /// space of the disk already counts).
    fn pending(&self) -> u64 {
        let on_disk = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        self.uploads.values().map(|(held, path)| held.saturating_sub(on_disk(path))).sum()
    }
}

/// Bytes an upload holds; given back when dropped (once the upload is
/// stored, its bytes count as stored, or it failed). Owned, so that an
/// OCI upload session keeps it between its requests.
#[derive(Debug)]
pub struct Reservation {
    totals: Arc<Mutex<Totals>>,
    id: u64,
    bytes: u64,
}

/// The limits a reservation grows within.
pub struct Room<'a> {
    /// The quota, if any: most bytes stored and held together.
    pub max: Option<u64>,
    /// Bytes stored now (read under the lock).
    pub stored: &'a (dyn Fn() -> u64 + Sync),
    /// Free bytes on the data disk less the reserve, now.
    pub disk: &'a (dyn Fn() -> u64 + Sync),
}

impl Quota {
    /// An empty reservation of an upload written to `file`.
    pub fn start(&self, file: &Path) -> Reservation {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let id = t.next;
        t.next += 1;
        t.uploads.insert(id, (0, file.to_path_buf()));
        Reservation {
            totals: self.totals.clone(),
            id,
            bytes: 0,
        }
    }
}

impl Reservation {
    /// Holds `more` bytes in addition if they fit `room`: within the quota
    /// (stored + held + `more`), and on the disk (what uploads hold and
    /// have not received yet, plus `more`, within its free space less the
    /// reserve). Errors: which room is lacking, for the 507 message.
    pub fn grow(&mut self, more: u64, room: &Room<'_>) -> Result<(), String> {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(max) = room.max {
            let stored = (room.stored)();
            if stored.saturating_add(t.held).saturating_add(more) > max {
                return Err(format!(
                    "quota of {max} bytes with {stored} stored and {} held by uploads under way",
                    t.held
                ));
            }
        }
        let pending = t.pending();
        let disk = (room.disk)();
        if pending.saturating_add(more) > disk {
            return Err(format!(
                "{disk} bytes free on the data disk beyond its reserve, {pending} of them promised to uploads under way"
            ));
        }
        t.held += more;
        if let Some(u) = t.uploads.get_mut(&self.id) {
            u.0 += more;
        }
        self.bytes += more;
        Ok(())
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut t = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        t.held -= self.bytes;
        t.uploads.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_side_by_side_share_the_quota_and_give_it_back() {
        let q = Quota::default();
        let (stored, disk) = (|| 100, || u64::MAX);
        let room = Room {
            max: Some(1000),
            stored: &stored,
            disk: &disk,
        };
        let (pa, pb) = (Path::new("/nonexistent/a"), Path::new("/nonexistent/b"));
        let mut a = q.start(pa);
        let mut b = q.start(pb);
        a.grow(400, &room).unwrap();
        // 100 stored + 400 held: b finds 500 left, not 900.
        let err = b.grow(600, &room).unwrap_err();
        assert!(err.contains("400 held"), "{err}");
        b.grow(500, &room).unwrap();
        drop(a);
        let mut c = q.start(pa);
        c.grow(400, &room).unwrap();
        assert_eq!((b.bytes(), c.bytes()), (500, 400));
    }

    #[test]
    fn uploads_side_by_side_share_the_disk_beyond_its_reserve() {
        let q = Quota::default();
        // The disk's room stays 1000 in this test: the files written
        // stand for bytes the free space already lost.
        let (stored, disk) = (|| 0, || 1000);
        let room = Room {
            max: None,
            stored: &stored,
            disk: &disk,
        };
        let dir = tempfile::tempdir().unwrap();
        let (pa, pb) = (dir.path().join("a"), dir.path().join("b"));
        let mut a = q.start(&pa);
        let mut b = q.start(&pb);
        a.grow(700, &room).unwrap();
        // 700 promised and not in a's file: 300 left for b.
        assert!(b.grow(400, &room).unwrap_err().contains("700 of them promised"));
        // Once a's bytes are in its file the free space counts them.
        std::fs::write(&pa, vec![0u8; 700]).unwrap();
        b.grow(400, &room).unwrap();
        drop((a, b));
        let mut c = q.start(&pa);
        c.grow(1000, &room).unwrap();
    }
}

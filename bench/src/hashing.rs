//! SHA-256 throughput of the two implementations the project could use for
//! blob IDs: the `sha2` crate (production: `interfaces::repo_client::sink`,
//! with its SHA-NI/AVX2 paths chosen at run time) and `ring` (used before),
//! next to coreutils' `sha256sum` over the same bytes in a file (page
//! cache), all in the same run.

use std::io::Write;
use std::process::Command;
use std::time::Instant;

use sha2::Digest;

use crate::metric::{metric, ms};

/// Bytes fed per update, as the sink receives them from the network (1 MiB).
const CHUNK: usize = 1 << 20;

/// The seconds of each of `reps` runs of `f`, and its digest.
fn time_reps(reps: usize, mut f: impl FnMut() -> [u8; 32]) -> (Vec<f64>, [u8; 32]) {
    let mut times = Vec::with_capacity(reps);
    let mut digest = [0; 32];
    for _ in 0..reps {
        let t = Instant::now();
        digest = f();
        times.push(t.elapsed().as_secs_f64());
    }
    (times, digest)
}

/// Hashes `mib` MiB of pseudo-random bytes `reps` times with each
/// implementation; returns two named metrics ([`crate::metric`], ms)
/// against `sha256sum`. Errors: the work file cannot be written, `sha256sum` fails,
/// or the digests differ.
pub fn run(mib: usize, reps: usize) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut data = vec![0u8; mib * CHUNK];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
    }
    let (sha2_s, sha2_d) = time_reps(reps, || {
        let mut h = sha2::Sha256::new();
        data.chunks(CHUNK).for_each(|c| h.update(c));
        h.finalize().into()
    });
    let (ring_s, ring_d) = time_reps(reps, || {
        let mut h = ring::digest::Context::new(&ring::digest::SHA256);
        data.chunks(CHUNK).for_each(|c| h.update(c));
        h.finish().as_ref().try_into().expect("32 bytes")
    });
    anyhow::ensure!(sha2_d == ring_d, "sha2 and ring disagree");
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("blob");
    std::fs::File::create(&path)?.write_all(&data)?;
    let mut out = String::new();
    let (tool_s, _) = time_reps(reps, || {
        let o = Command::new("sha256sum").arg(&path).output().expect("sha256sum runs");
        out = String::from_utf8_lossy(&o.stdout).into_owned();
        [0; 32]
    });
    let hex: String = sha2_d.iter().map(|b| format!("{b:02x}")).collect();
    anyhow::ensure!(out.starts_with(&hex), "sha256sum says {out}, sha2 {hex}");
    let tool = ms(&tool_s);
    let row = |name: &str, what: String, ours: &[f64]| {
        metric(
            &format!("{name}_{mib}mib"),
            "ms",
            &what,
            &ms(ours),
            Some(("sha256sum (file in page cache)", &tool)),
        )
    };
    Ok(vec![
        row("sha256_sha2_ms", format!("SHA-256 of {mib} MiB, sha2 (production)"), &sha2_s),
        row("sha256_ring_ms", format!("SHA-256 of {mib} MiB, ring (before)"), &ring_s),
    ])
}

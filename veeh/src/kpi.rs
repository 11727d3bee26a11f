//! KPIs from inside a VEE (issue 40, item 3; E §4.4: KPIs only the
//! service knows, measured wherever the VEE runs). The guest writes lines
//! `NAME VALUE` (`active_sessions 12`) to a dedicated virtio-serial port,
//! [`KPI_CHANNEL`] (`/dev/virtio-ports/org.vee.kpi.0` in the guest); the
//! VEEH reads the channel through libvirt (`virDomainOpenChannel`, a
//! stream: no socket path, the same over a remote libvirtd) and hands the
//! latest value of each name to the VEEM with the VEE's Stats.
//!
//! A dedicated channel rather than the guest agent's: the agent's channel
//! is the host's way into the guest (commands, `guest-exec`), which a KPI
//! report does not need and which a VEE's owner may disable; this one
//! carries data one way, out of the guest, with no path from the guest to
//! any network or to the control plane.
//!
//! The guest is not trusted: a line longer than [`MAX_LINE`] bytes is
//! dropped whole; a name must be `[a-z][a-z0-9_]*` (at most 63 bytes) and
//! a value a finite number, else the line is dropped; at most
//! [`MAX_NAMES`] names are kept per VEE; at most [`MAX_LINES_PER_S`] lines a
//! second are read (the reader waits, so a flooding guest blocks on its
//! own writes); values older than [`FRESH`] are not reported.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use interfaces::manifest::elasticity::is_kpi_name;

pub use crate::domain_xml::KPI_CHANNEL;
/// The longest line read, in bytes.
pub const MAX_LINE: usize = 256;
/// The most KPI names kept per VEE.
pub const MAX_NAMES: usize = 16;
/// The most lines a second read per VEE.
pub const MAX_LINES_PER_S: u32 = 20;
/// How long a value is reported after it was read.
pub const FRESH: Duration = Duration::from_secs(60);
/// How long after a reader could not open a VEE's channel (a domain
/// defined before the channel existed) it is tried again.
const RETRY: Duration = Duration::from_secs(60);

/// A KPI read: its value and when (ms since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    pub value: f64,
    pub at_ms: i64,
}

/// Lines of one VEE's channel as they come, in pieces: the KPIs they
/// give, within the limits of the module documentation.
#[derive(Default)]
pub struct Parser {
    line: Vec<u8>,
    /// The current line is too long: dropped up to its newline.
    skipping: bool,
    /// Lines dropped (too long, malformed, a name too many).
    pub dropped: u64,
}

impl Parser {
    /// Feeds `bytes`; each complete line's KPI goes into `into` at `at_ms`.
    pub fn feed(&mut self, bytes: &[u8], at_ms: i64, into: &mut BTreeMap<String, Reading>) -> u32 {
        let mut lines = 0;
        for &b in bytes {
            if b != b'\n' {
                if self.line.len() >= MAX_LINE {
                    self.skipping = true;
                    self.line.clear();
                }
                if !self.skipping {
                    self.line.push(b);
                }
                continue;
            }
            lines += 1;
            let line = std::mem::take(&mut self.line);
            if std::mem::take(&mut self.skipping) {
                self.dropped += 1;
                continue;
            }
            match parse(&line) {
                Some((name, value)) if into.contains_key(&name) || into.len() < MAX_NAMES => {
                    into.insert(name, Reading { value, at_ms });
                }
                _ => self.dropped += 1,
            }
        }
        lines
    }
}

/// `NAME VALUE` (surrounding blanks and a `\r` allowed).
fn parse(line: &[u8]) -> Option<(String, f64)> {
    let text = std::str::from_utf8(line).ok()?.trim();
    let (name, value) = text.split_once(char::is_whitespace)?;
    let value: f64 = value.trim().parse().ok()?;
    (is_kpi_name(name) && value.is_finite()).then(|| (name.to_string(), value))
}

/// One VEE's KPIs and its reader.
#[derive(Default)]
struct VeeKpis {
    readings: BTreeMap<String, Reading>,
    /// A reader thread holds the channel.
    reading: bool,
    /// When the channel last could not be opened.
    failed_at: Option<Instant>,
}

/// The KPIs of this host's VEEs, each read by a thread of its own.
#[derive(Default)]
pub struct Kpis {
    by_vee: Mutex<HashMap<String, VeeKpis>>,
}

impl Kpis {
    /// The fresh KPIs of `vee_id` now (`now_ms`), starting its reader on
    /// libvirt `uri` when none holds its channel.
    pub fn report(self: &Arc<Self>, uri: &str, vee_id: &str, now_ms: i64) -> Vec<(String, Reading)> {
        let mut all = self.by_vee.lock().unwrap();
        let k = all.entry(vee_id.to_string()).or_default();
        let retry = k.failed_at.is_none_or(|t| t.elapsed() >= RETRY);
        if !k.reading && retry {
            k.reading = true;
            let (this, uri, id) = (self.clone(), uri.to_string(), vee_id.to_string());
            std::thread::Builder::new()
                .name(format!("kpi-{}", &id[..id.len().min(8)]))
                .spawn(move || this.read(&uri, &id))
                .map_err(|e| tracing::warn!(vee = %vee_id, error = %e, "no KPI reader"))
                .ok();
        }
        let fresh = now_ms - FRESH.as_millis() as i64;
        k.readings
            .iter()
            .filter(|(_, r)| r.at_ms >= fresh)
            .map(|(n, r)| (n.clone(), *r))
            .collect()
    }

    /// The reader: holds the channel until it closes (the domain stopped,
    /// moved or was destroyed), within the line rate.
    fn read(&self, uri: &str, vee_id: &str) {
        let opened = open(uri, vee_id);
        let (conn, stream) = match opened {
            Ok(cs) => cs,
            Err(e) => {
                tracing::info!(vee = %vee_id, error = %format!("{e:#}"), "KPI channel not opened; tried again in a minute");
                if let Some(k) = self.by_vee.lock().unwrap().get_mut(vee_id) {
                    k.reading = false;
                    k.failed_at = Some(Instant::now());
                }
                return;
            }
        };
        tracing::info!(vee = %vee_id, "reading the guest's KPI channel");
        let mut parser = Parser::default();
        let mut buf = [0u8; 1024];
        let (mut second, mut lines) = (Instant::now(), 0u32);
        loop {
            // A small read keeps a flood's lines within the rate.
            let n = match stream.recv(&mut buf[..128]) {
                Ok(n) if n > 0 => n as usize,
                _ => break,
            };
            let now = chrono::Utc::now().timestamp_millis();
            lines += {
                let mut all = self.by_vee.lock().unwrap();
                parser.feed(&buf[..n], now, &mut all.entry(vee_id.to_string()).or_default().readings)
            };
            if lines >= MAX_LINES_PER_S {
                let rest = Duration::from_secs(1).saturating_sub(second.elapsed());
                std::thread::sleep(rest);
                (second, lines) = (Instant::now(), 0);
            } else if second.elapsed() >= Duration::from_secs(1) {
                (second, lines) = (Instant::now(), 0);
            }
        }
        if parser.dropped > 0 {
            tracing::info!(vee = %vee_id, dropped = parser.dropped, "KPI lines dropped (too long, malformed or a name too many)");
        }
        let _ = stream.abort();
        // Closing a connection to a daemon that went away may fail, and
        // virt's Drop panics on that.
        std::mem::forget(conn);
        if let Some(k) = self.by_vee.lock().unwrap().get_mut(vee_id) {
            k.reading = false;
        }
    }
}

/// A connection of its own and the VEE's KPI channel opened on it.
fn open(uri: &str, vee_id: &str) -> anyhow::Result<(virt::connect::Connect, virt::stream::Stream)> {
    let conn = virt::connect::Connect::open(Some(uri))?;
    let opened = (|| -> anyhow::Result<virt::stream::Stream> {
        let dom = conn.lookup_domain_by_name(&crate::domain_xml::domain_name(vee_id))?;
        let stream = virt::stream::Stream::new(&conn, 0)?;
        dom.open_channel(Some(KPI_CHANNEL), &stream, virt::sys::VIR_DOMAIN_CHANNEL_FORCE)?;
        Ok(stream)
    })();
    match opened {
        Ok(stream) => Ok((conn, stream)),
        Err(e) => {
            std::mem::forget(conn);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_kpis_within_the_limits() {
        let mut p = Parser::default();
        let mut into = BTreeMap::new();
        // Pieces of lines, a CR, blanks.
        assert_eq!(p.feed(b"active_sess", 1, &mut into), 0);
        assert_eq!(p.feed(b"ions 12\r\nqueue_length  3.5 \n", 2, &mut into), 2);
        assert_eq!(into["active_sessions"], Reading { value: 12.0, at_ms: 2 });
        assert_eq!(into["queue_length"].value, 3.5);
        // Dropped: bad names, values not finite or not numbers, no value.
        p.feed(
            b"Bad 1\nx-y 1\nnan_kpi NaN\ninf_kpi inf\nword abc\nlonely\n\xff\xfe 1\n",
            3,
            &mut into,
        );
        assert_eq!(into.len(), 2);
        assert_eq!(p.dropped, 7);
        // A line over MAX_LINE bytes goes whole; the next line counts.
        let mut long = vec![b'a'; MAX_LINE + 10];
        long.extend_from_slice(b" 1\nqueue_length 4\n");
        p.feed(&long, 4, &mut into);
        assert_eq!((p.dropped, into["queue_length"].value), (8, 4.0));
        // At most MAX_NAMES names; known ones go on updating.
        for i in 0..40 {
            p.feed(format!("k{i} {i}\n").as_bytes(), 5, &mut into);
        }
        assert_eq!(into.len(), MAX_NAMES);
        p.feed(b"active_sessions 13\n", 6, &mut into);
        assert_eq!(into["active_sessions"].value, 13.0);
    }
}

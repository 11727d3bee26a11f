//! A VEE's serial console attached (VHI AttachConsole): libvirt's
//! `virDomainOpenConsole` on the domain's pty (its serial port, logged to
//! the console file as well: `domain_xml`), on a libvirt connection of
//! the session's own. Two threads pump it, as libvirt's streams block:
//! one reads what the guest writes and hands it to the caller, one writes
//! what the caller types. The session ends when the guest's side closes
//! (the domain stopped or migrated away: libvirt ends the stream), when
//! the caller's side ends, or when the caller stops reading.

use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use virt::connect::Connect;
use virt::stream::Stream;

use crate::error::{HostError, NoDomain};

/// Bytes of one request's `data` at most (64 KiB).
pub const MAX_INPUT: usize = 64 * 1024;

/// Bytes read from the console at a time.
const READ_CHUNK: usize = 4096;

/// An attached console: what the guest writes comes on `output` (ends
/// when the session does); what is sent on `input` is typed into the
/// guest (dropping it ends the session).
pub struct Session {
    pub output: mpsc::Receiver<Vec<u8>>,
    pub input: mpsc::Sender<Vec<u8>>,
}

/// Attaches to the console of `vee_id`'s domain at libvirt `uri`, which
/// VEEH `owner` must own; `force` takes it from a session that holds it.
/// Blocking (libvirt). Errors: [`NoDomain`] without our domain,
/// [`HostError::ConsoleBusy`] while another session holds it, libvirt's
/// error else.
pub fn attach(uri: &str, owner: &str, vee_id: &str, force: bool) -> Result<Session> {
    let conn = Connect::open(Some(uri)).with_context(|| format!("libvirt {uri}"))?;
    let opened = open(&conn, owner, vee_id, force);
    let stream = match opened {
        Ok(s) => Arc::new(s),
        Err(e) => {
            close(conn);
            return Err(e);
        }
    };
    let (out_tx, output) = mpsc::channel::<Vec<u8>>(64);
    let (input, mut in_rx) = mpsc::channel::<Vec<u8>>(64);
    let reader = {
        let stream = stream.clone();
        std::thread::Builder::new().name("console-out".into()).spawn(move || {
            let mut buf = vec![0u8; READ_CHUNK];
            loop {
                match stream.recv(&mut buf) {
                    Ok(n) if n > 0 => {
                        if out_tx.blocking_send(buf[..n as usize].to_vec()).is_err() {
                            break;
                        }
                    }
                    _ => break,
                }
            }
        })?
    };
    let vee = vee_id.to_string();
    std::thread::Builder::new().name("console-in".into()).spawn(move || {
        while let Some(data) = in_rx.blocking_recv() {
            if !send_all(&stream, &data) {
                break;
            }
        }
        // The caller left (or the guest's side closed): the stream is
        // aborted, which ends the reader's wait.
        let _ = Stream::clone(&stream).abort();
        let _ = reader.join();
        drop(stream);
        close(conn);
        tracing::info!(vee = %vee, "console detached");
    })?;
    Ok(Session { output, input })
}

/// Sends all of `data`; false when the stream failed.
fn send_all(stream: &Stream, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        match stream.send(data) {
            Ok(n) if n > 0 => data = &data[n as usize..],
            _ => return false,
        }
    }
    true
}

/// The console stream of our domain of `vee_id` on `conn`.
fn open(conn: &Connect, owner: &str, vee_id: &str, force: bool) -> Result<Stream> {
    let name = crate::domain_xml::domain_name(vee_id);
    let no_domain = || NoDomain {
        vee_id: vee_id.to_string(),
        domain: name.clone(),
        owner: owner.to_string(),
        uri: conn.uri().unwrap_or_default(),
    };
    let dom = conn.lookup_domain_by_name(&name).map_err(|_| no_domain())?;
    let ours = dom
        .xml_desc(0)
        .ok()
        .and_then(|xml| crate::domain_xml::ownership(&xml))
        .is_some_and(|o| o.owner == owner);
    if !ours {
        return Err(no_domain().into());
    }
    let stream = Stream::new(conn, 0)?;
    let mut flags = virt::sys::VIR_DOMAIN_CONSOLE_SAFE;
    if force {
        flags |= virt::sys::VIR_DOMAIN_CONSOLE_FORCE;
    }
    if let Err(e) = dom.open_console(None, &stream, flags) {
        let _ = stream.abort();
        if e.message().contains("Active console session") {
            return Err(HostError::ConsoleBusy(vee_id.to_string()).into());
        }
        return Err(anyhow::Error::new(e).context(format!("open the console of VEE {vee_id}")));
    }
    tracing::info!(vee = %vee_id, force, "console attached");
    Ok(stream)
}

/// Closes `conn`: a daemon that went away may fail the close, and virt's
/// `Drop` panics on that, so the handle is closed by hand and forgotten.
fn close(conn: Connect) {
    // SAFETY: the pointer is the live connection `conn` owns; `conn` is
    // forgotten right after, so it is not closed a second time.
    unsafe {
        virt::sys::virConnectClose(conn.as_ptr());
    }
    std::mem::forget(conn);
}

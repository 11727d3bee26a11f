//! `veem console VEE`: a VEE's serial console in the terminal (VMI
//! AttachConsole), as `virsh console` gives it: the terminal in raw mode
//! while attached (every key goes to the guest, Ctrl-C included), and
//! `Ctrl-]` to detach. The relay's notices (the VEE moved and the console
//! was attached again) and the end are written to standard error.

use std::io::Write;
use std::os::fd::AsFd;

use anyhow::Result;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::client::VmiServiceClient;
use interfaces::vmi;

/// The byte that detaches: `Ctrl-]` (GS), as `virsh console`'s.
pub const ESCAPE: u8 = 0x1d;

/// How the session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The user typed the escape character (or the input ended).
    Detached,
    /// The VEEM ended the session (the VEE stopped): its last notice.
    Closed(String),
}

/// What the guest may have left the terminal in (modes, colours, a hidden
/// cursor, the alternate screen) undone when a session ends: DEC's soft
/// terminal reset (DECSTR), the cursor shown, the normal screen.
pub const SOFT_RESET: &[u8] = b"\x1b[!p\x1b[?25h\x1b[?1049l";

/// A relay notice as shown: its control characters (escape sequences a
/// peer or host could slip in) dropped, at most 256 characters.
fn shown_notice(notice: &str) -> String {
    notice.chars().filter(|c| !c.is_control()).take(256).collect()
}

/// Attaches to VEE `vee_id`'s console (`force`: take it from another
/// session) until [`ESCAPE`] comes on `input` or the session ends: what
/// is typed goes to the guest up to the escape, what the guest writes to
/// `out`, notices to `err`; at the end, [`SOFT_RESET`] to `out`. Errors:
/// the VEEM's refusal (NotFound, the VEE does not run, another session
/// holds the console).
pub async fn session(
    c: &mut VmiServiceClient,
    vee_id: &str,
    force: bool,
    input: impl AsyncRead + Unpin + Send + 'static,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Ended> {
    let ended = relay(c, vee_id, force, input, out, err).await;
    // Also after an error: the guest may have written before it.
    let _ = out.write_all(SOFT_RESET).and_then(|()| out.flush());
    ended
}

async fn relay(
    c: &mut VmiServiceClient,
    vee_id: &str,
    force: bool,
    mut input: impl AsyncRead + Unpin + Send + 'static,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Ended> {
    let (keys, typed) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let first = vmi::AttachConsoleRequest {
        vee_id: vee_id.into(),
        force,
        data: vec![],
    };
    let requests = futures::stream::once(async move { first }).chain(tokio_stream::wrappers::ReceiverStream::new(typed).map(|data| {
        vmi::AttachConsoleRequest {
            data,
            ..Default::default()
        }
    }));
    let mut shown = c.attach_console(requests).await?.into_inner();
    write!(err, "Connected to VEE {vee_id} (escape character is ^])\r\n")?;
    err.flush()?;
    // The keyboard: up to the escape character; its end or the escape
    // detaches.
    let (detach_tx, mut detached) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        loop {
            let n = match input.read(&mut buf).await {
                Ok(n) if n > 0 => n,
                _ => break,
            };
            let (data, escaped) = match buf[..n].iter().position(|b| *b == ESCAPE) {
                Some(i) => (&buf[..i], true),
                None => (&buf[..n], false),
            };
            if !data.is_empty() && keys.send(data.to_vec()).await.is_err() {
                break;
            }
            if escaped {
                break;
            }
        }
        let _ = detach_tx.send(());
    });
    let mut last_notice = String::new();
    loop {
        tokio::select! {
            _ = &mut detached => return Ok(Ended::Detached),
            m = shown.next() => match m {
                Some(Ok(m)) if m.notice.is_empty() => {
                    out.write_all(&m.data)?;
                    out.flush()?;
                }
                Some(Ok(m)) => {
                    let notice = shown_notice(&m.notice);
                    write!(err, "\r\n[{notice}]\r\n")?;
                    err.flush()?;
                    last_notice = notice;
                }
                Some(Err(s)) => return Err(s.into()),
                None => return Ok(Ended::Closed(last_notice)),
            },
        }
    }
}

/// The terminal of standard input in raw mode while this lives (nothing
/// when standard input is no terminal), as it was again when dropped.
pub struct RawTerminal(Option<nix::sys::termios::Termios>);

impl RawTerminal {
    pub fn enter() -> Self {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let Ok(saved) = tcgetattr(stdin.as_fd()) else { return Self(None) };
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        match tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw) {
            Ok(()) => Self(Some(saved)),
            Err(_) => Self(None),
        }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin().as_fd(), nix::sys::termios::SetArg::TCSANOW, saved);
        }
    }
}

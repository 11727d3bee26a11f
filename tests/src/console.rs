//! A VEE's serial console as a VMI client attaches to it (AttachConsole):
//! lines typed, and what was shown so far, for the tests to wait on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use interfaces::vmi::AttachConsoleRequest;
use tokio::sync::mpsc;

/// An attached console: what to type, and everything shown so far.
pub struct Console {
    pub keys: mpsc::Sender<AttachConsoleRequest>,
    /// Everything shown so far: the guest's output, and each notice as
    /// a line `[notice: ...]`.
    pub shown: Arc<Mutex<String>>,
}

impl Console {
    /// Attaches to `vee`'s console through `c` (the caller's token).
    pub async fn attach(c: &mut veem::peers::PeerClient, vee: &str) -> Result<Console, tonic::Status> {
        let (keys, rx) = mpsc::channel(16);
        keys.send(AttachConsoleRequest {
            vee_id: vee.into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let requests = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        let mut out = c.attach_console(requests).await?.into_inner();
        let shown = Arc::new(Mutex::new(String::new()));
        let s = shown.clone();
        tokio::spawn(async move {
            while let Some(Ok(m)) = out.next().await {
                let mut s = s.lock().unwrap();
                s.push_str(&String::from_utf8_lossy(&m.data));
                if !m.notice.is_empty() {
                    s.push_str(&format!("\n[notice: {}]\n", m.notice));
                }
            }
        });
        Ok(Console { keys, shown })
    }

    /// Types `line` and Enter (a newline).
    pub async fn type_line(&self, line: &str) {
        let data = format!("{line}\n").into_bytes();
        self.keys
            .send(AttachConsoleRequest {
                data,
                ..Default::default()
            })
            .await
            .unwrap();
    }

    /// Waits (up to `within`) until `what` was shown.
    pub async fn wait_for(&self, what: &str, within: Duration) {
        let start = Instant::now();
        while !self.shown.lock().unwrap().contains(what) {
            assert!(
                start.elapsed() < within,
                "{what:?} not shown in {within:?}; shown:\n{}",
                self.shown.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

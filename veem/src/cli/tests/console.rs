//! `veem console`'s session against the mock VMI (whose console says
//! whose it is and echoes what is typed in upper case): keys go to the
//! guest up to Ctrl-], which detaches without sending itself or what
//! follows; the relay's notices go to standard error.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::mock::{serve, Mock};
use crate::cli::console::{session, Ended, ESCAPE};

/// A writer the test reads while the session writes.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    async fn wait_for(&self, what: &str) {
        for _ in 0..500 {
            if self.text().contains(what) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what:?} never came: {:?}", self.text());
    }
}

#[tokio::test]
async fn keys_go_to_the_guest_until_ctrl_bracket_and_notices_to_stderr() {
    let mock = Arc::new(Mock::default());
    let ep = serve(mock.clone()).await;
    let mut c = crate::cli::connect(
        &ep,
        crate::cli::AuthInterceptor::new(Some("tok-of-acme")).unwrap(),
        None,
        crate::cli::Deadlines {
            request: Duration::from_secs(5),
            probe: Duration::from_secs(2),
        },
    )
    .await
    .unwrap();
    let (mut keyboard, input) = tokio::io::duplex(64);
    let (out, err) = (Shared::default(), Shared::default());
    let (mut o, mut e) = (out.clone(), err.clone());
    let typing = async {
        out.wait_for("console of v1\r\n").await;
        keyboard.write_all(b"ls -l\r").await.unwrap();
        out.wait_for("LS -L\r").await;
        keyboard.write_all(b"migrate\r").await.unwrap();
        err.wait_for("the VEE moved: its console is attached again]").await;
        keyboard.write_all(&[b'x', ESCAPE, b'n', b'o', b't']).await.unwrap();
    };
    let (ended, ()) = tokio::join!(session(&mut c, "v1", true, input, &mut o, &mut e), typing);
    assert_eq!(ended.unwrap(), Ended::Detached);
    // A notice's control characters never reach the terminal, and the
    // terminal is reset after the guest's output.
    assert!(!err.text().contains(['\x1b', '\x07']), "{:?}", err.text());
    assert!(out.text().ends_with(std::str::from_utf8(super::super::console::SOFT_RESET).unwrap()), "{:?}", out.text());
    assert!(
        err.text().starts_with("Connected to VEE v1 (escape character is ^])"),
        "{}",
        err.text()
    );
    assert!(mock.seen.lock().unwrap().contains(&"AttachConsole v1 force=true".to_string()));
    assert_eq!(mock.auth.lock().unwrap().last().unwrap().as_deref(), Some("Bearer tok-of-acme"));
    // What came before the escape reached the guest; the escape and what
    // followed did not.
    let typed = || {
        mock.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.starts_with("typed"))
            .cloned()
            .collect::<Vec<_>>()
    };
    for _ in 0..100 {
        if typed().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(typed(), ["typed \"ls -l\\r\"", "typed \"migrate\\r\"", "typed \"x\""]);
}

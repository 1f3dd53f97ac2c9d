//! `channel-bridge serve` as a child process, as an operator runs it: killed when the test
//! ends, and found by the address it logs once it listens.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use secrecy::ExposeSecret;

/// A child process killed (and reaped) when a test ends without stopping it, so a failed
/// assertion leaves no `serve` running.
pub struct KilledOnDrop(pub Option<std::process::Child>);

impl KilledOnDrop {
    pub fn child(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("the child is still owned")
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The address `serve` logs once it listens (`"message": "listening"`, with
/// `CB_LOG_FORMAT=json`); the rest of its log is drained on a thread of its own so that the
/// pipe never fills.
pub async fn listening_addr(stderr: std::process::ChildStderr) -> String {
    let read = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let addr = lines.by_ref().map_while(Result::ok).find_map(|line| {
            let line: serde_json::Value = serde_json::from_str(&line).ok()?;
            (line["message"] == "listening").then(|| line["addr"].as_str().map(str::to_owned))?
        });
        std::thread::spawn(move || lines.for_each(drop));
        addr
    });
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("serve starts listening within 30 s")
        .unwrap()
        .expect("serve logs the address it listens on")
}

/// A fresh `CB_SECRETS_KEY` value for a child `serve`, which refuses to start without a key.
pub fn secrets_key(id: &str) -> String {
    channel_bridge::secrets::Keyring::generate_entry(id)
        .expect("the system random source works")
        .expose_secret()
        .to_owned()
}

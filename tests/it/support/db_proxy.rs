//! A TCP proxy in front of PostgreSQL. `cut()` closes every open connection and refuses new
//! ones, the way a database outage looks to the application; `restore()` ends the outage.
//! `hold()` is a partition instead: connections stay open (new ones are accepted) but no
//! byte passes either way, and nothing reports an error; `release()` lets the held bytes
//! through.
//! It also counts the statements clients send (`statements()`), reading the frontend
//! protocol as it passes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct DbProxy {
    pub addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
    held: Arc<watch::Sender<bool>>,
    statements: Arc<AtomicU64>,
}

impl DbProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let state = up.clone();
        let (held, _) = watch::channel(false);
        let held = Arc::new(held);
        let holding = held.clone();
        let statements = Arc::new(AtomicU64::new(0));
        let counter = statements.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !*state.borrow() {
                    drop(client);
                    continue;
                }
                let gates = Gates {
                    up: state.subscribe(),
                    held: holding.subscribe(),
                };
                tokio::spawn(pipe(client, upstream, gates, counter.clone()));
            }
        });
        Self {
            addr,
            up,
            held,
            statements,
        }
    }

    /// Statements sent through the proxy so far: simple queries (`Q`, which may hold
    /// several) and executions of prepared ones (`E`).
    pub fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }

    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    pub fn restore(&self) {
        self.up.send_replace(true);
    }

    /// Stops every byte, both ways, on open and new connections, without closing any.
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Lets held bytes through again.
    pub fn release(&self) {
        self.held.send_replace(false);
    }
}

struct Gates {
    up: watch::Receiver<bool>,
    held: watch::Receiver<bool>,
}

async fn pipe(client: TcpStream, upstream: SocketAddr, gates: Gates, statements: Arc<AtomicU64>) {
    let Gates { mut up, held } = gates;
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut held_to_server = held.clone();
    let to_server = async {
        let mut counter = FrontendCounter::default();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if held_to_server.wait_for(|held| !*held).await.is_err() {
                break;
            }
            counter.feed(&buf[..n], &statements);
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let mut held_to_client = held;
    let to_client = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if held_to_client.wait_for(|held| !*held).await.is_err() {
                break;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::select! {
        _ = async { tokio::join!(to_server, to_client) } => {}
        _ = up.wait_for(|up| !*up) => {}
    }
}

/// Reads the client's side of the PostgreSQL protocol as it streams by: the untyped start
/// (an optional SSLRequest, then the StartupMessage: length first, no type byte), then
/// typed messages (1 type byte, then a length that counts itself).
#[derive(Default)]
struct FrontendCounter {
    started: bool,
    /// Bytes of the current message still to skip.
    skip: usize,
    /// Header bytes gathered so far (type byte and/or length).
    header: Vec<u8>,
}

impl FrontendCounter {
    fn feed(&mut self, mut data: &[u8], statements: &AtomicU64) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            // Typed: type byte and length. Untyped: length and the request code.
            let header_len = if self.started { 5 } else { 8 };
            let n = (header_len - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.header.len() < header_len {
                return;
            }
            let word = |at: usize| {
                u32::from_be_bytes([
                    self.header[at],
                    self.header[at + 1],
                    self.header[at + 2],
                    self.header[at + 3],
                ])
            };
            if self.started {
                if matches!(self.header[0], b'Q' | b'E') {
                    statements.fetch_add(1, Ordering::Relaxed);
                }
                self.skip = (word(1) as usize).saturating_sub(4);
            } else {
                // The SSLRequest (8 bytes, code 80877103) is followed by another untyped
                // message, the StartupMessage; after that every message is typed.
                let ssl_request = word(4) == 80_877_103;
                self.skip = (word(0) as usize).saturating_sub(8);
                self.started = !ssl_request;
            }
            self.header.clear();
        }
    }
}

/// The host:port of the test PostgreSQL server.
pub fn upstream_addr() -> SocketAddr {
    let url = reqwest::Url::parse(&super::admin_url()).expect("DATABASE_URL is a valid URL");
    let host = url.host_str().unwrap_or("127.0.0.1");
    let host = if host == "localhost" { "127.0.0.1" } else { host };
    let port = url.port().unwrap_or(5432);
    format!("{host}:{port}")
        .parse()
        .expect("DATABASE_URL host is an IP address or localhost")
}

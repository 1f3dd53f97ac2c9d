//! A TCP proxy in front of PostgreSQL. `cut()` closes every open connection and refuses new
//! ones, the way a database outage looks to the application; `restore()` ends the outage.
//! `hold()` is a partition instead: connections stay open (new ones are accepted) but no
//! byte passes either way, and nothing reports an error; `release()` lets the held bytes
//! through.
//! It also counts the statements clients send (`statements()`), reading the frontend
//! protocol as it passes, and can lose the acknowledgement of one commit
//! (`lose_commit_ack_after`): the server commits, its answer is dropped and the connection
//! closed, as when a database crashes between a commit's flush and its reply.

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
    lose_ack: Arc<LoseAck>,
}

/// One armed loss: the next COMMIT of a transaction that ran a statement containing
/// `needle`.
#[derive(Default)]
struct LoseAck {
    needle: std::sync::Mutex<Option<String>>,
    lost: AtomicU64,
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
        let lose_ack = Arc::new(LoseAck::default());
        let losing = lose_ack.clone();
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
                let watch = Watch {
                    statements: counter.clone(),
                    lose_ack: losing.clone(),
                };
                tokio::spawn(pipe(client, upstream, gates, watch));
            }
        });
        Self {
            addr,
            up,
            held,
            statements,
            lose_ack,
        }
    }

    /// The next COMMIT of a transaction that ran a statement whose SQL contains `needle`
    /// reaches the server, which commits; its answer never reaches the client, whose
    /// connection is closed.
    pub fn lose_commit_ack_after(&self, needle: &str) {
        *self.lose_ack.needle.lock().unwrap() = Some(needle.to_owned());
    }

    /// Commits whose acknowledgement was lost so far.
    pub fn acks_lost(&self) -> u64 {
        self.lose_ack.lost.load(Ordering::Relaxed)
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

struct Watch {
    statements: Arc<AtomicU64>,
    lose_ack: Arc<LoseAck>,
}

async fn pipe(client: TcpStream, upstream: SocketAddr, gates: Gates, watch: Watch) {
    let Gates { mut up, held } = gates;
    let swallow = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swallowing = swallow.clone();
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut held_to_server = held.clone();
    let to_server = async {
        let mut counter = FrontendCounter {
            watch: Some(watch),
            swallow: swallowing,
            ..FrontendCounter::default()
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if held_to_server.wait_for(|held| !*held).await.is_err() {
                break;
            }
            counter.feed(&buf[..n]);
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
            // The server's answer to the armed COMMIT: it committed; the client never knows.
            if swallow.load(Ordering::SeqCst) {
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
/// typed messages (1 type byte, then a length that counts itself). Counts statements and
/// watches for the armed commit of `LoseAck`.
#[derive(Default)]
struct FrontendCounter {
    started: bool,
    /// Bytes of the current message still to skip.
    skip: usize,
    /// Header bytes gathered so far (type byte and/or length).
    header: Vec<u8>,
    /// The body of a message read whole (Parse, Bind, Query), and how much is missing.
    body: Vec<u8>,
    wanted: usize,
    kind: u8,
    /// Prepared statements whose SQL holds the needle, and whether this transaction ran one.
    marked: std::collections::HashSet<Vec<u8>>,
    in_marked: bool,
    watch: Option<Watch>,
    swallow: Arc<std::sync::atomic::AtomicBool>,
}

impl FrontendCounter {
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.wanted > 0 {
                let n = self.wanted.min(data.len());
                self.body.extend_from_slice(&data[..n]);
                self.wanted -= n;
                data = &data[n..];
                if self.wanted == 0 {
                    self.message_read();
                }
                continue;
            }
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
                let kind = self.header[0];
                let len = (word(1) as usize).saturating_sub(4);
                if matches!(kind, b'Q' | b'E') {
                    if let Some(watch) = &self.watch {
                        watch.statements.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if matches!(kind, b'Q' | b'P' | b'B') && len > 0 {
                    self.kind = kind;
                    self.body.clear();
                    self.wanted = len;
                } else {
                    self.skip = len;
                }
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

    /// A Parse, Bind or Query read whole: its C strings say which statement runs.
    fn message_read(&mut self) {
        let Some(watch) = &self.watch else { return };
        let needle = watch.lose_ack.needle.lock().unwrap().clone();
        let mut fields = self.body.split(|b| *b == 0);
        let first = fields.next().unwrap_or_default().to_vec();
        let second = fields.next().unwrap_or_default().to_vec();
        let holds = |sql: &[u8]| {
            needle
                .as_deref()
                .is_some_and(|needle| String::from_utf8_lossy(sql).contains(needle))
        };
        match self.kind {
            // Parse: statement name, then its SQL.
            b'P' if holds(&second) => {
                self.marked.insert(first.clone());
                self.in_marked |= first.is_empty();
            }
            // Bind: portal, then statement name.
            b'B' if self.marked.contains(&second) => self.in_marked = true,
            b'Q' => {
                let sql = String::from_utf8_lossy(&first).trim().to_ascii_lowercase();
                if sql.starts_with("begin") {
                    self.in_marked = false;
                }
                if holds(&first) {
                    self.in_marked = true;
                }
                if sql == "commit" && self.in_marked {
                    self.in_marked = false;
                    let armed = watch.lose_ack.needle.lock().unwrap().take().is_some();
                    if armed {
                        watch.lose_ack.lost.fetch_add(1, Ordering::Relaxed);
                        self.swallow.store(true, Ordering::SeqCst);
                    }
                }
            }
            _ => {}
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

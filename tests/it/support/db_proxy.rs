//! A TCP proxy in front of PostgreSQL. `cut()` closes every open connection and refuses new
//! ones, the way a database outage looks to the application; `restore()` ends the outage.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct DbProxy {
    pub addr: SocketAddr,
    up: Arc<watch::Sender<bool>>,
}

impl DbProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (up, _) = watch::channel(true);
        let up = Arc::new(up);
        let state = up.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if !*state.borrow() {
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(client, upstream, state.subscribe()));
            }
        });
        Self { addr, up }
    }

    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

async fn pipe(mut client: TcpStream, upstream: SocketAddr, mut up: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = up.wait_for(|up| !*up) => {}
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

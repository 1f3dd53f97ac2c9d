//! The echo `agent-bridge`, behind a layer that keeps each dispatch it answered for the
//! walkthrough's "the agent saw". A rejected one is not kept: it never became part of a turn.
//! The script switches the echo's choices on (`--echo --choices`) for the one question it
//! taps, and its picture (`--echo --file`) for one answer, so the other answers stay plain.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower::ServiceExt;

use crate::agent_bridge::{self, BridgeConfig};
use crate::dispatch::payload::DispatchOut;

#[derive(Default)]
pub(super) struct SeenDispatches(Mutex<Vec<DispatchOut>>);

impl SeenDispatches {
    pub(super) fn latest(&self) -> Option<DispatchOut> {
        self.0.lock().expect("lock holders never panic").last().cloned()
    }
}

/// What the echo adds to its next answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum EchoMode {
    Plain,
    /// `--choices`: Yes/No.
    OfferingChoices,
    /// `--file`: its picture.
    SendingAFile,
}

/// The echo's mode for the next dispatches, switched by the script.
#[derive(Default)]
pub(super) struct EchoSwitch(AtomicU8);

impl EchoSwitch {
    pub(super) fn set(&self, mode: EchoMode) {
        self.0.store(mode as u8, Ordering::SeqCst);
    }

    pub(super) fn mode(&self) -> EchoMode {
        match self.0.load(Ordering::SeqCst) {
            1 => EchoMode::OfferingChoices,
            2 => EchoMode::SendingAFile,
            _ => EchoMode::Plain,
        }
    }
}

struct Echoes {
    plain: Router,
    offering: Router,
    picturing: Router,
    switch: Arc<EchoSwitch>,
}

pub(super) fn observed_echo_bridge(
    secret: &str,
    seen: Arc<SeenDispatches>,
    switch: Arc<EchoSwitch>,
) -> anyhow::Result<Router> {
    let echoes = Arc::new(Echoes {
        plain: agent_bridge::router(BridgeConfig::echo(secret))?,
        offering: agent_bridge::router(BridgeConfig::echo_offering_choices(secret))?,
        picturing: agent_bridge::router(BridgeConfig::echo_sending_a_file(secret))?,
        switch,
    });
    let bridge = Router::new().fallback(echo).with_state(echoes);
    Ok(bridge.layer(axum::middleware::from_fn_with_state(seen, observe)))
}

async fn echo(State(echoes): State<Arc<Echoes>>, request: Request) -> Response {
    let bridge = match echoes.switch.mode() {
        EchoMode::Plain => echoes.plain.clone(),
        EchoMode::OfferingChoices => echoes.offering.clone(),
        EchoMode::SendingAFile => echoes.picturing.clone(),
    };
    match bridge.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

async fn observe(State(seen): State<Arc<SeenDispatches>>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 8 * 1024 * 1024).await else {
        return axum::http::StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let dispatch = serde_json::from_slice::<DispatchOut>(&bytes).ok();
    let response = next.run(Request::from_parts(parts, Body::from(bytes))).await;
    if let (true, Some(dispatch)) = (response.status().is_success(), dispatch) {
        seen.0.lock().expect("lock holders never panic").push(dispatch);
    }
    response
}

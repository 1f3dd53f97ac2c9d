//! The echo `agent-bridge`, behind a layer that keeps each dispatch it answered for the
//! walkthrough's "the agent saw". A rejected one is not kept: it never became part of a turn.
//! The script switches the echo's choices on (`--echo --choices`) for the one question it
//! taps, so the other answers stay plain text.

use std::sync::atomic::{AtomicBool, Ordering};
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

/// Whether the echo offers its Yes/No with the next answers.
#[derive(Default)]
pub(super) struct OfferChoices(AtomicBool);

impl OfferChoices {
    pub(super) fn set(&self, on: bool) {
        self.0.store(on, Ordering::SeqCst);
    }
}

struct Echoes {
    plain: Router,
    offering: Router,
    offer: Arc<OfferChoices>,
}

pub(super) fn observed_echo_bridge(
    secret: &str,
    seen: Arc<SeenDispatches>,
    offer: Arc<OfferChoices>,
) -> anyhow::Result<Router> {
    let echoes = Arc::new(Echoes {
        plain: agent_bridge::router(BridgeConfig::echo(secret))?,
        offering: agent_bridge::router(BridgeConfig::echo_offering_choices(secret))?,
        offer,
    });
    let bridge = Router::new().fallback(echo).with_state(echoes);
    Ok(bridge.layer(axum::middleware::from_fn_with_state(seen, observe)))
}

async fn echo(State(echoes): State<Arc<Echoes>>, request: Request) -> Response {
    let bridge = match echoes.offer.0.load(Ordering::SeqCst) {
        true => echoes.offering.clone(),
        false => echoes.plain.clone(),
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

//! The echo `agent-bridge`, behind a layer that keeps each dispatch it answered for the
//! walkthrough's "the agent saw". A rejected one is not kept: it never became part of a turn.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use crate::agent_bridge::{self, BridgeConfig};
use crate::dispatch::payload::DispatchOut;

#[derive(Default)]
pub(super) struct SeenDispatches(Mutex<Vec<DispatchOut>>);

impl SeenDispatches {
    pub(super) fn latest(&self) -> Option<DispatchOut> {
        self.0.lock().expect("lock holders never panic").last().cloned()
    }
}

pub(super) fn observed_echo_bridge(secret: &str, seen: Arc<SeenDispatches>) -> anyhow::Result<Router> {
    let bridge = agent_bridge::router(BridgeConfig::echo(secret))?;
    Ok(bridge.layer(axum::middleware::from_fn_with_state(seen, observe)))
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

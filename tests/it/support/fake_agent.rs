//! A real HTTP server playing the agent proxy. It verifies each dispatch's Standard Webhooks
//! signature with the same verifier an agent would use, records what it received, and
//! answers from a script (then with a default echo). It speaks HTTP/1.1 and HTTP/2 with
//! prior knowledge (`h2c`), as the gateway's agent client is told to (`CB_AGENT_HTTP2`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use channel_bridge::dispatch::payload::DispatchOut;
use channel_bridge::signature;
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

/// One dispatch as the agent saw it.
#[derive(Debug, Clone)]
pub struct AgentCall {
    pub idempotency_key: String,
    pub webhook_id: String,
    pub payload: DispatchOut,
    pub raw: Value,
    /// The W3C `traceparent` header, when the gateway exports traces.
    pub traceparent: Option<String>,
    pub version: Version,
}

/// How to answer the next call.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Status, JSON body, optional Retry-After seconds.
    Json(u16, Value, Option<u64>),
    /// A raw body with status 200 (for unreadable answers).
    Raw(&'static str),
    /// Never answer (the worker's process is "killed" meanwhile).
    Hang,
    /// This answer (status 200, JSON body) after this long (an agent that thinks).
    JsonAfter(std::time::Duration, Value),
    /// A `text/event-stream` answer, written step by step.
    Stream(Vec<Chunk>),
}

/// One step of a streamed answer.
#[derive(Debug, Clone)]
pub enum Chunk {
    /// Raw SSE text written as one chunk (`"data: …\n\n"`).
    Event(String),
    /// Waits until the test adds a permit.
    Wait(Arc<Semaphore>),
    /// Never writes again and never ends (the worker is "killed" meanwhile).
    Hang,
}

impl Chunk {
    /// An OpenAI chat completion chunk carrying `text`.
    pub fn openai(text: &str) -> Self {
        let chunk = json!({"id": "chatcmpl-s", "object": "chat.completion.chunk",
                           "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]});
        Self::Event(format!("data: {chunk}\n\n"))
    }

    /// OpenAI's end of stream.
    pub fn openai_done() -> Self {
        Self::Event("data: [DONE]\n\n".into())
    }

    /// The gateway format's delta.
    pub fn delta(text: &str) -> Self {
        Self::Event(format!("event: delta\ndata: {}\n\n", json!({"content": text})))
    }

    /// The gateway format's final event, with this data.
    pub fn done(data: Value) -> Self {
        Self::Event(format!("event: done\ndata: {data}\n\n"))
    }
}

/// The streamed body: each step in turn; the stream ends after the last one.
fn stream_body(chunks: Vec<Chunk>) -> Response {
    let steps = futures::stream::unfold(chunks.into_iter(), |mut chunks| async move {
        loop {
            match chunks.next()? {
                Chunk::Event(text) => return Some((Ok::<_, std::io::Error>(Bytes::from(text)), chunks)),
                Chunk::Wait(gate) => gate.acquire().await.expect("gate stays open").forget(),
                Chunk::Hang => std::future::pending::<()>().await,
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(axum::body::Body::from_stream(steps))
        .unwrap()
}

#[derive(Default)]
struct AgentState {
    secret: String,
    calls: Mutex<Vec<AgentCall>>,
    script: Mutex<VecDeque<Reply>>,
    arrived: Notify,
    /// When set, each answer waits for a permit (a "slow" agent the test paces).
    gate: Option<Arc<Semaphore>>,
    in_flight: Mutex<(usize, usize)>,
    /// TCP connections accepted.
    connections: AtomicUsize,
    /// `feedback` events received: (webhook-id, body).
    feedback: Mutex<Vec<(String, Value)>>,
    /// Feedback events still to answer 503 before answering 200.
    feedback_failures: AtomicUsize,
}

pub struct FakeAgent {
    pub url: String,
    state: Arc<AgentState>,
}

impl FakeAgent {
    pub async fn start(secret: &str) -> Self {
        Self::start_with(secret, None).await
    }

    /// An agent that holds every answer until the test adds a permit to `gate`.
    pub async fn start_gated(secret: &str, gate: Arc<Semaphore>) -> Self {
        Self::start_with(secret, Some(gate)).await
    }

    async fn start_with(secret: &str, gate: Option<Arc<Semaphore>>) -> Self {
        let state = Arc::new(AgentState {
            secret: secret.to_owned(),
            gate,
            ..Default::default()
        });
        let app = Router::new()
            .route("/agent", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/agent", listener.local_addr().unwrap());
        tokio::spawn(serve(listener, app, state.clone()));
        Self { url, state }
    }

    /// TCP connections the gateway opened to it.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    pub fn calls(&self) -> Vec<AgentCall> {
        self.state.calls.lock().unwrap().clone()
    }

    /// The `feedback` events received, as (webhook-id, body); they are not calls.
    pub fn feedback(&self) -> Vec<(String, Value)> {
        self.state.feedback.lock().unwrap().clone()
    }

    /// The next `n` feedback events are answered 503.
    pub fn fail_feedback(&self, n: usize) {
        self.state.feedback_failures.store(n, Ordering::SeqCst);
    }

    /// The most calls that were ever being answered at the same time.
    pub fn max_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Waits until at least `n` calls arrived.
    pub async fn wait_for_calls(&self, n: usize) {
        loop {
            let notified = self.state.arrived.notified();
            if self.state.calls.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::timeout(std::time::Duration::from_secs(20), notified)
                .await
                .expect("the agent receives the expected calls");
        }
    }
}

fn feedback(state: &AgentState, webhook_id: String, raw: Value) -> Response {
    state.feedback.lock().unwrap().push((webhook_id, raw));
    let failing = state
        .feedback_failures
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        StatusCode::SERVICE_UNAVAILABLE.into_response()
    } else {
        StatusCode::OK.into_response()
    }
}

/// HTTP/1.1 or HTTP/2 (the client's preface decides) on each connection, streams unlimited.
async fn serve(listener: tokio::net::TcpListener, app: Router, state: Arc<AgentState>) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        state.connections.fetch_add(1, Ordering::SeqCst);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(None);
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn receive(
    State(state): State<Arc<AgentState>>,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let now = chrono::Utc::now().timestamp();
    let verified = signature::verify(
        &state.secret,
        header("webhook-id").as_deref(),
        header("webhook-timestamp").as_deref(),
        header("webhook-signature").as_deref(),
        &body,
        now,
    );
    if let Err(err) = verified {
        return (StatusCode::UNAUTHORIZED, err.to_string()).into_response();
    }
    let raw: Value = serde_json::from_slice(&body).expect("dispatch body is JSON");
    if raw["type"] == "feedback" {
        return feedback(&state, header("webhook-id").unwrap_or_default(), raw);
    }
    let payload: DispatchOut =
        serde_json::from_value(raw.clone()).expect("dispatch body has the documented shape");
    let call = AgentCall {
        idempotency_key: header("idempotency-key").unwrap_or_default(),
        webhook_id: header("webhook-id").unwrap_or_default(),
        payload,
        raw,
        traceparent: header("traceparent"),
        version,
    };
    let content = call.payload.content.clone();
    let history_len = call.payload.messages.len() - 1;
    state.calls.lock().unwrap().push(call);
    state.arrived.notify_waiters();
    let reply = state.script.lock().unwrap().pop_front();

    {
        let mut in_flight = state.in_flight.lock().unwrap();
        in_flight.0 += 1;
        in_flight.1 = in_flight.1.max(in_flight.0);
    }
    if let Some(gate) = &state.gate {
        gate.acquire().await.expect("gate stays open").forget();
    }
    state.in_flight.lock().unwrap().0 -= 1;

    match reply {
        None => (
            StatusCode::OK,
            axum::Json(json!({ "content": format!("answer to {content} ({history_len} before)") })),
        )
            .into_response(),
        Some(Reply::Json(status, body, retry_after)) => {
            let mut response = (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            if let Some(secs) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", secs.to_string().parse().unwrap());
            }
            response
        }
        Some(Reply::Raw(body)) => (StatusCode::OK, body).into_response(),
        Some(Reply::Hang) => std::future::pending().await,
        Some(Reply::JsonAfter(delay, body)) => {
            tokio::time::sleep(delay).await;
            (StatusCode::OK, axum::Json(body)).into_response()
        }
        Some(Reply::Stream(chunks)) => stream_body(chunks),
    }
}

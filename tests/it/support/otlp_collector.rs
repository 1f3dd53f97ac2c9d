//! A real HTTP server playing an OpenTelemetry collector's OTLP/HTTP receiver: it accepts
//! `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`, as a collector's port
//! 4318 does, and keeps every span it received, flattened with its service name.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// `Span.kind` values of the OTLP protocol.
pub const KIND_SERVER: i32 = 2;
pub const KIND_CLIENT: i32 = 3;
pub const KIND_CONSUMER: i32 = 5;

/// One span as the collector received it; ids in lowercase hex, as `traceparent` has them.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub service: String,
    pub name: String,
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// String and integer attributes, the others as their debug form.
    pub attributes: HashMap<String, String>,
    /// Everything else the span carries (events, status), to search for what must not be there.
    pub rest: String,
}

#[derive(Default)]
struct CollectorState {
    spans: Mutex<Vec<ReceivedSpan>>,
}

pub struct OtlpCollector {
    /// The full traces URL (`http://127.0.0.1:port/v1/traces`).
    pub traces_url: String,
    state: Arc<CollectorState>,
}

impl OtlpCollector {
    pub async fn start() -> Self {
        let state = Arc::new(CollectorState::default());
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let traces_url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { traces_url, state }
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.state.spans.lock().unwrap().clone()
    }
}

async fn receive(
    State(state): State<Arc<CollectorState>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type != Some("application/x-protobuf") {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, "protobuf only").into_response();
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, "not an ExportTraceServiceRequest").into_response();
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default();
        let service = attributes(&resource.attributes)
            .remove("service.name")
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name.clone(),
                    kind: span.kind,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                    rest: format!("{:?} {:?} {:?}", span.events, span.status, span.links),
                });
            }
        }
    }
    state.spans.lock().unwrap().extend(received);
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        answer,
    )
        .into_response()
}

fn attributes(pairs: &[KeyValue]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|pair| {
            let value = match pair.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(text)) => text.clone(),
                Some(AnyValue::IntValue(number)) => number.to_string(),
                Some(AnyValue::BoolValue(flag)) => flag.to_string(),
                other => format!("{other:?}"),
            };
            (pair.key.clone(), value)
        })
        .collect()
}

//! Posting webhooks as the platforms do, and naming what went wrong.

/// Sends one webhook. `Ok` means 200 with the turn queued; anything else is named: the
/// status, `200 not queued`, or the transport error's kind.
pub async fn post_queued(request: reqwest::RequestBuilder) -> Result<(), String> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    let answer = response.bytes().await.map_err(transport_error)?;
    if status != reqwest::StatusCode::OK {
        return Err(status.as_u16().to_string());
    }
    // The answer is small; a substring check avoids parsing JSON on the client's CPU.
    if !answer.windows(10).any(|w| w == b"\"queued\":1") {
        return Err("200 not queued".into());
    }
    Ok(())
}

/// `timeout`, `connect` or `transport`.
pub fn transport_error(err: reqwest::Error) -> String {
    if err.is_timeout() {
        "timeout".into()
    } else if err.is_connect() {
        "connect".into()
    } else {
        "transport".into()
    }
}

//! Slack inbound protocol (PLATFORMS.md). Not implemented yet.

use super::{Channel, HookError, HookRequest, Parsed};
use crate::domain::{Connector, Platform};

pub struct Slack;

impl Channel for Slack {
    fn platform(&self) -> Platform {
        Platform::Slack
    }

    fn verify(&self, _connector: &Connector, _request: &HookRequest<'_>) -> Result<(), HookError> {
        Err(HookError::BadSignature)
    }

    fn parse(&self, _connector: &Connector, _body: &[u8]) -> Result<Parsed, HookError> {
        Err(HookError::Malformed("not implemented".into()))
    }
}

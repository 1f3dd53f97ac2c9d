//! Telegram inbound protocol (PLATFORMS.md). Not implemented yet.

use super::{Channel, HookError, HookRequest, Parsed};
use crate::domain::{Connector, Platform};

pub struct Telegram;

impl Channel for Telegram {
    fn platform(&self) -> Platform {
        Platform::Telegram
    }

    fn verify(&self, _connector: &Connector, _request: &HookRequest<'_>) -> Result<(), HookError> {
        Err(HookError::BadSignature)
    }

    fn parse(&self, _connector: &Connector, _body: &[u8]) -> Result<Parsed, HookError> {
        Err(HookError::Malformed("not implemented".into()))
    }
}

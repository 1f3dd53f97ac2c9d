//! WhatsApp inbound protocol (PLATFORMS.md). Not implemented yet.

use super::{Channel, HookError, HookRequest, Parsed};
use crate::domain::{Connector, Platform};

pub struct WhatsApp;

impl Channel for WhatsApp {
    fn platform(&self) -> Platform {
        Platform::Whatsapp
    }

    fn verify(&self, _connector: &Connector, _request: &HookRequest<'_>) -> Result<(), HookError> {
        Err(HookError::BadSignature)
    }

    fn parse(&self, _connector: &Connector, _body: &[u8]) -> Result<Parsed, HookError> {
        Err(HookError::Malformed("not implemented".into()))
    }
}

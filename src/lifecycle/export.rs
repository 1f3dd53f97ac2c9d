//! Export: a person's or the whole tenant's turns as JSON Lines, one line per turn with its
//! reply parts (`ExportLine`: the listing's fields of `GET /v1/admin/messages` plus
//! `reply_parts` as `GET /v1/admin/messages/{id}` shows them), oldest first.
//!
//! Read page by page (`PAGE` turns, each page its own tenant transaction, keyset on
//! `(received_at, id)`), so a large tenant is streamed and never held in memory. Turns that
//! arrive during an export sort after the ones already read and are included; a turn
//! deleted meanwhile (retention, erasure) may or may not be.

use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;
use utoipa::ToSchema;

use crate::admin::messages::{MessageOut, ReplyPartOut};
use crate::db::lifecycle::{self, Person};
use crate::db::TenantTx;
use crate::domain::{MessageId, TenantId};

/// Turns read per transaction.
pub const PAGE: i64 = 200;

/// One line of an export.
#[derive(Debug, Serialize, ToSchema)]
pub struct ExportLine {
    #[serde(flatten)]
    pub message: MessageOut,
    pub reply_parts: Vec<ReplyPartOut>,
}

/// An export in progress: hands out its lines a page at a time.
pub struct Export {
    pool: PgPool,
    tenant: TenantId,
    people: Vec<Person>,
    after: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
    done: bool,
    /// Bound on each page's database work (the admin request deadline).
    deadline: Duration,
}

impl Export {
    /// The turns of every one of `people` (each narrows), or every turn of the tenant when
    /// there is none.
    pub fn new(pool: PgPool, tenant: TenantId, people: Vec<Person>, deadline: Duration) -> Self {
        Self {
            pool,
            tenant,
            people,
            after: None,
            done: false,
            deadline,
        }
    }

    /// The next page's lines, each ending in `\n`; `None` once every turn was read.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, sqlx::Error> {
        if self.done {
            return Ok(None);
        }
        let page = crate::db::within(self.deadline, self.read_page()).await?;
        self.done = page.len() < PAGE as usize;
        let Some((last, _)) = page.last() else {
            return Ok(None);
        };
        self.after = Some((last.received_at, last.id));
        let mut chunk = Vec::new();
        for (message, parts) in page {
            let line = ExportLine {
                message: message.into(),
                reply_parts: parts.into_iter().map(ReplyPartOut::from).collect(),
            };
            serde_json::to_writer(&mut chunk, &line).map_err(|err| sqlx::Error::Decode(err.into()))?;
            chunk.push(b'\n');
        }
        Ok(Some(chunk))
    }

    async fn read_page(
        &self,
    ) -> Result<
        Vec<(
            crate::db::messages::MessageRow,
            Vec<crate::db::messages::ReplyPart>,
        )>,
        sqlx::Error,
    > {
        let mut tx = TenantTx::begin(&self.pool, self.tenant).await?;
        let page = lifecycle::export_page(&mut tx, &self.people, self.after, PAGE).await?;
        tx.commit().await?;
        Ok(page)
    }

    /// The rest of the export as a body stream, after `first` (the page the caller already
    /// read, so that a database that cannot be reached answers 503 rather than a cut
    /// stream). An error later cuts the stream: the client sees the body end early, without
    /// the final chunk of the chunked encoding.
    pub fn into_stream(
        self,
        first: Option<Vec<u8>>,
    ) -> impl futures::Stream<Item = Result<Vec<u8>, sqlx::Error>> + Send + 'static {
        futures::stream::unfold((self, first), |(mut export, pending)| async move {
            if let Some(chunk) = pending {
                return Some((Ok(chunk), (export, None)));
            }
            match export.next_chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), (export, None))),
                Ok(None) => None,
                Err(err) => {
                    tracing::warn!(tenant_id = %export.tenant, error = %err, "export cut short");
                    export.done = true;
                    Some((Err(err), (export, None)))
                }
            }
        })
    }
}

//! Export as JSON Lines, one turn with its reply parts per line, oldest first, a page per
//! tenant transaction (keyset on `(received_at, id)`): streamed, never held in memory. The
//! caller chooses how a turn is written (`Line`: the admin API's `ExportLine`).

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use sqlx::PgPool;

use crate::db::lifecycle::{self, Person};
use crate::db::messages::MessageRow;
use crate::db::parts::ReplyPart;
use crate::db::reactions::ReactionOut;
use crate::db::TenantTx;
use crate::domain::{MessageId, TenantId};

pub const PAGE: i64 = 200;

/// One exported turn: the turn and its reply parts.
pub type Turn = (MessageRow, Vec<ReplyPart>, Vec<ReactionOut>);

pub struct Export<Line> {
    pool: PgPool,
    tenant: TenantId,
    people: Vec<Person>,
    after: Option<(chrono::DateTime<chrono::Utc>, MessageId)>,
    done: bool,
    /// Per page (the admin request deadline).
    deadline: Duration,
    line: PhantomData<fn(Turn) -> Line>,
}

impl<Line: From<Turn> + Serialize + 'static> Export<Line> {
    /// No `people`: every turn of the tenant.
    pub fn new(pool: PgPool, tenant: TenantId, people: Vec<Person>, deadline: Duration) -> Self {
        Self {
            pool,
            tenant,
            people,
            after: None,
            done: false,
            deadline,
            line: PhantomData,
        }
    }

    /// `None` once every turn was read.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, sqlx::Error> {
        if self.done {
            return Ok(None);
        }
        let page = crate::db::within(self.deadline, self.read_page()).await?;
        self.done = page.len() < PAGE as usize;
        let Some((last, ..)) = page.last() else {
            return Ok(None);
        };
        self.after = Some((last.received_at, last.id));
        let mut chunk = Vec::new();
        for turn in page {
            serde_json::to_writer(&mut chunk, &Line::from(turn))
                .map_err(|err| sqlx::Error::Decode(err.into()))?;
            chunk.push(b'\n');
        }
        Ok(Some(chunk))
    }

    async fn read_page(&self) -> Result<Vec<Turn>, sqlx::Error> {
        let mut tx = TenantTx::begin(&self.pool, self.tenant).await?;
        let page = lifecycle::export_page(&mut tx, &self.people, self.after, PAGE).await?;
        tx.commit().await?;
        Ok(page)
    }

    /// The caller reads `first` itself, so an unreachable database is a 503, not a cut
    /// stream. A later error ends the body without the final chunk.
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

//! An answer's reply parts (`channel_replies`): what an answer becomes once made ready for
//! its platform ([`Reply`]), the rows each part is, and their inserts and reads. A part's
//! state changes are `crate::turn`'s.

use serde::Serialize;

use super::queue::LeaseToken;
use super::TenantTx;
use crate::choices::Offered;
use crate::domain::MessageId;
use crate::media::outgoing::{FilePart, OutgoingFile};

/// An answer made ready to post: its text parts (the last carrying `choices`), then its
/// files, then the reaction it sets on the user's message, each a part of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    pub texts: Vec<String>,
    pub choices: Option<Offered>,
    pub files: Vec<FilePart>,
    /// As its platform names it (`PlatformApi::reaction_name`).
    pub react: Option<String>,
}

/// One part's row as first written.
struct NewPart<'a> {
    content: &'a str,
    attachment: Option<&'a OutgoingFile>,
    reaction: bool,
    choices: Option<&'a Offered>,
}

impl Reply {
    pub fn text(texts: Vec<String>) -> Self {
        Self {
            texts,
            ..Self::default()
        }
    }

    pub fn len(&self) -> usize {
        self.texts.len() + self.files.len() + usize::from(self.react.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn rows(&self) -> Vec<NewPart<'_>> {
        let last_text = self.texts.len().checked_sub(1);
        let texts = self.texts.iter().enumerate().map(|(i, text)| NewPart {
            content: text,
            attachment: None,
            reaction: false,
            choices: self.choices.as_ref().filter(|_| Some(i) == last_text),
        });
        let files = self.files.iter().map(|f| NewPart {
            content: &f.caption,
            attachment: Some(&f.file),
            reaction: false,
            choices: None,
        });
        let react = self.react.iter().map(|emoji| NewPart {
            content: emoji,
            attachment: None,
            reaction: true,
            choices: None,
        });
        texts.chain(files).chain(react).collect()
    }

    /// The parts as `insert_reply_parts` writes them, without reading them back: part 0
    /// `sending` (attempt 1) under `lease` when one is given, the rest `pending`.
    pub fn parts(&self, lease: Option<LeaseToken>) -> Vec<ReplyPart> {
        (0..)
            .zip(self.rows())
            .map(|(part_index, row)| {
                let marked = lease.filter(|_| part_index == 0);
                ReplyPart {
                    part_index,
                    content: row.content.to_owned(),
                    status: match marked {
                        Some(_) => crate::domain::PartStatus::Sending,
                        None => crate::domain::PartStatus::Pending,
                    },
                    platform_message_id: None,
                    delivery_status: None,
                    attempts: i32::from(marked.is_some()),
                    last_error: None,
                    sending_since: None,
                    sending_lease: marked,
                    sent_at: None,
                    choices: row.choices.cloned(),
                    chosen: None,
                    edit_of: None,
                    attachment: row.attachment.cloned(),
                    upload_ref: None,
                    reaction: row.reaction,
                }
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ReplyPart {
    pub part_index: i32,
    pub content: String,
    pub status: crate::domain::PartStatus,
    pub platform_message_id: Option<String>,
    pub delivery_status: Option<String>,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub sending_since: Option<chrono::DateTime<chrono::Utc>>,
    /// The lease of the job that marked it `sending` (migration 37); read for delivery only.
    #[serde(skip)]
    #[sqlx(default)]
    pub sending_lease: Option<crate::db::queue::LeaseToken>,
    pub sent_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The buttons posted with the part (an answer's last part), and which was tapped.
    #[sqlx(json(nullable), default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choices: Option<crate::choices::Offered>,
    #[sqlx(json(nullable), default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chosen: Option<crate::choices::Chosen>,
    /// An edit of part `edit_of`'s message (its choices closed after a tap), not a message.
    #[sqlx(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edit_of: Option<i32>,
    /// The file the part posts (its `content` the caption), shown without inline bytes.
    #[sqlx(json(nullable), default)]
    #[serde(
        skip_serializing_if = "Option::is_none",
        rename = "file",
        serialize_with = "file_summary"
    )]
    pub attachment: Option<OutgoingFile>,
    /// What the platform answered for the file's bytes before the post that shows them.
    #[sqlx(default)]
    #[serde(skip)]
    pub upload_ref: Option<String>,
    /// The part sets `content` as a reaction on the user's message.
    #[sqlx(default)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reaction: bool,
}

fn file_summary<S: serde::Serializer>(file: &Option<OutgoingFile>, serializer: S) -> Result<S::Ok, S::Error> {
    file.as_ref().map(OutgoingFile::summary).serialize(serializer)
}

/// Existing parts are kept: a repeated store after a crash must not reset a posted part.
pub async fn insert_reply_parts(
    tx: &mut TenantTx,
    message: MessageId,
    reply: &Reply,
) -> Result<(), sqlx::Error> {
    insert_reply_parts_from(tx, message, 0, reply).await
}

/// Parts `first`, `first + 1`, … (`pending`), for an answer that grows (`turn::later`).
pub async fn insert_reply_parts_from(
    tx: &mut TenantTx,
    message: MessageId,
    first: i32,
    reply: &Reply,
) -> Result<(), sqlx::Error> {
    insert_rows(tx, message, first, &reply.rows(), None).await
}

/// The files and reaction of answers whose texts the turn writer stored in bulk (parts
/// `reply.texts.len()` on); the first of them `sending` under `lease` when there is no text.
pub async fn insert_extras(
    tx: &mut TenantTx,
    message: MessageId,
    reply: &Reply,
    lease: LeaseToken,
) -> Result<(), sqlx::Error> {
    let first = i32::try_from(reply.texts.len()).unwrap_or(i32::MAX);
    let rows = reply.rows().split_off(reply.texts.len());
    let marked = reply.texts.is_empty().then_some(lease);
    insert_rows(tx, message, first, &rows, marked).await
}

async fn insert_rows(
    tx: &mut TenantTx,
    message: MessageId,
    first: i32,
    rows: &[NewPart<'_>],
    marked: Option<LeaseToken>,
) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let tenant = tx.tenant();
    let now = chrono::Utc::now();
    // `VALUES`, which Citus routes to the tenant's shard as it is (an `INSERT … SELECT FROM
    // unnest` would go through the coordinator as a `COPY`, which row-level security refuses).
    let mut sql = sqlx::QueryBuilder::new(
        "insert into channel_replies (tenant_id, message_id, part_index, content, attachment, reaction,
                                      choices, choice_token, status, attempts, sending_since, sending_lease) ",
    );
    sql.push_values((first..).zip(rows), |mut row, (index, part)| {
        let lease = marked.filter(|_| index == first);
        row.push_bind(tenant)
            .push_bind(message)
            .push_bind(index)
            .push_bind(part.content)
            .push_bind(part.attachment.map(sqlx::types::Json))
            .push_bind(part.reaction)
            .push_bind(part.choices.map(sqlx::types::Json))
            .push_bind(part.choices.map(|c| c.token.as_str()))
            .push_bind(if lease.is_some() { "sending" } else { "pending" })
            .push_bind(i32::from(lease.is_some()))
            .push_bind(lease.map(|_| now))
            .push_bind(lease);
    });
    sql.push(" on conflict (tenant_id, message_id, part_index) do nothing");
    sql.build().execute(tx.conn()).await?;
    Ok(())
}

/// The buttons posted with part `part` of `message`'s answer; kept as first stored.
/// Those of `messages` with a part still to post. None asked, no statement.
pub async fn with_pending_parts(
    tx: &mut TenantTx,
    messages: &[MessageId],
) -> Result<Vec<MessageId>, sqlx::Error> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(
        "select distinct message_id from channel_replies
          where tenant_id = $1 and message_id = any($2) and status = 'pending'",
    )
    .bind(tx.tenant())
    .bind(messages)
    .fetch_all(tx.conn())
    .await
}

pub async fn offer_choices(
    tx: &mut TenantTx,
    message: MessageId,
    part: usize,
    offered: &crate::choices::Offered,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query(
        "update channel_replies set choices = $4, choice_token = $5
          where tenant_id = $1 and message_id = $2 and part_index = $3 and choices is null",
    )
    .bind(tenant)
    .bind(message)
    .bind(i32::try_from(part).unwrap_or(i32::MAX))
    .bind(sqlx::types::Json(offered))
    .bind(offered.token.as_str())
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// Adds the edit of part `of` (`note`: what was chosen) after `message`'s last part.
pub async fn add_choice_edit(
    tx: &mut TenantTx,
    message: MessageId,
    of: i32,
    note: &str,
) -> Result<(), sqlx::Error> {
    let tenant = tx.tenant();
    // Two statements: Citus runs an INSERT … SELECT with an aggregate through the
    // coordinator by COPY, which row-level security refuses. The caller holds the lock on
    // the part with the choices, so no other edit of this turn comes in between.
    let next: i32 = sqlx::query_scalar(
        "select coalesce(max(part_index) + 1, 0) from channel_replies
          where tenant_id = $1 and message_id = $2",
    )
    .bind(tenant)
    .bind(message)
    .fetch_one(tx.conn())
    .await?;
    sqlx::query(
        "insert into channel_replies (tenant_id, message_id, part_index, content, edit_of)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(tenant)
    .bind(message)
    .bind(next)
    .bind(note)
    .bind(of)
    .execute(tx.conn())
    .await?;
    Ok(())
}

pub async fn reply_parts(tx: &mut TenantTx, message: MessageId) -> Result<Vec<ReplyPart>, sqlx::Error> {
    let tenant = tx.tenant();
    sqlx::query_as(
        "select part_index, content, status, platform_message_id, delivery_status, attempts, last_error,
                sending_since, sending_lease, sent_at, choices, chosen, edit_of,
                attachment, upload_ref, reaction
           from channel_replies where tenant_id = $1 and message_id = $2 order by part_index",
    )
    .bind(tenant)
    .bind(message)
    .fetch_all(tx.conn())
    .await
}

pub async fn reply_parts_of(
    tx: &mut TenantTx,
    messages: &[MessageId],
) -> Result<Vec<(MessageId, ReplyPart)>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        message_id: MessageId,
        #[sqlx(flatten)]
        part: ReplyPart,
    }
    let tenant = tx.tenant();
    let rows: Vec<Row> = sqlx::query_as(
        "select message_id, part_index, content, status, platform_message_id, delivery_status,
                attempts, last_error, sending_since, sent_at, choices, chosen, edit_of,
                attachment, upload_ref, reaction
           from channel_replies where tenant_id = $1 and message_id = any($2)
          order by message_id, part_index",
    )
    .bind(tenant)
    .bind(messages)
    .fetch_all(tx.conn())
    .await?;
    Ok(rows.into_iter().map(|row| (row.message_id, row.part)).collect())
}

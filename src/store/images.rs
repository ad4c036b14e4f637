//! The `images` table: each image's bytes once, named by their SHA-256, which the `image`
//! blocks of messages refer to.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Store, StoreError, StoreResult};
use crate::images::CheckedImage;
use crate::protocol::Block;

/// How a stored `image` block names its image, as `instr` finds it in the block's JSON.
fn reference(image_id: &str) -> String {
    format!("\"imageId\":\"{image_id}\"")
}

/// The ids of the images `session_id`'s messages and tool calls refer to.
pub(super) fn images_of_session(
    tx: &Transaction<'_>,
    session_id: &str,
) -> StoreResult<Vec<String>> {
    let mut stmt = tx.prepare(
        "SELECT json_extract(b.value, '$.imageId')
           FROM messages AS m, json_each(m.blocks) AS b
          WHERE m.session_id = ?1 AND instr(m.blocks, '\"imageId\"') > 0
            AND json_extract(b.value, '$.type') = 'image'
         UNION
         SELECT json_extract(image, '$.imageId') FROM tool_calls
          WHERE session_id = ?1 AND image IS NOT NULL",
    )?;
    let ids = stmt
        .query_map([session_id], |row| row.get::<_, Option<String>>(0))?
        .filter_map(Result::transpose)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ids)
}

/// Deletes those of `candidates` no message or tool call of any session refers to any more
/// (images are shared: a fork, or another session sent the same bytes); how many went.
pub(super) fn collect_images(tx: &Transaction<'_>, candidates: &[String]) -> StoreResult<usize> {
    let mut stmt = tx.prepare(
        "DELETE FROM images WHERE id = ?1
            AND NOT EXISTS (SELECT 1 FROM messages WHERE instr(blocks, ?2) > 0)
            AND NOT EXISTS (SELECT 1 FROM tool_calls
                             WHERE image IS NOT NULL AND instr(image, ?2) > 0)",
    )?;
    let mut deleted = 0;
    for id in candidates {
        deleted += stmt.execute(params![id, reference(id)])?;
    }
    Ok(deleted)
}

/// An image's bytes and type, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredImage {
    pub media_type: String,
    pub data: Vec<u8>,
}

impl Store {
    /// Stores `image` unless the same bytes are there already, and returns the block that
    /// refers to it.
    pub fn put_image(&self, image: &CheckedImage) -> StoreResult<Block> {
        let id = super::checkpoints::content_hash(&image.data);
        let now = crate::util::now_ms();
        self.write(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO images (id, media_type, width, height, data, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    id,
                    image.media_type,
                    image.width,
                    image.height,
                    image.data,
                    now
                ],
            )?;
            Ok(())
        })?;
        Ok(Block::Image {
            image_id: id,
            media_type: image.media_type.to_string(),
            width: image.width,
            height: image.height,
            bytes: image.data.len() as u64,
        })
    }

    /// The image `image_id`, if it is stored.
    pub fn image(&self, image_id: &str) -> StoreResult<Option<StoredImage>> {
        self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT media_type, data FROM images WHERE id = ?1",
                    [image_id],
                    |row| {
                        Ok(StoredImage {
                            media_type: row.get(0)?,
                            data: row.get(1)?,
                        })
                    },
                )
                .optional()?)
        })
    }

    /// The image `image_id` if a message of `session_id` refers to it: a session's images are
    /// read through the session, as its messages are.
    pub fn session_image(
        &self,
        session_id: &str,
        image_id: &str,
    ) -> StoreResult<Option<StoredImage>> {
        // An id is 64 hex digits: anything else is no image, and cannot match by accident.
        if image_id.len() != 64 || !image_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let referenced = self.read(|conn| {
            Ok(conn
                .query_row(
                    "SELECT 1 FROM messages WHERE session_id = ?1 AND instr(blocks, ?2) > 0
                     LIMIT 1",
                    params![session_id, reference(image_id)],
                    |_| Ok(()),
                )
                .optional()?
                .is_some())
        })?;
        if !referenced {
            return Ok(None);
        }
        self.image(image_id)
    }

    /// Records the image tool call `call_id` read, with its result, so the tool message built
    /// from the calls (also by recovery after a stop) carries it.
    pub fn set_tool_call_image(
        &self,
        session_id: &str,
        call_id: &str,
        image: &Block,
    ) -> StoreResult<()> {
        let json = serde_json::to_string(image)
            .map_err(|e| StoreError::Corrupt(format!("an image block: {e}")))?;
        self.write(|conn| {
            conn.execute(
                "UPDATE tool_calls SET image = ?3 WHERE session_id = ?1 AND id = ?2",
                params![session_id, call_id, json],
            )?;
            Ok(())
        })
    }

    /// The images the tool calls of the assistant message `message_id` read, in the calls'
    /// order.
    pub fn tool_call_images(&self, message_id: &str) -> StoreResult<Vec<Block>> {
        let stored: Vec<String> = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT image FROM tool_calls WHERE message_id = ?1 AND image IS NOT NULL
                 ORDER BY position",
            )?;
            let rows = stmt
                .query_map([message_id], |r| r.get(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })?;
        stored
            .iter()
            .map(|json| {
                serde_json::from_str(json)
                    .map_err(|e| StoreError::Corrupt(format!("a tool call's image: {e}")))
            })
            .collect()
    }
}

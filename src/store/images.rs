//! The `images` table: each image's bytes once, named by their SHA-256, which the `image`
//! blocks of messages refer to.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreResult};
use crate::images::CheckedImage;
use crate::protocol::Block;

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
                    params![session_id, format!("\"imageId\":\"{image_id}\"")],
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
}

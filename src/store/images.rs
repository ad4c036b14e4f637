//! The `images` table: each image's bytes once, named by their SHA-256, which the `image`
//! blocks of messages refer to.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Store, StoreError, StoreResult};
use crate::images::CheckedImage;
use crate::protocol::Block;

/// The ids of the images `session_id` refers to (migration 29's `session_images`).
pub(super) fn images_of_session(
    tx: &Transaction<'_>,
    session_id: &str,
) -> StoreResult<Vec<String>> {
    let mut stmt = tx.prepare("SELECT image_id FROM session_images WHERE session_id = ?1")?;
    let ids = stmt
        .query_map([session_id], |row| row.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ids)
}

/// [`collect_images`]' statement for one image (its plan is checked in the store's tests).
pub(super) const COLLECT_IMAGE: &str = "DELETE FROM images WHERE id = ?1
    AND NOT EXISTS (SELECT 1 FROM session_images WHERE image_id = ?1)";

/// [`Store::session_image`]'s check that the session refers to the image.
pub(super) const SESSION_REFERS_TO_IMAGE: &str =
    "SELECT 1 FROM session_images WHERE session_id = ?1 AND image_id = ?2";

/// Deletes those of `candidates` no session refers to any more (images are shared: a fork,
/// or another session sent the same bytes); how many went. Called once the deleted session's
/// references are gone with it.
pub(super) fn collect_images(tx: &Transaction<'_>, candidates: &[String]) -> StoreResult<usize> {
    let mut stmt = tx.prepare(COLLECT_IMAGE)?;
    let mut deleted = 0;
    for id in candidates {
        deleted += stmt.execute([id])?;
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
    /// Stores `image` for `session_id` unless the same bytes are there already, and returns
    /// the block that refers to it. The session refers to it from now on, before the message
    /// that shows it is written: another session's delete meanwhile does not collect it.
    pub fn put_image(&self, session_id: &str, image: &CheckedImage) -> StoreResult<Block> {
        let id = super::checkpoints::content_hash(&image.data);
        let now = crate::util::now_ms();
        self.write(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
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
            tx.execute(
                "INSERT OR IGNORE INTO session_images (session_id, image_id) VALUES (?1, ?2)",
                params![session_id, id],
            )?;
            tx.commit()?;
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

    /// The image `image_id` if `session_id` refers to it: a session's images are read through
    /// the session, as its messages are.
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
                    SESSION_REFERS_TO_IMAGE,
                    params![session_id, image_id],
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Role;
    use crate::store::NewMessage;
    use crate::store::test_support::new_session;
    use pretty_assertions::assert_eq;

    fn picture(byte: u8) -> CheckedImage {
        CheckedImage {
            media_type: "image/png",
            width: 1,
            height: 1,
            data: vec![byte; 16],
        }
    }

    fn show(store: &Store, session: &str, seq: u64, image: Block) {
        store
            .append_message(&NewMessage {
                seq,
                ..NewMessage::new(session, None, Role::User, vec![image])
            })
            .unwrap();
    }

    fn stored(store: &Store, image: &Block) -> bool {
        let Block::Image { image_id, .. } = image else {
            panic!("not an image block: {image:?}");
        };
        store.image(image_id).unwrap().is_some()
    }

    /// An image stored for a message not written yet is the session's already: deleting
    /// another session that showed the same bytes keeps it, and it is read through its
    /// session once shown.
    #[test]
    fn an_image_stored_before_its_message_outlives_another_sessions_delete() {
        let store = Store::open_in_memory().unwrap();
        let (gone, sending) = (new_session(&store), new_session(&store));
        let shown = store.put_image(&gone, &picture(1)).unwrap();
        show(&store, &gone, 1, shown.clone());
        let again = store.put_image(&sending, &picture(1)).unwrap();
        assert_eq!(again, shown, "the same bytes are one image");
        assert!(store.delete_session(&gone).unwrap());
        assert!(stored(&store, &again), "the sending session refers to it");
        show(&store, &sending, 1, again.clone());
        let Block::Image { image_id, .. } = &again else {
            unreachable!()
        };
        assert!(store.session_image(&sending, image_id).unwrap().is_some());
        assert_eq!(store.session_image(&gone, image_id).unwrap(), None);
        assert!(store.delete_session(&sending).unwrap());
        assert!(!stored(&store, &again), "no session refers to it any more");
    }

    /// A fork's copy of a message, and a tool call's image, refer to their images as the
    /// session's own messages do.
    #[test]
    fn forks_and_tool_calls_refer_to_their_images() {
        let store = Store::open_in_memory().unwrap();
        let source = new_session(&store);
        let image = store.put_image(&source, &picture(2)).unwrap();
        show(&store, &source, 1, image.clone());
        let row = store.session(&source).unwrap().unwrap();
        let fork = store.fork_session(&row, 1, "fork").unwrap();
        assert!(store.delete_session(&source).unwrap());
        assert!(stored(&store, &image), "the fork refers to it");
        assert!(store.delete_session(&fork).unwrap());
        assert!(!stored(&store, &image));

        let reader = new_session(&store);
        store.insert_run("run_1", &reader, "demo").unwrap();
        store
            .write(|conn| {
                conn.execute(
                    "INSERT INTO tool_calls (id, session_id, run_id, message_id, position, name,
                                             input, status)
                     VALUES ('call_1', ?1, 'run_1', 'msg_1', 0, 'read_file', '{}', 'done')",
                    [&reader],
                )?;
                Ok(())
            })
            .unwrap();
        let read = store.put_image(&new_session(&store), &picture(3)).unwrap();
        store.set_tool_call_image(&reader, "call_1", &read).unwrap();
        let Block::Image { image_id, .. } = &read else {
            unreachable!()
        };
        assert!(store.session_image(&reader, image_id).unwrap().is_some());
    }
}
